"""Lesson 15's picture of the online softmax: the keys arrive in blocks, one tile at a time.

``online_softmax_figure(n_queries, n_keys, block)`` draws a small score matrix S (queries as
rows, keys as columns) once per key block: the tile of the current block in colour with its
scores written in, the blocks already folded into the running state in grey, the blocks not
read yet blank. Beside each panel, the running state per query row after that block: the max
m (red where this block raised it, so l and acc were rescaled by a = e^(m - m')) and the sum
l = sum over the keys read so far of e^(s - m). The last panel reads the whole matrix at once:
its m and l equal the state after the last block. Colour means one thing in every panel: the
score. A diagram of the algorithm on made-up scores, not a measurement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.patches import Rectangle

from minitransformer.tools.viz.figure import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DONE, TODO = "#d9d9d9", "white"  # a block folded into the state, a block not read yet


def running_states(s: np.ndarray, block: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(m, l) per query row after each key block of the scores s (T, S): section 2's update."""
    m, l, states = np.full(s.shape[0], -np.inf), np.zeros(s.shape[0]), []
    for j in range(0, s.shape[1], block):
        m_new = np.maximum(m, s[:, j : j + block].max(axis=1))
        l = l * np.exp(m - m_new) + np.exp(s[:, j : j + block] - m_new[:, None]).sum(axis=1)
        m = m_new
        states.append((m.copy(), l.copy()))
    return states


def _panel(ax: Axes, s: np.ndarray, lo: int, hi: int, m, l, raised, title: str, cmap, norm):
    """The score matrix with columns lo..hi-1 in colour, the state (m, l) at the right."""
    T, S = s.shape
    for t in range(T):
        for j in range(S):
            colour = cmap(norm(s[t, j])) if lo <= j < hi else DONE if j < lo else TODO
            ax.add_patch(Rectangle((j, -t - 1), 1, 1, fc=colour, ec="0.6", lw=0.5, gid="score"))
            if lo <= j < hi:
                ink = "white" if norm(s[t, j]) < 0.45 else "black"  # readable on viridis
                ax.text(j + 0.5, -t - 0.5, f"{s[t, j]:.1f}", ha="center", va="center",
                        fontsize=7, color=ink)  # fmt: skip
        red = raised is not None and raised[t]
        ink = dict(color="#c0392b", weight="bold") if red else dict(color="black")
        ax.text(S + 0.9, -t - 0.5, f"{m[t]:.1f}", ha="center", va="center", fontsize=7.5, **ink)
        ax.text(S + 2.5, -t - 0.5, f"{l[t]:.2f}", ha="center", va="center", fontsize=7.5)
    ax.add_patch(Rectangle((lo, -T), hi - lo, T, fill=False, ec="black", lw=1.6))
    ax.text(S + 0.9, 0.35, "m", ha="center", fontsize=8, style="italic")
    ax.text(S + 2.5, 0.35, "l", ha="center", fontsize=8, style="italic")
    ax.set_xlim(-0.2, S + 3.4)
    ax.set_ylim(-T - 0.2, 1.0)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()


def online_softmax_figure(
    n_queries: int = 5, n_keys: int = 12, block: int = 4, seed: int = 0
) -> Figure:
    """One panel per key block (the state after it) and one for the whole row at once."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    if n_keys % block:
        raise ValueError(f"draw whole blocks: n_keys={n_keys} is not a multiple of {block}")
    s = np.round(np.random.default_rng(seed).normal(0, 2, (n_queries, n_keys)), 1) + 0.0  # no -0
    states = running_states(s, block)
    cmap, norm = colormaps["viridis"], Normalize(s.min(), s.max())
    cols = 2  # panels in rows of two, so that the scores stay readable
    rows = -(-(len(states) + 1) // cols)
    width = 0.36 * (n_keys + 3.6)  # inches a panel
    fig = new_figure((cols * width + 0.6, rows * (0.36 * n_queries + 0.9) + 1.2))
    grid = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in grid[len(states) + 1 :]:
        ax.remove()
    axes = grid[: len(states) + 1]
    previous = np.full(n_queries, -np.inf)
    for j, (ax, (m, l)) in enumerate(zip(axes, states, strict=False)):
        raised = (m > previous) & (j > 0)
        _panel(ax, s, j * block, (j + 1) * block, m, l, raised,
               f"block {j + 1}: keys {j * block}..{(j + 1) * block - 1}", cmap, norm)  # fmt: skip
        previous = m
    whole_m = s.max(axis=1)
    whole_l = np.exp(s - whole_m[:, None]).sum(axis=1)
    _panel(axes[-1], s, 0, n_keys, whole_m, whole_l, None, "the whole row at once", cmap, norm)
    fig.colorbar(ScalarMappable(norm, cmap), ax=list(axes), label="score s (query row, key)",
                 orientation="horizontal", shrink=0.5, aspect=40)  # fmt: skip
    fig.suptitle(
        "Online softmax over key blocks, one query per row: the framed tile is read now, grey "
        "blocks are already in the state (m, l);\nbeside each panel, the state after it (red m: "
        "raised by this block, so l was rescaled)",
        fontsize=9,
    )
    return fig
