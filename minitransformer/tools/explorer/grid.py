"""The explorer's static figure: every head of every kind of attention on one grid.

One row per (kind, layer) — the encoder's self-attention, the decoder's self-attention,
then the cross-attention, each layer in order — and one column per head; each panel is a
head's weights, queries as rows and keys as columns, on one colour scale from 0 to 1 (the
weights are probabilities), so the heads can be compared. Drawn headless (``viz.figure``:
no pyplot state) from ``collect.attention_data``'s data.

A word the tokenizer cut into pieces is labelled with joining dots (``beg·``, ``·in·``,
``·ning``: "beginning"; ``collect.words`` groups them), each piece still on its own row or
column, since attention is per piece.

Its size depends on the model only (its layers and heads), never on the sentence: the
panels are ``PANEL`` inches, the tokens are the at most max_len the model read, and the
title (the sentence and the translation, one line each) is cut to ``TITLE_CHARS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...data.text import shorten
from ..viz.figure import SaveTo, finish, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANEL = (2.7, 2.5)
"""Inches per head's panel (width, height)."""

TITLE_CHARS = 100
"""The most characters of the sentence, and of the translation, in the title (then "…")."""

JOINT = "\u00b7"
"""The mark between two pieces of one word (a middle dot), on the page as in the grid."""


def word_labels(tokens: list[str], sizes: list[int]) -> list[str]:
    """Each token's label: a piece that continues the word before it starts with ``JOINT``,
    one that the next piece continues ends with it (``["beg·", "·in·", "·ning"]``); a word of
    one piece is its own label. ``sizes``: the tokens of each word in order
    (``collect.attention_data``'s ``source_words``), adding up to ``len(tokens)``."""
    labels = []
    for size in sizes:
        for k in range(size):
            before = JOINT if k > 0 else ""
            after = JOINT if k < size - 1 else ""
            labels.append(before + tokens[len(labels)] + after)
    return labels


def plot_grid(data: dict[str, Any], path: SaveTo | None = None) -> Figure:
    """The grid of every (kind, layer) x head of ``data`` (module doc); saved to ``path``
    when given (a name's suffix picks the format, as ``viz.figure.finish`` says)."""
    rows = [(kind, layer, heads) for kind in data["kinds"]
            for layer, heads in enumerate(kind["layers"])]  # fmt: skip
    cols = max(len(heads) for *_, heads in rows)
    fig = new_figure((PANEL[0] * cols + 1.0, PANEL[1] * len(rows) + 0.8))
    axes = fig.subplots(len(rows), cols, squeeze=False)
    image = None
    for r, (kind, layer, heads) in enumerate(rows):
        queries, keys = (word_labels(data[side], data[side + "_words"])
                         for side in (kind["queries"], kind["keys"]))  # fmt: skip
        for h, ax in enumerate(axes[r]):
            if h >= len(heads):
                ax.set_axis_off()
                continue
            image = ax.imshow(np.asarray(heads[h], dtype=np.float64), vmin=0.0, vmax=1.0,
                              cmap="viridis", aspect="auto")  # fmt: skip
            ax.set_title(f"{kind['name']} · layer {layer} · head {h}", fontsize=8)
            # the tokens once per kind (its last layer's row) and per row (the first column);
            # no ticks elsewhere (each tick is several artists: hundreds slow the drawing)
            last = layer == len(kind["layers"]) - 1
            ax.set_xticks(range(len(keys)) if last else [])
            ax.set_yticks(range(len(queries)) if h == 0 else [])
            if last:
                ax.set_xticklabels(keys, rotation=90, fontsize=6, parse_math=False)
            if h == 0:
                ax.set_yticklabels(queries, fontsize=6, parse_math=False)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.5, label="attention weight")
    source, translation = (shorten(data[key], TITLE_CHARS) for key in ("sentence", "translation"))
    fig.suptitle(f"source: {source}\ntranslation: {translation}", fontsize=10, parse_math=False)
    return finish(fig, path)
