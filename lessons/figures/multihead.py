"""Lesson 06's picture: how multi-head attention splits one projection into heads and merges
them back.

``multihead_figure(h, d_model, T)`` draws, top to bottom, the steps of lesson 06's code
with their shapes (d_k = d_model / h):

1. ``Q = x @ W_q``                  (B, T, d_model)  columns i*d_k .. (i+1)*d_k belong to head i
2. ``.reshape(B, T, h, d_k)``       (B, T, h, d_k)   the last axis cut into h groups
3. ``.transpose(0, 2, 1, 3)``       (B, h, T, d_k)   heads become a batch axis: q_i
4. attention, per head              (B, h, T, d_k)   head_i = softmax(q_i k_i^T / sqrt(d_k)) v_i
5. ``.transpose(0, 2, 1, 3).reshape(B, T, d_model)`` = Concat(head_0 .. head_{h-1})
6. ``@ W_o``                        (B, T, d_model)  every output column mixes all heads

K and V are split the same way. A matrix is drawn as T rows by its columns; head i keeps one
colour in every step. A diagram, not a measurement: every entry follows from the arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib import colormaps
from matplotlib.patches import FancyBboxPatch, Rectangle

from minitransformer.tools.viz.figure import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH = 6.0  # drawn width of a (T, d_model) matrix, in axis units
ROW_H = 0.16  # drawn height of one token row
GAP = 1.0  # vertical space between the steps
X_CODE = 3.7  # right edge of the code labels
SPREAD = 9.2  # steps 3 and 4 spread the heads over this width, from X_CODE + 0.3
X_MAT = X_CODE + 0.3 + SPREAD / 2 - WIDTH / 2  # left edge of the (T, d_model) matrices
X_SHAPE = X_CODE + SPREAD + 0.8  # left edge of the shape labels
MIXED = "#9e9ac8"  # the output of W_o: no single head's colour


def _colours(h: int) -> list:
    cmap = colormaps["tab10" if h <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(h)]


def _matrix(ax: Axes, x: float, top: float, n_cols: int, width: float, T: int, colour, gid):
    """A (T, n_cols) block: top-left at (x, top), filled with ``colour``; column lines when
    they stay visible."""
    height = T * ROW_H
    ax.add_patch(Rectangle((x, top - height), width, height, fc=colour, ec="0.25", lw=0.9, gid=gid))
    if n_cols <= 32:
        for c in range(1, n_cols):
            xc = x + c * width / n_cols
            ax.plot([xc, xc], [top - height, top], color="white", lw=0.5, alpha=0.8)
    for r in range(1, T):
        ax.plot([x, x + width], [top - r * ROW_H] * 2, color="white", lw=0.5, alpha=0.8)


def _labels(ax: Axes, top: float, T: int, code: str, shape: str) -> None:
    mid = top - T * ROW_H / 2
    ax.text(X_CODE, mid, code, ha="right", va="center", fontsize=9, family="monospace")
    ax.text(X_SHAPE, mid, shape, ha="left", va="center", fontsize=9)


def _link(ax: Axes, start: tuple[float, float], end: tuple[float, float], colour) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.1))


def multihead_figure(h: int = 4, d_model: int = 16, T: int = 5) -> Figure:
    """The split into ``h`` heads of ``d_k = d_model // h`` columns, per-head attention and the
    merge, with the shapes of every step. Returns the Figure (Agg canvas, no pyplot)."""
    if h < 1 or d_model % h:
        raise ValueError(f"h must divide d_model: got h={h}, d_model={d_model}")
    if not 1 <= T <= 8:
        raise ValueError(f"T must be between 1 and 8 to stay readable, got {T}")
    d_k = d_model // h
    colours = _colours(h)
    slab = WIDTH / h  # drawn width of one head's d_k columns
    gap = 0.12  # step 2: the gap that the new axis opens between the groups
    pitch = SPREAD / h
    x_groups = [X_MAT + i * (slab + gap) - gap * (h - 1) / 2 for i in range(h)]  # step 2
    x_heads = [X_CODE + 0.3 + i * pitch + (pitch - slab) / 2 for i in range(h)]  # steps 3, 4
    height = T * ROW_H
    tops = [-i * (height + GAP) for i in range(6)]  # top edge of each step's blocks

    fig = new_figure((11.5, 8.4))
    ax = fig.add_subplot()
    # 1. the projection: one (T, d_model) matrix, head i's columns in colour i
    for i in range(h):
        _matrix(ax, X_MAT + i * slab, tops[0], d_k, slab, T, colours[i], "q_columns")
    _labels(ax, tops[0], T, "Q = x @ W_q", f"(B, T, d_model) = (B, T, {d_model})")
    # 2. reshape: the last axis split into h groups of d_k
    for i in range(h):
        _matrix(ax, x_groups[i], tops[1], d_k, slab, T, colours[i], "group")
        _link(
            ax,
            (X_MAT + (i + 0.5) * slab, tops[0] - height - 0.04),
            (x_groups[i] + slab / 2, tops[1] + 0.04),
            colours[i],
        )
    _labels(
        ax,
        tops[1],
        T,
        ".reshape(B, T, h, d_k)",
        f"(B, T, h, d_k) = (B, T, {h}, {d_k})\neach token's vector cut into h pieces",
    )
    # 3. transpose: h separate (T, d_k) matrices, one per head
    for i in range(h):
        _link(
            ax,
            (x_groups[i] + slab / 2, tops[1] - height - 0.04),
            (x_heads[i] + slab / 2, tops[2] + 0.3),
            colours[i],
        )
        _matrix(ax, x_heads[i], tops[2], d_k, slab, T, colours[i], "head")
        ax.text(
            x_heads[i] + slab / 2,
            tops[2] + 0.05,
            f"$q_{{{i}}}$",
            ha="center",
            va="bottom",
            fontsize=9,
        )
    _labels(
        ax,
        tops[2],
        T,
        ".transpose(0, 2, 1, 3)",
        f"(B, h, T, d_k) = (B, {h}, T, {d_k})\nheads become a batch axis",
    )
    # 4. attention in every head at once (k_i and v_i are split the same way)
    for i in range(h):
        xc = x_heads[i] + slab / 2
        box_y = tops[3] + GAP / 2 - 0.17
        ax.add_patch(
            FancyBboxPatch(
                (xc - 0.42, box_y),
                0.84,
                0.34,
                boxstyle="round,pad=0.02,rounding_size=0.08",
                fc="white",
                ec=colours[i],
                lw=1.4,
                gid="attention",
            )
        )
        ax.text(xc, box_y + 0.17, f"head {i}", ha="center", va="center", fontsize=8)
        _link(ax, (xc, tops[2] - height - 0.04), (xc, box_y + 0.36), colours[i])
        _link(ax, (xc, box_y - 0.02), (xc, tops[3] + 0.04), colours[i])
        _matrix(ax, x_heads[i], tops[3], d_k, slab, T, colours[i], "head_output")
    _labels(
        ax,
        tops[3],
        T,
        "attention\n(lesson 05)",
        f"(B, h, T, d_k) = (B, {h}, T, {d_k})\n"
        r"head$_i$ = softmax($q_i k_i^\top / \sqrt{d_k}$) $v_i$"
        "\nall heads in one batched call",
    )
    # 5. merge: head i's output back into columns i*d_k .. (i+1)*d_k
    for i in range(h):
        _link(
            ax,
            (x_heads[i] + slab / 2, tops[3] - height - 0.04),
            (X_MAT + (i + 0.5) * slab, tops[4] + 0.04),
            colours[i],
        )
        _matrix(ax, X_MAT + i * slab, tops[4], d_k, slab, T, colours[i], "merged")
    _labels(
        ax,
        tops[4],
        T,
        ".transpose(0, 2, 1, 3)\n.reshape(B, T, d_model)",
        f"(B, T, d_model) = (B, T, {d_model})\n= Concat(head$_0$, ..., head$_{{{h - 1}}}$)",
    )
    # 6. the output projection mixes the heads
    _link(
        ax, (X_MAT + WIDTH / 2, tops[4] - height - 0.04), (X_MAT + WIDTH / 2, tops[5] + 0.04), "0.3"
    )
    _matrix(ax, X_MAT, tops[5], d_model, WIDTH, T, MIXED, "output")
    _labels(
        ax,
        tops[5],
        T,
        "@ W_o",
        f"(B, T, d_model) = (B, T, {d_model})\nevery column mixes all h heads",
    )
    ax.text(
        X_MAT + WIDTH / 2,
        tops[5] - height - 0.3,
        "a block is T rows (tokens) by its columns; K = x @ W_k and V = x @ W_v are split "
        "the same way (into k_i, v_i)",
        ha="center",
        va="top",
        fontsize=8.5,
        color="0.3",
    )
    ax.set_xlim(0, X_SHAPE + 4.4)
    ax.set_ylim(tops[5] - height - 0.8, tops[0] + 0.5)
    ax.axis("off")
    fig.suptitle(
        f"Multi-head attention: split into h = {h} heads of d_k = d_model / h = {d_k} columns, "
        "attend, merge",
        fontsize=11,
    )
    return fig
