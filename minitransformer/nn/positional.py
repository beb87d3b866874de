"""PositionalEncoding: tell the model where each token sits (paper section 3.5).

Attention alone is blind to order, so each embedded token gets a vector that depends on
its position. The paper's sinusoids, for position pos and i = 0 .. d_model/2 - 1:

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Each pair of coordinates is a rotation at its own wavelength (2 pi to 10000 * 2 pi), so
PE(pos + k) is a linear function of PE(pos) for every offset k. ``layout="halves"`` puts
the same values in another order, every sine first and then every cosine
(PE(pos, i) = sin(angle_i), PE(pos, ceil(D/2) + i) = cos(angle_i)): Marian's opus-mt models
were trained with that table. The two layouts give the same family of models up to a fixed
reordering of the features, but a pretrained model needs the table it was trained with.
The table (max_len, D) is a non-persistent buffer (the config determines it, so
checkpoints need not store it). With ``learned=True`` the table is a Parameter instead,
initialised with the sinusoids. A model with rotary positions (cfg.rotary, RoPE: every
self-attention rotates its queries and keys by position, ops/rotary.py) adds no table: its
PositionalEncoding only drops out and checks the length.
"""

from __future__ import annotations

import math

from .. import backend, checks
from ..config import TransformerConfig
from ..errors import ConfigError, ShapeError, TokenIdError
from ..tensor import Tensor
from .layers import Dropout
from .module import Module, Parameter


def sinusoid_table(max_len: int, d_model: int, layout: str = "interleaved") -> backend.Array:
    """The (max_len, d_model) float64 host array of sines and cosines above, in ``layout``
    "interleaved" (sin, cos, sin, cos, ...: the paper) or "halves" (sines, then cosines)."""
    xp = backend.namespace_for_device("cpu")
    pos = xp.reshape(xp.arange(max_len, dtype=xp.float64), (max_len, 1))  # (L, 1)
    two_i = xp.arange(0, d_model, 2, dtype=xp.float64)  # (ceil(D/2),)
    angle = pos * xp.exp(two_i * (-math.log(10000.0) / d_model))  # (L, ceil(D/2))
    if layout == "halves":  # (L, D): ceil(D/2) sines, then floor(D/2) cosines
        return xp.concat([xp.sin(angle), xp.cos(angle)[:, : d_model // 2]], axis=1)
    if layout != "interleaved":
        raise ConfigError(f"sinusoid_table: layout must be 'interleaved' or 'halves', got "
                          f"{layout!r}")  # fmt: skip
    pairs = xp.stack([xp.sin(angle), xp.cos(angle)], axis=-1)  # (L, ceil(D/2), 2)
    return xp.reshape(pairs, (max_len, -1))[:, :d_model]  # (L, D): sin, cos, sin, cos ...


class PositionalEncoding(Module):
    """x (B, T, D) -> dropout(x + PE[offset : offset + T]) (B, T, D).

    ``offset`` is the position of x's first token (nonzero during cached decoding, where
    one new token arrives at a time).

    ``PositionalEncoding(cfg)``: a model's, given its TransformerConfig (validated when it
    was made, frozen since: read, not checked again): cfg.d_model, cfg.max_len, cfg.dropout,
    cfg.learned_positions, cfg.position_layout. Given numbers, it checks each where it
    enters.
    """

    def __init__(
        self,
        d_model: int | TransformerConfig,
        max_len: int | None = None,
        dropout: float = 0.0,
        learned: bool = False,
        layout: str = "interleaved",
    ):
        super().__init__()
        self.rotary = False  # True: positions enter the attention (RoPE), no table here
        if isinstance(d_model, TransformerConfig):
            cfg = d_model
            d_model, max_len, dropout = cfg.d_model, cfg.max_len, cfg.dropout
            learned, layout = cfg.learned_positions, cfg.position_layout
            self.rotary = cfg.rotary is not None
        else:
            where = "PositionalEncoding"
            d_model = checks.positive_int(where, "d_model", d_model, "the model width, e.g. 512")
            max_len = checks.positive_int(
                where, "max_len", max_len, "the longest sequence the model accepts, e.g. 256"
            )
            learned = checks.flag(where, "learned", learned)
            dropout = checks.probability(where, "dropout", dropout)
        self.d_model, self.max_len, self.learned = d_model, max_len, learned
        self.layout = layout
        table = None if self.rotary else sinusoid_table(max_len, d_model, layout)  # checks layout
        if table is None:
            self.table = None
        elif learned:
            self.table = Parameter(table, dtype="float32")
        else:
            self.register_buffer(
                "table",
                Tensor(table, dtype="float32"),
                persistent=False,
                build=lambda: sinusoid_table(max_len, d_model, layout),  # to(dtype=) recomputes
            )
        self.dropout = Dropout(dropout, _checked=True)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ShapeError(
                f"PositionalEncoding: x has shape {tuple(x.shape)}, expected (B, T, d_model) "
                f"with d_model = {self.d_model}; embed the token ids first (B, T) -> "
                f"(B, T, {self.d_model})"
            )
        T = x.shape[1]
        if offset + T > self.max_len:
            where = f"positions {offset}..{offset + T - 1}" if offset else f"length T = {T}"
            raise TokenIdError(
                f"PositionalEncoding: {where} exceed(s) max_len = {self.max_len}; raise "
                f"max_len in the config (TransformerConfig(max_len=...)) or shorten the input"
            )
        if self.table is None:  # rotary: the attention layers place the tokens
            return self.dropout(x)
        return self.dropout(x + self.table[offset : offset + T])  # (B, T, D) + (T, D)

    def extra_repr(self) -> str:
        if self.rotary:
            return f"d_model={self.d_model}, max_len={self.max_len}, rotary (no table)"
        extra = "" if self.layout == "interleaved" else f", layout={self.layout}"
        return f"d_model={self.d_model}, max_len={self.max_len}, learned={self.learned}{extra}"
