"""What every figure shares: a Figure on its own Agg canvas (no pyplot, no global state,
headless), saving it as a PNG, decorating an axis, and checking the inputs' lengths.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PathLike = str | os.PathLike[str]

DPI = 120
"""Resolution of saved PNGs."""


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A Figure on its own Agg canvas: no pyplot, no global state, works headless."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "minitransformer.viz needs matplotlib. Fix: pip install matplotlib."
        ) from exc
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    # Jupyter shows a pyplot-free Figure only through this hook (as the cell's result).
    fig._repr_png_ = lambda: _png_bytes(fig)
    return fig


def _png_bytes(fig: Figure) -> bytes:
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def finish(fig: Figure, path: PathLike | None) -> Figure:
    """Save the figure as a PNG when a path is given; return it."""
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return fig


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
    ys = {str(label): np.asarray(y, dtype=np.float64) for label, y in curves.items()}
    for label, y in ys.items():
        if y.ndim != 1:
            raise ValueError(f"{fn}: {name}[{label!r}] must be 1-D, got shape {y.shape}.")
    if x is None:
        n = max((len(y) for y in ys.values()), default=0)
        xs = np.arange(n, dtype=np.float64)
    else:
        xs = np.asarray(x, dtype=np.float64)
        if xs.ndim != 1:
            raise ValueError(f"{fn}: x values must be 1-D, got shape {xs.shape}.")
    for label, y in ys.items():
        if len(y) != len(xs):
            raise ValueError(
                f"{fn}: {name}[{label!r}] has shape {y.shape} but the x values have shape "
                f"{xs.shape}. Fix: give every curve one value per x."
            )
    return xs, ys
