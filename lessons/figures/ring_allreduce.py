"""Lesson 14's picture of the ring all-reduce: N ranks, each buffer cut into N chunks.

The state of the ring is, for every rank r and chunk c, the set of ranks whose numbers that
chunk of rank r sums: {r} at the start, all N ranks ("complete") at the end.

- **reduce-scatter**, N-1 steps: at step k (0-based) rank r sends chunk (r - k) mod N to
  rank r + 1, which adds it into its own copy (the sets join). Afterwards every rank holds
  exactly one complete chunk.
- **all-gather**, N-1 steps: each rank sends its right neighbour a complete chunk the
  neighbour lacks, and the neighbour overwrites its copy. ``ring_schedule`` finds that chunk
  by looking at the sets (there is exactly one each step); it does not compute it.

``ring_figure(N)`` draws the state before each step, with an arrow per message, one row per
phase: 2N panels (N-1 steps and the state after the phase, for each phase). Colour means one
thing in every panel: how many ranks' numbers a chunk sums. A diagram, not a measurement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from minitransformer.tools.viz.figure import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

State = list[list[frozenset[int]]]  # state[r][c]: the ranks chunk c of rank r sums
Step = tuple[str, int, State, list[tuple[int, int, int]]]  # phase, k, before, (src, dst, c)

CELL_W, CELL_H, GAP = 1.0, 0.7, 0.5  # a chunk's box, and the gap between two ranks' columns
SEND = dict(arrowstyle="-|>", color="#c0392b", lw=1.3, mutation_scale=10)


def ring_schedule(N: int) -> tuple[list[Step], State]:
    """The 2(N-1) steps of the ring all-reduce of N ranks, and the final state."""
    if N < 2:
        raise ValueError(f"a ring needs at least 2 ranks, got N={N}")
    state: State = [[frozenset({r}) for _ in range(N)] for r in range(N)]
    everyone = frozenset(range(N))
    steps: list[Step] = []
    for k in range(N - 1):  # reduce-scatter: the formula of the lesson's section 2
        sends = [(r, (r + 1) % N, (r - k) % N) for r in range(N)]
        before = [row[:] for row in state]
        steps.append(("reduce-scatter", k, before, sends))
        for src, dst, c in sends:  # every message of a step at once: read from `before`
            state[dst][c] = before[dst][c] | before[src][c]
    for k in range(N - 1):  # all-gather: a complete chunk the right neighbour lacks
        sends = []
        for r in range(N):
            right = (r + 1) % N
            lacks = [c for c in range(N) if state[r][c] == everyone and state[right][c] != everyone]
            assert len(lacks) == 1, f"rank {r} could send {lacks} at all-gather step {k}"
            sends.append((r, right, lacks[0]))
        steps.append(("all-gather", k, [row[:] for row in state], sends))
        for _, dst, c in sends:
            state[dst][c] = everyone
    return steps, state


def _palette(N: int) -> list[str]:
    """Colour i - 1: a chunk that sums i ranks' numbers (light to dark blue)."""
    from matplotlib import colormaps

    blues = colormaps["Blues"]
    return [blues(0.18 + 0.72 * i / max(N - 1, 1)) for i in range(N)]


def _panel(
    ax: Axes, state: State, sends: list[tuple[int, int, int]], title: str, labels: bool = False
) -> None:
    """Columns: ranks; rows: chunks (named at the left with ``labels``). An arrow per
    message, the sender's box outlined."""
    N = len(state)
    colours = _palette(N)
    sent = {(src, c) for src, _, c in sends}
    for r in range(N):
        x = r * (CELL_W + GAP)
        ax.text(x + CELL_W / 2, 0.15, f"rank {r}", ha="center", va="bottom", fontsize=8)
        for c in range(N):
            y = -(c + 1) * CELL_H
            n = len(state[r][c])
            edge = dict(ec=SEND["color"], lw=2.0) if (r, c) in sent else dict(ec="0.4", lw=0.6)
            ax.add_patch(Rectangle((x, y), CELL_W, CELL_H, fc=colours[n - 1], gid="chunk", **edge))
            text = "all" if n == N else "+".join(str(q) for q in sorted(state[r][c]))
            ink = "white" if n > N / 2 else "black"
            size = 8 if n == N else 7 if len(text) <= 3 else 6  # "0+1+2" fits inside its box
            ax.text(x + CELL_W / 2, y + CELL_H / 2, text, ha="center", va="center",
                    fontsize=size, color=ink)  # fmt: skip
    for src, dst, c in sends:
        y = -(c + 0.5) * CELL_H
        start = src * (CELL_W + GAP) + CELL_W
        if dst > src:  # to the next column
            ax.add_patch(FancyArrowPatch((start, y), (start + GAP, y), gid="send", **SEND))
        else:  # the ring closes: out at the right edge, in again at the left, dashed
            wrap = dict(ls=(0, (2, 1.5)), shrinkA=0, shrinkB=0, **SEND)  # short dashes show
            ax.add_patch(FancyArrowPatch((start, y), (start + GAP, y), gid="send", **wrap))
            ax.add_patch(FancyArrowPatch((-GAP, y), (0, y), **wrap))
    left = -GAP - 0.05
    if labels:
        left -= 0.9
        for c in range(N):
            ax.text(-GAP - 0.1, -(c + 0.5) * CELL_H, f"chunk {c}", ha="right", va="center",
                    fontsize=8)  # fmt: skip
    ax.set_xlim(left, N * (CELL_W + GAP) + 0.05)
    ax.set_ylim(-N * CELL_H - 0.1, 0.55)
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()


def ring_figure(N: int = 4) -> Figure:
    """The ring all-reduce of N ranks, step by step: row 1 the reduce-scatter, row 2 the
    all-gather; in each row N - 1 steps (the state before the step, an arrow per message:
    every rank sends one chunk to its right neighbour) and the state after the phase."""
    steps, final = ring_schedule(N)
    fig = new_figure((2.4 * N + 1.0, 2.2 + 0.45 * N * 2))
    axes = fig.subplots(2, N)
    for row, phase in enumerate(("reduce-scatter", "all-gather")):
        mine = [s for s in steps if s[0] == phase]
        for ax, (_, k, before, sends) in zip(axes[row], mine, strict=False):
            _panel(ax, before, sends, f"{phase}, step {k + 1}", labels=ax is axes[row][0])
        after = steps[N - 1][2] if phase == "reduce-scatter" else final
        _panel(axes[row][-1], after, [], f"after the {phase}")
    colours = _palette(N)
    legend = [Patch(fc=colours[i], ec="0.4", label=f"sums {i + 1} rank{'s' if i else ''}")
              for i in range(N)]  # fmt: skip
    legend[-1].set_label(f"complete: all {N} ranks")
    legend.append(Patch(fc="white", ec=SEND["color"], lw=2, label="sent this step (arrow: to)"))
    fig.legend(handles=legend, loc="outside lower center", ncol=N + 1, fontsize=8, frameon=False)
    fig.suptitle(
        f"Ring all-reduce, {N} ranks, each buffer in {N} chunks (a box lists whose numbers it "
        "sums).\nReduce-scatter: the receiver adds the chunk in; all-gather: it overwrites its "
        "copy.\nArrows: the chunk each rank sends to its right neighbour (dashed: back to rank 0)",
        fontsize=10,
    )
    return fig
