"""Lesson 12's diagram: an RNN encoder-decoder unrolled over time, without and with attention.

Drawn by code, box by box and arrow by arrow, for a source of ``S`` tokens and ``T`` outputs:

    row 2 (outputs)                                  y_0    y_1  ...  y_{T-1}
                                                      ^      ^          ^
    row 1 (states)    m_0 -> m_1 -> ... -> m_{S-1} -> h_0 -> h_1 -> ... h_{T-1}
                       ^      ^              ^        ^      ^          ^
    row 0 (inputs)    x_0    x_1    ...   x_{S-1}   BOS    y_0   ...  y_{T-2}

Every arrow is one step of the computation: an input read by a cell, a state passed to the
next step (the recurrence), a state read out. With ``attention=True`` the decoder step that
writes ``h_t`` also reads every encoder state ``m_s`` through the attention weights ``a_ts``
(drawn for one output ``t``: each decoder step has such a fan).

On the reverse task output ``t`` needs source token ``j = S - 1 - t``. The diagram highlights
the path from ``x_j`` to ``y_t``: without attention it crosses the state-to-state arrows
``m_j -> ... -> m_{S-1} -> h_0 -> ... -> h_t``, ``(S - 1 - j) + 1 + t = 2t + 1`` of them when
``S = T``; with attention one, ``m_j -> h_t``.

``draw_unrolled(ax, S, T, t, attention)`` draws one panel and returns its counts;
``unrolled_figure(S, t)`` draws both panels side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path

BOX_W, BOX_H = 0.62, 0.42  # a box, in data units (one time step = 1 unit across)
GAP = 0.7  # extra room between the encoder's last column and the decoder's first
FAINT, PLAIN = "0.65", "0.25"  # arrow colours off the highlighted path


@dataclass
class Panel:
    """What one panel drew: its boxes, its arrows, and the highlighted path from the needed
    source token x_j to the output y_t (``path_state_arrows``: the arrows on it that go from
    one state to another, the recurrent steps and the attention read)."""

    boxes: int
    arrows: int
    path_arrows: int
    path_state_arrows: int


class _Canvas:
    """Boxes and arrows on one Axes, counted as they are drawn."""

    def __init__(self, ax: plt.Axes, colour: str):
        self.ax, self.colour = ax, colour
        self.boxes = self.arrows = self.path_arrows = self.path_state_arrows = 0

    def box(self, x: float, y: float, label: str, kind: str, on_path: bool) -> None:
        fill = {"input": "#eef3fb", "state": "#fdf0dc", "output": "#e9f5e9"}[kind]
        self.ax.add_patch(
            FancyBboxPatch(
                (x - BOX_W / 2, y - BOX_H / 2), BOX_W, BOX_H,
                boxstyle="round,pad=0.02", facecolor=fill,
                edgecolor=self.colour if on_path else PLAIN, linewidth=2.4 if on_path else 1.0,
            )
        )  # fmt: skip
        self.ax.text(x, y, label, ha="center", va="center", fontsize=11)
        self.boxes += 1

    def arrow(self, start, end, on_path: bool, state_to_state: bool, via=None) -> None:
        """An arrow between the edges of two boxes (centres ``start`` and ``end``), straight,
        or along the corners ``via`` (then ``start`` and ``end`` are its exact ends)."""
        style = dict(
            arrowstyle="-|>", mutation_scale=12, zorder=3 if on_path else 2,
            color=self.colour if on_path else (FAINT if via else PLAIN),
            linewidth=2.4 if on_path else 1.0,
        )  # fmt: skip
        if via is None:
            patch = FancyArrowPatch(start, end, shrinkA=14, shrinkB=14, **style)
        else:
            patch = FancyArrowPatch(path=Path([start, *via, end]), **style)
        self.ax.add_patch(patch)
        self.arrows += 1
        self.path_arrows += on_path
        self.path_state_arrows += on_path and state_to_state


def draw_unrolled(
    ax: plt.Axes, S: int = 4, T: int | None = None, t: int = 2, attention: bool = False,
    colour: str = "C0",
) -> Panel:  # fmt: skip
    """Draw the unrolled encoder-decoder on ``ax``: S source tokens, T outputs (T = S if None),
    the path from x_{S-1-t} to y_t highlighted in ``colour``; with ``attention`` the decoder
    step t also reads every encoder state. Returns the counts (``Panel``)."""
    T = S if T is None else T
    if not (S >= 1 and T >= 1 and 0 <= t < T and t <= S - 1):
        raise ValueError(f"need S, T >= 1 and 0 <= t < min(S, T); got S={S}, T={T}, t={t}")
    j = S - 1 - t  # the source token output t needs on the reverse task
    c = _Canvas(ax, colour)
    enc = [(float(s), 1.0) for s in range(S)]  # m_s
    dec = [(S + GAP + float(u), 1.0) for u in range(T)]  # h_u

    # which state-to-state arrows the highlighted path crosses
    def enc_on(s):  # the encoder's chain m_s -> m_{s+1}
        return not attention and s >= j

    def dec_on(u):  # the decoder's chain h_u -> h_{u+1}
        return not attention and u < t

    for s, (x, y) in enumerate(enc):
        c.box(x, y - 1, f"$x_{{{s}}}$", "input", on_path=s == j)
        c.box(x, y, f"$m_{{{s}}}$", "state", on_path=s == j or enc_on(s))
        c.arrow((x, y - 1), (x, y), on_path=s == j, state_to_state=False)
        if s + 1 < S:
            c.arrow((x, y), enc[s + 1], on_path=enc_on(s), state_to_state=True)
    c.arrow(enc[-1], dec[0], on_path=not attention, state_to_state=True)  # h_0's start state
    for u, (x, y) in enumerate(dec):
        on = u == t or dec_on(u)
        c.box(x, y - 1, "BOS" if u == 0 else f"$y_{{{u - 1}}}$", "input", on_path=False)
        c.box(x, y, f"$h_{{{u}}}$", "state", on_path=on)
        c.box(x, y + 1, f"$y_{{{u}}}$", "output", on_path=u == t)
        c.arrow((x, y - 1), (x, y), on_path=False, state_to_state=False)
        c.arrow((x, y), (x, y + 1), on_path=u == t, state_to_state=False)
        if u + 1 < T:
            c.arrow((x, y), dec[u + 1], on_path=dec_on(u), state_to_state=True)
    if attention:  # decoder step t reads every m_s, weighted by a_ts
        for s, (x, y) in enumerate(enc):
            # up from m_s, over the outputs' row, down in the gap left of y_t, into h_t
            k = S - 1 - s  # nested: the farthest source runs highest and drops leftmost
            top, drop = y + 1.45 + 0.08 * k, dec[t][0] - 0.42 - 0.05 * k
            via = [(x, top), (drop, top), (drop, y + BOX_H)]
            end = (dec[t][0] - BOX_W / 4, y + BOX_H / 2 + 0.03)
            c.arrow((x, y + BOX_H / 2 + 0.02), end, s == j, state_to_state=True, via=via)
        ax.text(enc[-1][0] + 0.5, y + 1.55 + 0.08 * (S - 1), f"attention: step {t} reads every "
                f"$m_s$, weighted by $a_{{{t}s}}$", fontsize=9, color=PLAIN)  # fmt: skip
    top = 1.0 + 1.45 + 0.08 * (S - 1) + 0.4 if attention else 2.3  # room for the fan's lines

    ax.set_xlim(-0.6, dec[-1][0] + 0.6)
    ax.set_ylim(-0.75, top)
    ax.set_aspect("equal")
    ax.axis("off")
    for x, label in ((enc[0][0], "encoder"), (dec[0][0], "decoder")):
        ax.text(x - BOX_W / 2, -0.62, label, fontsize=10, style="italic", color=PLAIN)
    return Panel(c.boxes, c.arrows, c.path_arrows, c.path_state_arrows)


def unrolled_figure(S: int = 4, t: int = 2) -> tuple[plt.Figure, dict[str, Panel]]:
    """Both panels, S = T source tokens and outputs, the path to output t highlighted: left
    without attention (colour C0, lesson 12's 'gru'), right with it (C1, 'gru+additive')."""
    fig, axes = plt.subplots(2, 1, figsize=(1.05 * (2 * S + GAP + 1), 7.2))
    panels = {}
    for ax, attention, colour, name in zip(
        axes, (False, True), ("C0", "C1"), ("without attention", "with attention"), strict=True
    ):
        p = draw_unrolled(ax, S, S, t, attention, colour)
        panels[name] = p
        j = S - 1 - t
        ax.set_title(
            f"{name}: $x_{{{j}}}$ reaches $y_{{{t}}}$ across {p.path_state_arrows} "
            f"state-to-state arrow{'s' if p.path_state_arrows != 1 else ''}",
            fontsize=11, color=colour,
        )  # fmt: skip
    return fig, panels
