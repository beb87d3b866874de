"""The Transformer's layers and stacks (paper section 3.1, figure 1), shared by the
encoder-decoder (transformer.py) and the decoder-only language model (language_model.py).

    EncoderLayer:  x -> self-attention -> feed-forward               (each in a residual block)
    DecoderLayer:  x -> masked self-attention -> cross-attention(memory) -> feed-forward
    Encoder, Decoder, CausalStack: N copies of a layer (+ a final LayerNorm when pre-LN)

Each sublayer sits in a residual block:
    post-LN (the paper, default):  x = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN (pre_norm=True):        x = x + Dropout(Sublayer(LayerNorm(x)))

A decoder layer without its cross-attention has exactly an encoder layer's sublayers: what
makes it a decoder is the mask it is given (causal: position t sees 0..t) and the key/value
cache of cached decoding. So the language model's ``CausalStack`` stacks EncoderLayers.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend, checks
from .. import functional as F
from ..config import TransformerConfig
from ..ops.loss import CrossEntropy
from ..tensor import Tensor
from .attention import KVCache, MultiHeadAttention, check_attention
from .layers import (
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    PositionwiseFeedForward,
    check_feed_forward,
)
from .module import Module, ModuleList, Parameter


class _Residual(Module):
    """One residual block around a sublayer, post-LN or pre-LN (see the module doc).
    Built by a layer from its checked arguments."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = LayerNorm(d_model, _checked=True)
        self.dropout = Dropout(dropout, _checked=True)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, sublayer: Any) -> Tensor:
        if self.pre_norm:  # x + dropout(sublayer(norm(x)))
            return self.dropout.add(sublayer(self.norm(x)), x)
        return self.norm(self.dropout.add(sublayer(x), x))  # norm(x + dropout(sublayer(x)))


class _Layer(Module):
    """What EncoderLayer and DecoderLayer share: their sublayers, built from one list of
    arguments. Each attention in ``ATTENTIONS`` (self-attention; the decoder adds
    cross-attention), then the feed-forward, each in a residual block (block1, block2, ...).

    d_model, h, d_ff: the sizes (TransformerConfig's); dropout: P_drop of each sublayer
    output; pre_norm: pre-LN instead of the paper's post-LN; generator: draws the weights;
    d_k (None = d_model / h), scale (1/√d_k) and block_size (None = the fused op) of each
    attention; activation: the feed-forward's nonlinearity. The arguments are checked here,
    once, and the sublayers trust them (``_checked=True`` skips even that: the
    Transformer's come from a validated TransformerConfig).
    """

    ATTENTIONS: tuple[str, ...]

    def __init__(
        self,
        d_model: int,
        h: int,
        d_ff: int,
        dropout: float = 0.0,
        pre_norm: bool = False,
        generator: backend.Generator | None = None,
        d_k: int | None = None,
        scale: bool = True,
        activation: str = "relu",
        block_size: int | None = None,
        *,
        _checked: bool = False,
    ):
        super().__init__()
        if not _checked:
            where = type(self).__name__
            d_model, h, d_k, scale, block_size = check_attention(
                where, d_model, h, d_k, scale, block_size
            )
            _, d_ff, dropout, activation = check_feed_forward(
                where, d_model, d_ff, dropout, activation
            )
            pre_norm = checks.flag(where, "pre_norm", pre_norm)
        self.d_model, self.pre_norm = d_model, pre_norm
        for name in self.ATTENTIONS:
            attention = MultiHeadAttention(
                d_model, h, generator, d_k, scale, block_size, _checked=True
            )
            setattr(self, name, attention)
        self.ffn = PositionwiseFeedForward(
            d_model, d_ff, generator=generator, activation=activation, _checked=True
        )
        for i in range(1, len(self.ATTENTIONS) + 2):
            setattr(self, f"block{i}", _Residual(d_model, dropout, pre_norm))


class EncoderLayer(_Layer):
    """Self-attention then feed-forward, each in a residual block. x (B, S, D) -> (B, S, D).

    ``EncoderLayer(d_model, h, d_ff, dropout=0.0, pre_norm=False, generator=None,
    d_k=None, scale=True, activation="relu", block_size=None)``: see ``_Layer``.
    """

    ATTENTIONS = ("self_attn",)

    def forward(self, x: Tensor, mask: Any = None, cache: KVCache | None = None) -> Tensor:
        """x (B, L, D), mask broadcastable to (B, H, L, L') (the source's padding mask in the
        encoder; the causal mask in a language model, whose ``cache`` then holds the keys and
        values of the L' - L earlier positions) -> (B, L, D)."""
        x = self.block1(x, lambda y: self.self_attn(y, y, y, mask, cache))
        return self.block2(x, self.ffn)


class DecoderLayer(_Layer):
    """Masked self-attention, cross-attention over memory, feed-forward; each residual.

    x (B, T, D), memory (B, S, D), tgt_mask (B|1, 1, T, T'), src_mask (B, 1, 1, S).
    ``cache``: (self-attention KVCache, cross-attention KVCache) for cached decoding.
    The arguments are EncoderLayer's (see ``_Layer``).
    """

    ATTENTIONS = ("self_attn", "cross_attn")

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Any = None,
        tgt_mask: Any = None,
        cache: Any = None,
    ) -> Tensor:
        self_cache, cross_cache = cache if cache is not None else (None, None)
        x = self.block1(x, lambda y: self.self_attn(y, y, y, tgt_mask, self_cache))
        x = self.block2(x, lambda y: self.cross_attn(y, memory, memory, src_mask, cross_cache))
        return self.block3(x, self.ffn)


