"""Attention maps: which source positions (keys) each target position (query) looks at.

The figure's size is bounded whatever its texts: a panel is at most 7 inches a side, at
most ``_MAX_TICK_LABELS`` tokens are named per axis, and every text drawn (the title, the
head labels, the axis label, each token) is decoded by the project's rule
(``data.text.readable_text``: a lone surrogate becomes U+FFFD) and cut with "…": the title
to ``TITLE_LINES`` lines of ``TITLE_CHARS`` characters, a label to ``LABEL_CHARS``, a token
to ``TOKEN_CHARS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...data.text import TOKEN_CHARS, readable_text, shorten
from .figure import LIMIT, SaveTo, check_len, finish, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_MAX_TICK_LABELS = 40

TITLE_LINES, TITLE_CHARS = 6, 180
"""The most lines of the title, and characters of each (then "…")."""

LABEL_CHARS = 60
"""The most characters of a head label or the axis label."""


def _shown(text: Any, limit: int, lines: int = 1) -> str:
    """``text`` as drawn: a str, readable (no lone surrogate), at most ``lines`` lines of at
    most ``limit`` characters."""
    rows = readable_text(str(text)).split("\n")
    if len(rows) > lines:
        rows = [*rows[: lines - 1], rows[lines - 1] + " …"]
    return "\n".join(shorten(row, limit) for row in rows)


def plot_attention(
    weights: Any,
    src_tokens: Sequence[Any] | None = None,
    tgt_tokens: Sequence[Any] | None = None,
    *,
    title: str = "Attention weights",
    head_labels: Sequence[str] | None = None,
    cols: int = 4,
    ylabel: str = "target position (queries)",
    marked_rows: Sequence[int] | None = None,
    path: SaveTo | None = None,
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
        ylabel: the rows' axis label (e.g. to say they are a model's output, not the reference).
        marked_rows: rows whose tick label is drawn red and bold (e.g. output tokens that are
            not in the reference).
        path: where to save the figure (optional): a file name, or a binary file (PNG).

    All heads share one colour scale, starting at 0, so they can be compared; it comes from
    the finite weights (NaN or inf cells are left blank).

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
    check_len("plot_attention", "src_tokens", src_tokens, s_len, f"S of weights {w.shape}")
    check_len("plot_attention", "tgt_tokens", tgt_tokens, t_len, f"T of weights {w.shape}")
    check_len("plot_attention", "head_labels", head_labels, n_heads, f"H of weights {w.shape}")
    if cols < 1:
        raise ValueError(f"plot_attention: cols must be >= 1, got {cols}.")

    cols = min(cols, n_heads)
    rows = math.ceil(n_heads / cols)
    cell = 0.28  # inches per token
    panel_w = min(max(s_len * cell + 1.2, 2.8), 7.0)
    panel_h = min(max(t_len * cell + 1.0, 2.4), 7.0)
    fig = new_figure((panel_w * cols + 1.0, panel_h * rows + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False)
    finite = w[np.isfinite(w)]  # NaN/inf cells show blank; the scale comes from the rest
    vmax = min(float(finite.max()), LIMIT) if finite.size and finite.max() > 0 else 1.0

    image, marked = None, set(marked_rows or ())
    for index, ax in enumerate(axes.flat):
        if index >= n_heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(w[index], vmin=0.0, vmax=vmax, cmap="viridis", aspect="auto")
        _token_ticks(ax.set_xticks, ax.set_xticklabels, src_tokens, s_len, rotation=90)
        _token_ticks(ax.set_yticks, ax.set_yticklabels, tgt_tokens, t_len, rotation=0)
        for tick in ax.get_yticklabels():
            if int(tick.get_position()[1]) in marked:
                tick.set_color("red")
                tick.set_fontweight("bold")
        ax.set_xlabel("source position (keys)")
        ax.set_ylabel(_shown(ylabel, LABEL_CHARS))
        if head_labels is not None:
            ax.set_title(_shown(head_labels[index], LABEL_CHARS))
        elif n_heads > 1:
            ax.set_title(f"head {index}")
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.85, label="attention weight")
    fig.suptitle(_shown(title, TITLE_CHARS, TITLE_LINES))
    return finish(fig, path)


def _token_ticks(set_ticks, set_labels, tokens, n: int, rotation: int) -> None:
    """Label every position (or every k-th when there are many) with its token."""
    step = max(1, math.ceil(n / _MAX_TICK_LABELS))
    positions = list(range(0, n, step))
    set_ticks(positions)
    labels = (
        [_shown(tokens[i], TOKEN_CHARS) for i in positions] if tokens is not None else positions
    )
    set_labels(labels, rotation=rotation, fontsize=8 if n <= 20 else 6)
