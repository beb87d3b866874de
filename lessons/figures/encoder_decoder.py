"""Lesson 08's picture: the encoder-decoder Transformer's data flow, with every shape.

``encoder_decoder_figure()`` draws the paper's figure 1 as the library computes it (post-LN):

- encoder: src ids (B, S) -> Embedding * sqrt(D) + PositionalEncoding (B, S, D) -> N x
  [self-attention (padding mask (B, 1, 1, S)) -> add & LayerNorm -> feed-forward -> add &
  LayerNorm] -> memory (B, S, D);
- decoder: tgt_in = <bos> + target (B, T) -> the same embedding -> N x [masked self-attention
  (causal and padding (B, 1, T, T)) -> add & LayerNorm -> cross-attention (Q from the decoder,
  K and V from the memory, weights (B, H, T, S)) -> add & LayerNorm -> feed-forward -> add &
  LayerNorm] -> logits y E^T (B, T, V) -> cross-entropy against tgt_out = target + <eos>.

Each sublayer's residual path is drawn around it into its "add & LayerNorm":
x <- LayerNorm(x + sublayer(x)). A diagram, not a measurement: every label follows from the
arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from matplotlib.patches import FancyBboxPatch

from minitransformer.tools.viz.figure import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ENC, DEC, IO = "#dbe9f6", "#fde3cf", "#eeeeee"  # encoder, decoder, inputs and outputs
ENC_EDGE, DEC_EDGE = "#4a7bb7", "#d9822b"
STREAM = "0.25"  # the colour of the main data flow


def _box(ax: Axes, x: float, y: float, w: float, h: float, text: str, colour, gid=None):
    """A rounded box with lower-left corner (x, y) and its text centred."""
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            fc=colour,
            ec="0.3",
            lw=1,
            gid=gid,
        )
    )
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=8.5)


def _arrow(ax: Axes, start, end, colour=STREAM, gid=None, **kw) -> None:
    ax.annotate(
        "", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.3, **kw)
    ).set_gid(gid)


def _frame(ax: Axes, x, y, w, h, colour, title: str, repeat: str, side: str) -> None:
    """The dashed outline of one layer, its title inside and "N x" outside on ``side``."""
    ax.add_patch(
        FancyBboxPatch(
            (x, y), w, h, boxstyle="round,pad=0.02", fc="none", ec=colour, lw=1.5, ls="--"
        )
    )
    ax.text(x + 0.12, y + h - 0.1, title, fontsize=9, color=colour, fontweight="bold", va="top")
    x_rep, ha = (x - 0.15, "right") if side == "left" else (x + w + 0.15, "left")
    ax.text(
        x_rep, y + h / 2, repeat, fontsize=12, color=colour, fontweight="bold", ha=ha, va="center"
    )


def _layer(ax: Axes, x: float, w: float, y0: float, sublayers, colour, side: str) -> float:
    """Stack ``sublayers`` [(text, height)] from y0 upwards, each followed by its add &
    LayerNorm, with the residual path drawn around it on ``side``; returns the top."""
    centre = x + w / 2
    edge, bend = (x, x - 0.22) if side == "left" else (x + w, x + w + 0.22)
    y = y0
    for n, (text, height) in enumerate(sublayers):
        branch = y - 0.12  # the stream enters the sublayer here ...
        _box(ax, x, y, w, height, text, colour, gid="sublayer")
        _arrow(ax, (centre, y + height), (centre, y + height + 0.25))
        y_add = y + height + 0.25
        _box(ax, x, y_add, w, 0.4, "add & LayerNorm", colour, gid="add_norm")
        # ... and also goes around it, straight into the addition
        ax.plot([centre, bend, bend], [branch, branch, y_add + 0.2], color=STREAM, lw=1.1)
        _arrow(ax, (bend, y_add + 0.2), (edge, y_add + 0.2), gid="residual")
        y = y_add + 0.4
        if n < len(sublayers) - 1:
            _arrow(ax, (centre, y), (centre, y + 0.3))
            y += 0.3
    return y


def encoder_decoder_figure(
    n_layers: int | str = "N",
    src_example: str = "the black cat sleeps",
    tgt_example: str = "<bos> le chat noir dort",
) -> Figure:
    """The encoder-decoder data flow with shapes; ``n_layers`` labels the stacks ("N x").
    Returns the Figure (Agg canvas, no pyplot)."""
    fig = new_figure((12, 9.2))
    ax = fig.add_subplot()
    ax.set_xlim(-0.4, 12.6)
    ax.axis("off")
    repeat = f"{n_layers} ×"

    # encoder column, x 0.6 .. 4.4
    ex, ew = 0.6, 3.8
    _box(ax, ex, 0.2, ew, 0.7, f"src ids  (B, S)\ne.g. {src_example}", IO)
    _box(ax, ex, 1.4, ew, 0.7, "Embedding · √D  +  PositionalEncoding\n(B, S, D)", ENC)
    _arrow(ax, (ex + ew / 2, 0.9), (ex + ew / 2, 1.4))
    _arrow(ax, (ex + ew / 2, 2.1), (ex + ew / 2, 3.0))
    enc_top = _layer(
        ax,
        ex + 0.1,
        ew - 0.2,
        3.0,
        [
            ("self-attention\nQ, K, V all from x  (B, S, D)\nmask: padding (B, 1, 1, S)", 1.0),
            ("feed-forward, per position\n(B, S, D) → (B, S, d_ff) → (B, S, D)", 0.7),
        ],
        ENC,
        side="left",
    )
    _frame(
        ax, ex - 0.2, 2.6, ew + 0.4, enc_top - 2.6 + 0.55, ENC_EDGE, "Encoder layer", repeat, "left"
    )
    y_mem = enc_top + 1.0
    _arrow(ax, (ex + ew / 2, enc_top), (ex + ew / 2, y_mem))
    _box(ax, ex, y_mem, ew, 0.7, "memory  (B, S, D)\none vector per source token", ENC)

    # decoder column, x 6.6 .. 11.4
    dx, dw = 6.6, 4.8
    _box(
        ax,
        dx,
        0.2,
        dw,
        0.7,
        f"tgt_in = <bos> + target  (B, T)   (shifted right)\ne.g. {tgt_example}",
        IO,
    )
    _box(ax, dx, 1.4, dw, 0.7, "the same Embedding · √D  +  PositionalEncoding\n(B, T, D)", DEC)
    _arrow(ax, (dx + dw / 2, 0.9), (dx + dw / 2, 1.4))
    _arrow(ax, (dx + dw / 2, 2.1), (dx + dw / 2, 3.0))
    cross_y = 3.0 + 1.0 + 0.25 + 0.4 + 0.3  # the second sublayer starts here
    dec_top = _layer(
        ax,
        dx + 0.1,
        dw - 0.2,
        3.0,
        [
            (
                "MASKED self-attention\nQ, K, V all from y  (B, T, D)\n"
                "mask: causal ∧ padding (B, 1, T, T)",
                1.0,
            ),
            (
                "CROSS-attention\nQ from y  (B, T, D);  K, V from memory  (B, S, D)\n"
                "weights (B, H, T, S); mask: padding (B, 1, 1, S)",
                1.0,
            ),
            ("feed-forward, per position\n(B, T, D) → (B, T, d_ff) → (B, T, D)", 0.7),
        ],
        DEC,
        side="right",
    )
    _frame(
        ax,
        dx - 0.2,
        2.6,
        dw + 0.4,
        dec_top - 2.6 + 0.55,
        DEC_EDGE,
        "Decoder layer",
        repeat,
        "right",
    )
    y_logits = dec_top + 1.0
    _arrow(ax, (dx + dw / 2, dec_top), (dx + dw / 2, y_logits))
    _box(ax, dx, y_logits, dw, 0.7, "logits = y Eᵀ  (B, T, V)\n(E: the shared embedding)", DEC)
    _arrow(ax, (dx + dw / 2, y_logits + 0.7), (dx + dw / 2, y_logits + 1.1))
    _box(
        ax,
        dx,
        y_logits + 1.1,
        dw,
        0.7,
        "loss: cross-entropy against\ntgt_out = target + <eos>  (B, T)",
        IO,
    )
    ax.set_ylim(0.0, y_logits + 2.0)

    # the only place where the two stacks meet
    _arrow(
        ax,
        (ex + ew, y_mem + 0.35),
        (dx + 0.1, cross_y + 0.5),
        colour=ENC_EDGE,
        gid="memory",
        connectionstyle="arc3,rad=-0.2",
    )
    ax.text(
        5.45,
        y_mem + 0.75,
        "memory → K, V of the\ncross-attention in\nEVERY decoder layer",
        ha="center",
        fontsize=8.5,
        color=ENC_EDGE,
    )
    ax.text(
        5.5,
        1.0,
        "residual: x + sublayer(x),\nthen LayerNorm (post-LN)",
        ha="center",
        fontsize=8,
        color="0.35",
    )
    fig.suptitle(
        "The encoder–decoder Transformer, with shapes\n(B batch, S source length, T target "
        "length, D d_model, H heads, V vocabulary)",
        fontsize=10.5,
    )
    return fig
