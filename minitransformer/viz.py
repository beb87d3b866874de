"""Figures for lessons, the README and training runs: attention maps, positions, schedules, curves.

Every function builds a fresh ``matplotlib.figure.Figure`` on the Agg canvas, never touching
pyplot's global state, so it works headless (CI, servers) and inside notebooks (a returned
Figure displays itself as the cell's result). Each returns the Figure and, given ``path``,
also writes it as a PNG (dpi 120, tight bounding box, parent directories created).

matplotlib is imported lazily, on the first call, so ``import minitransformer`` does not need
it. Inputs are host NumPy arrays or plain lists; convert device arrays first.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PathLike = str | os.PathLike[str]

DPI = 120
"""Resolution of saved PNGs."""

#: Metrics plot_training_curves knows, in panel order: (record key, axis label).
TRAINING_METRICS = (
    ("loss", "loss"),
    ("token_acc", "token accuracy"),
    ("exact_match", "exact match"),
    ("bleu", "BLEU"),
    ("lr", "learning rate"),
)

_SPLIT_ORDER = ("train", "valid", "test")
_MAX_TICK_LABELS = 40


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


def plot_attention(
    weights: Any,
    src_tokens: Sequence[Any] | None = None,
    tgt_tokens: Sequence[Any] | None = None,
    *,
    title: str = "Attention weights",
    head_labels: Sequence[str] | None = None,
    cols: int = 4,
    path: PathLike | None = None,
) -> Figure:
    """Heatmap of attention weights: rows are target positions (queries), columns source (keys).

    Args:
        weights: shape (T, S) for one map, or (H, T, S) for one subplot per head in a grid.
        src_tokens: S labels for the columns (keys). For self-attention pass the same tokens
            as ``tgt_tokens``.
        tgt_tokens: T labels for the rows (queries).
        title: figure title.
        head_labels: H subplot titles (default ``head 0``, ``head 1``, ...).
        cols: subplots per row of the grid.
        path: where to save a PNG (optional).

    All heads share one colour scale, starting at 0, so they can be compared.

    Raises:
        ValueError: weights are not (T, S) or (H, T, S), or token/label counts do not match.
    """
    w = np.asarray(weights, dtype=np.float64)
    given_shape = w.shape
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or 0 in w.shape:
        raise ValueError(
            "plot_attention: weights must have shape (T, S) or (H, T, S), got shape "
            f"{given_shape}. Fix: pick one batch element, e.g. weights[0] of a (B, H, T, S) array."
        )
    n_heads, t_len, s_len = w.shape
    _check_len("plot_attention", "src_tokens", src_tokens, s_len, f"S of weights {w.shape}")
    _check_len("plot_attention", "tgt_tokens", tgt_tokens, t_len, f"T of weights {w.shape}")
    _check_len("plot_attention", "head_labels", head_labels, n_heads, f"H of weights {w.shape}")
    if cols < 1:
        raise ValueError(f"plot_attention: cols must be >= 1, got {cols}.")

    cols = min(cols, n_heads)
    rows = math.ceil(n_heads / cols)
    cell = 0.28  # inches per token
    panel_w = min(max(s_len * cell + 1.2, 2.8), 7.0)
    panel_h = min(max(t_len * cell + 1.0, 2.4), 7.0)
    fig = _new_figure((panel_w * cols + 1.0, panel_h * rows + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False)
    vmax = float(np.nanmax(w)) if np.nanmax(w) > 0 else 1.0

    image = None
    for index, ax in enumerate(axes.flat):
        if index >= n_heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(w[index], vmin=0.0, vmax=vmax, cmap="viridis", aspect="auto")
        _token_ticks(ax.set_xticks, ax.set_xticklabels, src_tokens, s_len, rotation=90)
        _token_ticks(ax.set_yticks, ax.set_yticklabels, tgt_tokens, t_len, rotation=0)
        ax.set_xlabel("source position (keys)")
        ax.set_ylabel("target position (queries)")
        if head_labels is not None:
            ax.set_title(str(head_labels[index]))
        elif n_heads > 1:
            ax.set_title(f"head {index}")
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.85, label="attention weight")
    fig.suptitle(title)
    return _finish(fig, path)


def _token_ticks(set_ticks, set_labels, tokens, n: int, rotation: int) -> None:
    """Label every position (or every k-th when there are many) with its token."""
    step = max(1, math.ceil(n / _MAX_TICK_LABELS))
    positions = list(range(0, n, step))
    set_ticks(positions)
    labels = [str(tokens[i]) for i in positions] if tokens is not None else positions
    set_labels(labels, rotation=rotation, fontsize=8 if n <= 20 else 6)


# --------------------------------------------------------------------------------------------
# Positional encoding and learning-rate schedule
# --------------------------------------------------------------------------------------------


def plot_positional_encoding(
    pe: Any,
    *,
    dims: Sequence[int] | None = None,
    title: str = "Sinusoidal positional encoding",
    path: PathLike | None = None,
) -> Figure:
    """The encoding matrix as an image (position x dimension) beside a few dimensions' curves.

    Args:
        pe: shape (L, D), or (1, L, D) as stored in a module buffer.
        dims: dimensions to draw as curves (default: 0, 1, D//4 and D//2, showing that low
            dimensions oscillate fast and high ones slowly).
        title: figure title.
        path: where to save a PNG (optional).

    Raises:
        ValueError: pe is not (L, D) / (1, L, D), or a requested dimension is out of range.
    """
    table = np.asarray(pe, dtype=np.float64)
    if table.ndim == 3 and table.shape[0] == 1:
        table = table[0]
    if table.ndim != 2 or 0 in table.shape:
        raise ValueError(
            "plot_positional_encoding: pe must have shape (L, D) (or (1, L, D)), got shape "
            f"{np.shape(pe)}. Fix: pass the encoding table, e.g. positions x d_model."
        )
    length, d_model = table.shape
    if dims is None:
        dims = sorted({d for d in (0, 1, d_model // 4, d_model // 2) if d < d_model})
    bad = [d for d in dims if not 0 <= d < d_model]
    if bad:
        raise ValueError(
            f"plot_positional_encoding: dims {bad} are outside 0..{d_model - 1} for pe of shape "
            f"{table.shape}."
        )

    fig = _new_figure((11.0, 4.0))
    left, right = fig.subplots(1, 2, width_ratios=[1.1, 1.0])
    limit = float(np.nanmax(np.abs(table))) or 1.0
    image = left.imshow(table, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    left.set_xlabel("dimension i")
    left.set_ylabel("position pos")
    left.set_title(f"PE matrix ({length} positions x {d_model} dims)")
    fig.colorbar(image, ax=left, label="value")

    positions = np.arange(length)
    for d in dims:
        kind = "sin" if d % 2 == 0 else "cos"
        right.plot(positions, table[:, d], label=f"dim {d} ({kind})")
    right.set_xlabel("position pos")
    right.set_ylabel("PE(pos, i)")
    right.set_title("a few dimensions along the positions")
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=len(dims))
    right.grid(alpha=0.3)
    fig.suptitle(title)
    return _finish(fig, path)


def plot_lr_schedule(
    steps: Sequence[float] | None,
    lrs: Sequence[float] | Mapping[str, Sequence[float]],
    *,
    label: str = "learning rate",
    title: str = "Learning-rate schedule",
    logy: bool = False,
    path: PathLike | None = None,
) -> Figure:
    """Learning rate against step, one curve or several, with each curve's peak marked.

    Args:
        steps: the x values shared by every curve, or None for 0, 1, 2, ...
        lrs: one sequence of learning rates, or a dict label -> sequence to compare schedules
            (for example several warm-up lengths).
        label: legend label when ``lrs`` is a single sequence.
        title: figure title.
        logy: logarithmic learning-rate axis.
        path: where to save a PNG (optional).

    Raises:
        ValueError: a curve's length differs from ``steps``.
    """
    curves = dict(lrs) if isinstance(lrs, Mapping) else {label: lrs}
    x, ys = _check_curves("plot_lr_schedule", steps, curves, "lrs")

    fig = _new_figure((7.0, 4.0))
    ax = fig.subplots()
    for name, y in ys.items():
        (line,) = ax.plot(x, y, label=name)
        if len(y) and np.isfinite(y).any():
            peak = int(np.nanargmax(y))
            ax.plot(x[peak], y[peak], "o", color=line.get_color(), markersize=4)
            ax.annotate(
                f"peak {y[peak]:.2e}\nat step {x[peak]:g}",
                (x[peak], y[peak]),
                textcoords="offset points",
                xytext=(6, -4),
                fontsize=7,
                va="top",
            )
    _decorate(ax, "step", "learning rate", title, logy=logy, legend=True)
    return _finish(fig, path)


# --------------------------------------------------------------------------------------------
# Training curves
# --------------------------------------------------------------------------------------------


def plot_training_curves(
    metrics: Sequence[Mapping[str, Any]] | PathLike,
    *,
    title: str = "Training curves",
    path: PathLike | None = None,
) -> Figure:
    """Loss, and token accuracy / exact match / BLEU / learning rate where logged, against step.

    Args:
        metrics: a list of records, or the path of a JSONL metrics log (one record per line),
            such as ``{"step": 100, "split": "train", "loss": 2.3, "lr": 1e-3}`` and
            ``{"step": 100, "split": "valid", "loss": 2.1, "token_acc": 0.5, "bleu": 12.3}``.
            Each split becomes one line per panel ("split" defaults to "train"); records
            without a numeric "step" and keys that are missing or not numbers are skipped.
        title: figure title.
        path: where to save a PNG (optional).

    Raises:
        ValueError: no record holds a step and one of the known metrics, or a JSONL line
            (other than a cut-off last line, which is skipped with a warning) is not JSON.
    """
    if isinstance(metrics, (str, os.PathLike)):
        records: list[Any] = _read_jsonl(Path(metrics))
    else:
        records = list(metrics)
    series: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for record in records:
        step = record.get("step") if isinstance(record, Mapping) else None
        if not _is_number(step):
            continue
        split = str(record.get("split", "train"))
        for key, _ in TRAINING_METRICS:
            if _is_number(record.get(key)):
                series.setdefault(key, {}).setdefault(split, []).append((step, record[key]))
    panels = [(key, label) for key, label in TRAINING_METRICS if key in series]
    if not panels:
        known = ", ".join(key for key, _ in TRAINING_METRICS)
        raise ValueError(
            f"plot_training_curves: nothing to plot in {len(records)} records; each needs a "
            f"numeric 'step' and at least one of: {known}."
        )

    cols = min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    fig = _new_figure((4.6 * cols, 3.4 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    splits = sorted({split for key, _ in panels for split in series[key]}, key=_split_rank)
    color = {split: f"C{i}" for i, split in enumerate(splits)}  # one colour per split
    for ax, (key, label) in zip(axes, panels, strict=False):  # spare axes are hidden below
        by_split = series[key]
        for split in sorted(by_split, key=_split_rank):
            points = sorted(by_split[split])
            steps = [step for step, _ in points]
            values = [value for _, value in points]
            ax.plot(
                steps,
                values,
                marker="o" if len(points) <= 30 else None,
                markersize=3,
                label=split,
                color=color[split],
            )
        _decorate(ax, "step", label, label, logy=False, legend=True)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    fig.suptitle(title)
    return _finish(fig, path)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL log; a cut-off last line (a run killed mid-write) is skipped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                warnings.warn(
                    f"{path}: skipped the last line, which is not complete JSON ({exc}).",
                    stacklevel=3,
                )
                continue
            raise ValueError(
                f"plot_training_curves: {path} line {number} is not valid JSON ({exc}). "
                "Fix: each line of a metrics log must be one JSON object."
            ) from exc
        if isinstance(record, dict):
            records.append(record)
    return records


def _split_rank(split: str) -> tuple[int, str]:
    return (_SPLIT_ORDER.index(split) if split in _SPLIT_ORDER else len(_SPLIT_ORDER), split)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------------
# Generic charts
# --------------------------------------------------------------------------------------------


def plot_bars(
    labels: Sequence[str],
    values: Sequence[float],
    ylabel: str,
    title: str,
    *,
    errors: Sequence[float] | None = None,
    logy: bool = False,
    path: PathLike | None = None,
) -> Figure:
    """Bar chart with each value written above its bar (for benchmarks).

    Args:
        labels: one name per bar.
        values: one height per bar.
        ylabel: the value axis label, with units (e.g. "ms per step").
        title: figure title.
        errors: optional error bar (e.g. standard deviation) per bar.
        logy: logarithmic value axis, for values spanning orders of magnitude.
        path: where to save a PNG (optional).

    Raises:
        ValueError: labels, values and errors differ in length, or there are none.
    """
    heights = np.asarray(values, dtype=np.float64)
    if heights.ndim != 1 or len(heights) == 0 or len(heights) != len(labels):
        raise ValueError(
            f"plot_bars: need one value per label, got {len(labels)} labels and values of shape "
            f"{heights.shape}."
        )
    _check_len("plot_bars", "errors", errors, len(heights), "the number of values")

    fig = _new_figure((max(4.0, 0.9 * len(heights) + 2.0), 4.0))
    ax = fig.subplots()
    bars = ax.bar([str(label) for label in labels], heights, yerr=errors, capsize=3)
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in heights], fontsize=8, padding=2)
    if len(heights) > 6 or max(len(str(label)) for label in labels) > 10:
        ax.tick_params(axis="x", labelrotation=30)
    _decorate(ax, None, ylabel, title, logy=logy, legend=False)
    ax.grid(axis="x", visible=False)
    return _finish(fig, path)


def plot_lines(
    x: Sequence[float] | None,
    ys: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str,
    *,
    logy: bool = False,
    logx: bool = False,
    path: PathLike | None = None,
) -> Figure:
    """Several labelled curves over a shared x axis (for the lessons' experiments).

    Args:
        x: the shared x values, or None for 0, 1, 2, ...
        ys: label -> y values, each as long as ``x``.
        xlabel, ylabel, title: axis labels and figure title.
        logy, logx: logarithmic axes.
        path: where to save a PNG (optional).

    Raises:
        ValueError: ``ys`` is empty or a curve's length differs from ``x``.
    """
    if not isinstance(ys, Mapping) or not ys:
        raise ValueError(
            "plot_lines: ys must be a non-empty dict of label -> values, got "
            f"{type(ys).__name__}. Fix: plot_lines(x, {{'train': losses}}, ...)."
        )
    xs, curves = _check_curves("plot_lines", x, dict(ys), "ys")
    fig = _new_figure((7.0, 4.0))
    ax = fig.subplots()
    for label, y in curves.items():
        ax.plot(xs, y, marker="o" if len(xs) <= 20 else None, markersize=3, label=label)
    if logx:
        ax.set_xscale("log")
    _decorate(ax, xlabel, ylabel, title, logy=logy, legend=True)
    return _finish(fig, path)


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _new_figure(figsize: tuple[float, float]) -> Figure:
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


def _finish(fig: Figure, path: PathLike | None) -> Figure:
    """Save the figure as a PNG when a path is given; return it."""
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return fig


def _decorate(
    ax: Axes, xlabel: str | None, ylabel: str, title: str, *, logy: bool, legend: bool
) -> None:
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)


def _check_len(fn: str, name: str, seq: Sequence[Any] | None, expected: int, what: str) -> None:
    if seq is not None and len(seq) != expected:
        raise ValueError(f"{fn}: {name} has {len(seq)} entries but {what} is {expected}.")


def _check_curves(
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
