"""Lesson 05's opening picture: averaging the past is a softmax over masked scores.

``causal_average_figure(T)`` draws two rows of the same pipeline for a sequence of ``T``
positions:

- **fixed**: scores ``s_ts = 0`` where ``s <= t`` and ``-inf`` above the diagonal; softmax of
  each row gives ``w_ts = 1/(t+1)`` on the past and 0 on the future, so ``out = W x`` is the
  running mean ``out_t = (x_0 + ... + x_t)/(t+1)``;
- **learned**: the same mask, but free scores ``s_ts``; softmax still gives rows that are
  >= 0 and sum to 1 with 0 on the future, so ``out_t = sum_{s<=t} w_ts x_s`` is a weighted
  average of the past whose weights can be learned.

A diagram, not a measurement: every entry it shows follows from ``T``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib.patches import Rectangle

from minitransformer.tools.viz.figure import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CELL = 0.62  # side of one matrix entry, in axis units
PAST, FUTURE, OUT = "#dbe9f6", "#e6e6e6", "#fde3cf"  # allowed score/weight, masked, output
ARROW = dict(arrowstyle="-|>", color="0.3", lw=1.4)


def _grid(ax: Axes, x0: float, y0: float, entries: list[list[str]], kind: str) -> None:
    """A T x T matrix whose top-left corner is (x0, y0); row t is drawn below row t-1.

    Entries above the diagonal (the future) are grey, the others blue; each entry is a
    Rectangle with gid ``kind`` (tests count them) and its text centred on it."""
    for t, row in enumerate(entries):
        for s, text in enumerate(row):
            x, y = x0 + s * CELL, y0 - (t + 1) * CELL
            colour = PAST if s <= t else FUTURE
            rect = Rectangle((x, y), CELL, CELL, fc=colour, ec="0.45", lw=0.8, gid=kind)
            ax.add_patch(rect)
            size = 8.5 if len(text) < 12 else 7.5
            ax.text(x + CELL / 2, y + CELL / 2, text, ha="center", va="center", fontsize=size)


def _column(ax: Axes, x0: float, y0: float, entries: list[str], width: float) -> None:
    """A column vector of T entries (one per position), top at y0."""
    for t, text in enumerate(entries):
        y = y0 - (t + 1) * CELL
        ax.add_patch(Rectangle((x0, y), width, CELL, fc=OUT, ec="0.45", lw=0.8, gid="output"))
        ax.text(x0 + width / 2, y + CELL / 2, text, ha="center", va="center", fontsize=8.5)


def _arrow(ax: Axes, x0: float, x1: float, y: float, label: str) -> None:
    ax.annotate("", xy=(x1, y), xytext=(x0, y), arrowprops=ARROW)
    ax.text((x0 + x1) / 2, y + 0.18, label, ha="center", va="bottom", fontsize=8.5)


def causal_average_figure(T: int = 4) -> Figure:
    """Masked scores -> softmax per row -> weights -> ``W x``, fixed (top) and learned (bottom).

    ``T`` (2..6) is the sequence length; returns the Figure (Agg canvas, no pyplot)."""
    if not 2 <= T <= 6:
        raise ValueError(f"T must be between 2 and 6 to stay readable, got {T}")
    side = T * CELL
    col_w = 2.3  # width of the output column
    x_s, x_w = 0.0, side + 2.2  # left edges of the score and weight grids
    x_o = x_w + side + 2.2  # left edge of the output column
    row_gap = 1.5
    tops = (2 * side + row_gap, side)  # top edge of each row's grids

    fixed_scores = [["0" if s <= t else r"$-\infty$" for s in range(T)] for t in range(T)]
    fixed_weights = [
        [(f"1/{t + 1}" if t else "1") if s <= t else "0" for s in range(T)] for t in range(T)
    ]
    fixed_out = [r"$x_0$"] + [
        rf"$(x_0{{+}}\dots{{+}}x_{{{t}}})/{t + 1}$" if t > 1 else r"$(x_0{+}x_1)/2$"
        for t in range(1, T)
    ]
    learned_scores = [
        [rf"$s_{{{t}{s}}}$" if s <= t else r"$-\infty$" for s in range(T)] for t in range(T)
    ]
    learned_weights = [[rf"$w_{{{t}{s}}}$" if s <= t else "0" for s in range(T)] for t in range(T)]
    learned_out = [rf"$\sum_{{s\leq {t}}} w_{{{t}s}}\,x_s$" for t in range(T)]
    rows = [
        ("fixed scores: a running mean", fixed_scores, fixed_weights, fixed_out),
        (
            "learned scores: a weighted average of the past",
            learned_scores,
            learned_weights,
            learned_out,
        ),
    ]

    fig = new_figure((10.5, 1.45 * T + 2.2))
    ax = fig.add_subplot()
    for top, (title, scores, weights, out) in zip(tops, rows, strict=True):
        ax.text(x_s, top + 0.55, title, fontsize=10.5, fontweight="bold", va="bottom")
        _grid(ax, x_s, top, scores, "score")
        _grid(ax, x_w, top, weights, "weight")
        _column(ax, x_o, top, out, col_w)
        mid = top - side / 2
        _arrow(ax, x_s + side + 0.15, x_w - 0.15, mid, "softmax of\neach row")
        _arrow(ax, x_w + side + 0.15, x_o - 0.15, mid, "times x\n(T values)")
        for x, label in ((x_s, "scores S"), (x_w, "weights W"), (x_o, "output W x")):
            width = col_w if x == x_o else side
            ax.text(x + width / 2, top + 0.08, label, ha="center", va="bottom", fontsize=8.5)
    ax.text(
        x_s,
        -0.35,
        "rows: query position t;  columns: key position s;  grey: the future (s > t), "
        r"score $-\infty$, weight $e^{-\infty} = 0$;  every row of W is $\geq 0$ and sums to 1",
        fontsize=8.5,
        va="top",
        color="0.3",
    )
    ax.set_xlim(-0.2, x_o + col_w + 0.2)
    ax.set_ylim(-1.0, tops[0] + 1.1)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.suptitle(f"Averaging the past = softmax over masked scores (T = {T})", fontsize=11)
    return fig