class _Stack(Module):
    """N copies of one layer class (plus a final LayerNorm when pre-LN).

    ``Encoder(N, d_model, h, d_ff, ...)``: the number of layers N, then the arguments of
    the layer class (EncoderLayer's, see ``_Layer``). The first layer checks them; its
    N - 1 copies take them as checked.
    """

    layer_class: type[_Layer]

    def __init__(self, N: int, *args: Any, _checked: bool = False, **kwargs: Any):
        super().__init__()
        if not _checked:
            where = type(self).__name__
            N = checks.positive_int(where, "N", N, "N is the number of layers, e.g. 6")
        first = self.layer_class(*args, _checked=_checked, **kwargs)
        copies = [self.layer_class(*args, _checked=True, **kwargs) for _ in range(N - 1)]
        self.layers = ModuleList([first, *copies])
        self.norm = LayerNorm(first.d_model, _checked=True) if first.pre_norm else None


class Encoder(_Stack):
    """N EncoderLayers (plus a final LayerNorm when pre-LN). x (B, S, D) -> memory (B, S, D)."""

    layer_class = EncoderLayer

    def forward(self, x: Tensor, src_mask: Any = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x) if self.norm is not None else x


class CausalStack(_Stack):
    """The language model's stack: N EncoderLayers given the causal mask (a decoder layer
    without cross-attention; see the module doc), plus a final LayerNorm when pre-LN.
    x (B, T, D) -> (B, T, D). ``cache``: one self-attention KVCache per layer."""

    layer_class = EncoderLayer

    def forward(self, x: Tensor, mask: Any, cache: list[KVCache] | None = None) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, None if cache is None else cache[i])
        return self.norm(x) if self.norm is not None else x


class Decoder(_Stack):
    """N DecoderLayers (plus a final LayerNorm when pre-LN). x (B, T, D) -> (B, T, D)."""

    layer_class = DecoderLayer

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Any = None,
        tgt_mask: Any = None,
        cache: Any = None,
    ) -> Tensor:
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else (cache.self_attn[i], cache.cross_attn[i])
            x = layer(x, memory, src_mask, tgt_mask, layer_cache)
        return self.norm(x) if self.norm is not None else x


def layer_arguments(cfg: TransformerConfig, generator: backend.Generator) -> dict[str, Any]:
    """A validated config's arguments of every layer (``_Layer``'s, after the sizes)."""
    return dict(
        dropout=cfg.dropout,
        pre_norm=cfg.pre_norm,
        generator=generator,
        d_k=cfg.key_dim,
        scale=cfg.scale_attention,
        activation=cfg.activation,
        block_size=cfg.attention_block_size,
    )


class TokenModel(Module):
    """What the encoder-decoder and the language model share around their stacks: the
    logits from the last hidden states, the training loss, the attention switch. A subclass
    sets ``cfg`` (a TransformerConfig), ``positions``, ``scale`` (√d_model, or None),
    ``out_proj`` (None when tied), ``logits_bias`` (or None) and ``output_embedding`` (the
    matrix E (V, D) a tied model projects with)."""

    cfg: TransformerConfig
    positions: Module
    scale: float | None
    out_proj: Linear | None
    logits_bias: Parameter | None
    output_embedding: Embedding

    def _build_output(self, cfg: TransformerConfig, generator: backend.Generator) -> None:
        """What both models build last, after their stacks (so that the weights are drawn
        in this order): the output projection W (D, V) unless tied, the logits bias, the
        embedding scale √d_model; then the whole model in cfg.dtype."""
        D, V = cfg.d_model, cfg.tgt_vocab
        self.out_proj = (
            None if cfg.tie_embeddings else Linear(D, V, bias=False, generator=generator,
                                                   _checked=True)
        )  # fmt: skip
        zeros = backend.namespace_for_device("cpu").zeros(V)
        self.logits_bias = Parameter(zeros, dtype="float32") if cfg.logits_bias else None
        self.scale = math.sqrt(D) if cfg.scale_embedding else None  # None: no multiply
        self.to(dtype=cfg.dtype)

    def embedded(self, embedding: Embedding, ids: Any, offset: int = 0) -> Tensor:
        """Checked ids (B, T) -> E[ids]·√d_model + PE[offset : offset + T], then dropout
        (paper 3.4 and 3.5): (B, T, D)."""
        x = embedding(ids, validate=False)  # (B, T, D)
        return self.positions(x * self.scale if self.scale is not None else x, offset=offset)

    def project(self, x: Tensor) -> Tensor:
        """Hidden states (B, T, D) -> logits (B, T, V): x Eᵀ when tied (paper 3.4), else
        x W; plus the logits bias b (V,) when cfg.logits_bias."""
        if self.out_proj is not None:
            logits = self.out_proj(x)
            return logits + self.logits_bias if self.logits_bias is not None else logits
        weight, bias = self.output_embedding.weight, self.logits_bias
        return F.linear(x, weight, bias, transpose_weight=True)  # (B,T,D) @ (D,V) + b

    def loss(self, logits: Tensor, tgt_out: Any, *, checked: bool = False) -> Tensor:
        """Label-smoothed cross-entropy (cfg.label_smoothing), ignoring padding targets.
        ``checked``: the targets were checked on the host (no read-back: a CUDA graph can
        hold the pass)."""
        eps, pad = float(self.cfg.label_smoothing), self.cfg.pad_id
        if checked:
            return CrossEntropy.apply(logits, tgt_out, label_smoothing=eps, ignore_index=pad)
        return F.cross_entropy(logits, tgt_out, label_smoothing=eps, ignore_index=pad)

    def attention_weights(self, on: bool = True) -> None:
        """Keep (on=True) each attention layer's last weights in ``.last_weights``."""
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.store_weights = on
                module.last_weights = None
