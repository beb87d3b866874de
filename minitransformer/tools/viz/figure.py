"""What every figure shares: a Figure on its own Agg canvas (no pyplot, no global state,
headless), axis limits that can be drawn, saving it (atomically, never through a link),
decorating an axis, and checking the inputs' lengths.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from ...runtime.runs import files

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PathLike = str | os.PathLike[str]
SaveTo = str | os.PathLike[str] | IO[bytes]
"""Where a figure goes: a file name (its suffix picks the format) or a binary file (PNG)."""

DPI = 120
"""Resolution of saved PNGs."""

LIMIT = 1e300
"""The largest magnitude an axis shows. matplotlib's tick locators overflow on a range near
the largest float (±1.8e308: NumPy's "arange: cannot compute length"), so an axis whose
limits go beyond this is cut back to it, and the panel says that values are off the scale."""


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A Figure on its own Agg canvas: no pyplot, no global state, works headless."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "minitransformer.tools.viz needs matplotlib. Fix: pip install matplotlib."
        ) from exc
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    # Jupyter shows a pyplot-free Figure only through this hook (as the cell's result).
    fig._repr_png_ = lambda: _png_bytes(fig)
    return fig


def _png_bytes(fig: Figure) -> bytes:
    import io

    buffer = io.BytesIO()
    fit_limits(fig)
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def finish(fig: Figure, path: SaveTo | None) -> Figure:
    """Save the figure when ``path`` is given; return it.

    ``path`` is a binary file open for writing (a PNG goes there) or a file name: its suffix
    picks the format (``.png``, ``.pdf``, ``.svg`` ...; none: ``.png`` is added, as
    matplotlib does), its directory is made when missing, and the file is written whole
    to a temp file, then renamed over the name (runs/files.py): a crash leaves no half
    image, and a symbolic link at that name is replaced, never written through.
    """
    if path is None:
        return fig
    fit_limits(fig)
    if not isinstance(path, (str, os.PathLike)):
        fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight")
        return fig
    path = Path(path)
    if not path.suffix:
        path = path.with_name(path.name + ".png")
    kind = path.suffix[1:].lower()
    if kind not in fig.canvas.get_supported_filetypes():
        known = ", ".join(sorted(fig.canvas.get_supported_filetypes()))
        raise ValueError(f"cannot save a figure as {path}: unknown suffix; use one of {known}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with files.replacing(path.parent, path.name) as file:
        fig.savefig(file, format=kind, dpi=DPI, bbox_inches="tight")
    return fig


def fit_limits(fig: Figure) -> None:
    """Cut every axis of ``fig`` whose limits cannot be drawn back to ±LIMIT.

    Huge values (a diverged loss of 1e308, a step count near the float maximum) make
    matplotlib's automatic limits, with their margins, overflow; its tick locator then
    fails. Such an axis gets limits within ±LIMIT (a log axis within [1/LIMIT, LIMIT]);
    what lies beyond is off the scale, and a grey note in the panel says so.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        for ax in fig.axes:
            cut = False
            for get, put, scale in (
                (ax.get_xlim, ax.set_xlim, ax.get_xscale),
                (ax.get_ylim, ax.set_ylim, ax.get_yscale),
            ):
                low, high = (float(v) for v in get())
                limits = _drawable_limits(low, high, log=scale() == "log")
                if limits != (low, high):
                    put(limits)
                    cut = True
            if cut:
                ax.text(0.01, 0.99, f"values beyond ±{LIMIT:.0e} are off the scale",
                        transform=ax.transAxes, va="top", fontsize=7, color="0.4")  # fmt: skip


def _drawable_limits(low: float, high: float, *, log: bool) -> tuple[float, float]:
    """(low, high) when matplotlib can draw them, else the nearest limits it can."""
    floor = 1 / LIMIT if log else -LIMIT
    lo, hi = sorted((low, high))
    if floor <= lo and hi <= LIMIT and np.isfinite(hi - lo):
        return low, high
    lo, hi = (float(np.clip(np.nan_to_num(v, nan=0.0), floor, LIMIT)) for v in (lo, hi))
    if lo >= hi:  # all beyond one end (a single point at 1e308): the axis up to that end
        if log:
            lo, hi = (hi / 10, hi) if hi > 1 else (lo, lo * 10)
        else:
            lo, hi = (min(lo, 0.0), LIMIT) if hi > 0 else (-LIMIT, max(hi, 0.0))
    return (hi, lo) if low > high else (lo, hi)


def decorate(
    ax: Axes, xlabel: str | None, ylabel: str, title: str, *, logy: bool, legend: bool
) -> None:
    """Labels, title, a light grid, and optionally a log value axis and a legend."""
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)


def check_len(fn: str, name: str, seq: Sequence[Any] | None, expected: int, what: str) -> None:
    """Raise ValueError when ``seq`` is given and its length is not ``expected``."""
    if seq is not None and len(seq) != expected:
        raise ValueError(f"{fn}: {name} has {len(seq)} entries but {what} is {expected}.")


def check_curves(
    fn: str, x: Sequence[float] | None, curves: dict[str, Sequence[float]], name: str
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Turn x and each curve into 1-D float arrays of equal length, or raise ValueError."""
    ys = {str(label): as_floats(fn, f"{name}[{label!r}]", y) for label, y in curves.items()}
    for label, y in ys.items():
        if y.ndim != 1:
            raise ValueError(f"{fn}: {name}[{label!r}] must be 1-D, got shape {y.shape}.")
    if x is None:
        n = max((len(y) for y in ys.values()), default=0)
        xs = np.arange(n, dtype=np.float64)
    else:
        xs = as_floats(fn, "x", x)
        if xs.ndim != 1:
            raise ValueError(f"{fn}: x values must be 1-D, got shape {xs.shape}.")
    for label, y in ys.items():
        if len(y) != len(xs):
            raise ValueError(
                f"{fn}: {name}[{label!r}] has shape {y.shape} but the x values have shape "
                f"{xs.shape}. Fix: give every curve one value per x."
            )
    return xs, ys


def as_floats(fn: str, name: str, values: Any) -> np.ndarray:
    """``values`` as float64, or ValueError (an int beyond the float range, a string ...)."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (OverflowError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{fn}: {name} must be numbers within the float range ({exc}). Fix: pass plain "
            "ints or floats."
        ) from None
