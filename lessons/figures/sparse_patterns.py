"""Lesson 20's diagram: which keys each query reads, in full, local, strided and linear attention.

One row of four panels per masking (``causal`` False, then True). In the first three panels a
cell (query row i, key column j) is filled when query i reads key j, so the filled cells are
the scores the op computes (the rest it never touches); one query's row is drawn darker:

- **full**: every key (causal: every key up to i), T² cells;
- **local** (window w): keys with |i - j| <= w (causal: i - w <= j <= i), a band of width 2w + 1;
- **strided** (stride s, Child et al. 2019): keys with |i - j| < s, or (i - j) a multiple of s
  (causal: and j <= i): a band of width 2s - 1 and every s-th column;

and the fourth panel, **linear** attention, has no score matrix to draw: every key j (causal:
j <= i) is folded into one d × d summary, sum_j phi(k_j) v_j^T, which every query reads (the
causal summary grows by one key per position: a running sum). Drawn as the keys, the summary
box and the queries, with arrows for the dark query only.

``reads(kind, T, size, causal)`` is the (T, T) bool pattern the panels draw (positions i and j
as in the library's ops when T = S); ``patterns_figure(T, window, stride, query)`` draws both
rows and returns the Figure. A diagram of the patterns, not a measurement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

from minitransformer.tools.viz.figure import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

READ, QUERY, EMPTY = "#9ecae1", "#08519c", "white"  # a key read, the dark query's keys, not read


def reads(kind: str, T: int, size: int = 1, causal: bool = False) -> np.ndarray:
    """(T, T) bool: query i reads key j, for ``kind`` "full", "local" (``size`` = the window)
    or "strided" (``size`` = the stride); "linear" reads what "full" reads."""
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    if kind in ("full", "linear"):
        allowed = np.ones((T, T), bool)
    elif kind == "local":
        allowed = np.abs(i - j) <= size
    elif kind == "strided":
        allowed = (np.abs(i - j) < size) | ((i - j) % size == 0)
    else:
        raise ValueError(f"kind must be full, local, strided or linear, got {kind!r}")
    return allowed & (j <= i) if causal else allowed


def _grid(ax: Axes, allowed: np.ndarray, query: int, title: str) -> None:
    """The pattern as a grid of cells, query rows downwards, key columns across."""
    T = allowed.shape[0]
    for i in range(T):
        for j in range(T):
            colour = (QUERY if i == query else READ) if allowed[i, j] else EMPTY
            ax.add_patch(Rectangle((j, -i - 1), 1, 1, fc=colour, ec="0.8", lw=0.4))
    ax.add_patch(Rectangle((0, -query - 1), T, 1, fill=False, ec="black", lw=1.2))
    ax.text(-0.3, -query - 0.5, f"{query}", ha="right", va="center", fontsize=7)
    ax.text(T / 2, 0.5, "keys j →", ha="center", va="bottom", fontsize=7)
    ax.text(-1.6, -T / 2, "queries i, top to bottom", ha="center", va="center", fontsize=7,
            rotation=90)  # fmt: skip
    ax.set_xlim(-2.4, T + 0.2)
    ax.set_ylim(-T - 0.3, 1.6)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=8.5)
    ax.set_axis_off()


def _linear(ax: Axes, T: int, query: int, causal: bool) -> None:
    """Keys on the left, the d × d summary in the middle, queries on the right."""
    read = np.arange(T) <= query if causal else np.ones(T, bool)
    box = (T / 2 - 1.6, -T / 2 - 1.6, 3.2, 3.2)  # x, y, width, height of the summary
    ax.add_patch(Rectangle(box[:2], box[2], box[3], fc="#fdf0dc", ec="0.3", lw=1))
    name = f"S_{query}" if causal else "S"
    ax.text(T / 2, -T / 2, f"{name}\nd × d", ha="center", va="center", fontsize=8)
    for j in range(T):
        y = -j - 0.5
        colour = READ if read[j] else EMPTY
        ax.add_patch(Rectangle((0, y - 0.4), 1.2, 0.8, fc=colour, ec="0.6", lw=0.4))
        if read[j]:
            ax.add_artist(FancyArrowPatch((1.2, y), (box[0], -T / 2), arrowstyle="-",
                                          color="0.55", lw=0.5, shrinkA=0, shrinkB=0))  # fmt: skip
        is_query = j == query
        ax.add_patch(Rectangle((T - 1.2, y - 0.4), 1.2, 0.8, fc=QUERY if is_query else READ,
                               ec="0.6", lw=0.4))  # fmt: skip
    start, end = (box[0] + box[2], -T / 2), (T - 1.2, -query - 0.5)
    ax.add_artist(FancyArrowPatch(start, end, arrowstyle="->", mutation_scale=8, color="black"))
    ax.text(0.6, 0.5, "keys j", ha="center", va="bottom", fontsize=7)
    ax.text(T - 0.6, 0.5, "queries i", ha="center", va="bottom", fontsize=7)
    ax.set_xlim(-2.4, T + 0.2)
    ax.set_ylim(-T - 0.3, 1.6)
    ax.set_aspect("equal")
    kept = "keys j ≤ i" if causal else "all T keys"
    ax.set_title(f"linear: {kept}, through one d × d summary\n(no T × T scores)", fontsize=8.5)
    ax.set_axis_off()


def patterns_figure(T: int = 16, window: int = 2, stride: int = 4, query: int = 9) -> Figure:
    """Two rows (non-causal, causal) of four panels: full, local, strided, linear."""
    if not 0 <= query < T:
        raise ValueError(f"query must be a row of the T = {T} queries, got {query}")
    fig = new_figure((15, 8.4))
    axes = fig.subplots(2, 4)
    for row, causal in enumerate((False, True)):
        label = "causal" if causal else "non-causal"
        panels = (("full", 1, "full"), ("local", window, f"local, window w = {window}"),
                  ("strided", stride, f"strided, stride s = {stride}"))  # fmt: skip
        for ax, (kind, size, name) in zip(axes[row, :3], panels, strict=True):
            allowed = reads(kind, T, size, causal)
            counted = f"query {query} reads {allowed[query].sum()} of {T} keys"
            _grid(ax, allowed, query, f"{name} ({label})\n{counted}")
        _linear(axes[row, 3], T, query, causal)
    fig.suptitle(
        f"Which keys each query reads (T = {T}): a filled cell is a score the op computes, the "
        f"dark row is query {query}'s; a diagram of the patterns, not a measurement",
        fontsize=10,
    )
    return fig
