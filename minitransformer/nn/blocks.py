"""The Transformer's layers and stacks (paper section 3.1, figure 1), shared by the
encoder-decoder (transformer.py) and the decoder-only language model (language_model.py).

    EncoderLayer:  x -> self-attention -> feed-forward               (each in a residual block)
    DecoderLayer:  x -> masked self-attention -> cross-attention(memory) -> feed-forward
    Encoder, Decoder, CausalStack: N copies of a layer (+ a final LayerNorm when pre-LN)

Each sublayer sits in a residual block:
    post-LN (the paper, default):  x = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN (pre_norm=True):        x = x + Dropout(Sublayer(LayerNorm(x)))
The norm is LayerNorm, or RMSNorm when cfg.norm is "rms" (config/blocks.py: the switches
that make the paper's layer GPT-2's or Llama's).

A decoder layer without its cross-attention has exactly an encoder layer's sublayers: what
makes it a decoder is the mask it is given (causal: position t sees 0..t) and the key/value
cache of cached decoding. So the language model's ``CausalStack`` stacks EncoderLayers
(``Block``, the name a language model's readers know them by, is EncoderLayer itself).

The config flows down once. A model hands its TransformerConfig, validated when it was made
and frozen since, to its stacks, ``Encoder(cfg)``; a stack hands it to each layer,
``EncoderLayer(cfg)``; a layer to its sublayers. Each reads the fields it needs and checks
none of them again (the basic layers at the bottom, Linear, LayerNorm and Dropout, take
plain numbers: ``_checked=True`` tells them these were read from the config). Built by hand
from loose numbers, ``EncoderLayer(d_model, h, d_ff, ...)`` or ``Encoder(N, d_model, h,
d_ff, ...)``, a layer or stack checks them once, where they enter (``layer_config``), and
makes them the config that its layers read.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend, checks
from .. import functional as F
from ..config import TransformerConfig
from ..errors import ArgumentError
from ..ops.loss import CrossEntropy
from ..tensor import Tensor
from .attention import KVCache, MultiHeadAttention, check_attention
from .layers import (
    Dropout,
    Embedding,
    Linear,
    PositionwiseFeedForward,
    check_feed_forward,
    norm_layer,
)
from .module import Module, ModuleList, Parameter

NO_VOCAB = 3  # a layer built by hand reads no vocabulary: its config holds the smallest one
# a TransformerConfig accepts (the ids pad 0, bos 1, eos 2)


def layer_config(
    where: str,
    d_model: int,
    h: int,
    d_ff: int,
    dropout: float = 0.0,
    pre_norm: bool = False,
    d_k: int | None = None,
    scale: bool = True,
    activation: str = "relu",
    block_size: int | None = None,
    N: int = 1,
) -> TransformerConfig:
    """The loose arguments of a layer or stack built by hand, each checked here, where it
    enters (a library error that names ``where``, the argument and the fix), made the
    TransformerConfig its layers read: the fields of the same names, and key_dim = d_k,
    scale_attention = scale, attention_block_size = block_size (N: a stack's layers). The
    config validates itself as every config does, a second look at numbers that passed."""
    d_model, h, d_k, scale, block_size = check_attention(where, d_model, h, d_k, scale, block_size)
    _, d_ff, dropout, activation = check_feed_forward(where, d_model, d_ff, dropout, activation)
    pre_norm = checks.flag(where, "pre_norm", pre_norm)
    return TransformerConfig(
        src_vocab=NO_VOCAB, tgt_vocab=NO_VOCAB, d_model=d_model, h=h, N=N, d_ff=d_ff,
        dropout=dropout, pre_norm=pre_norm, key_dim=d_k, scale_attention=scale,
        activation=activation, attention_block_size=block_size,
    )  # fmt: skip


class _Residual(Module):
    """One residual block around a sublayer, post-LN or pre-LN (see the module doc):
    cfg.d_model wide, cfg.dropout on the sublayer's output, cfg.pre_norm."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm = norm_layer(cfg)  # cfg.norm: LayerNorm, or RMSNorm
        self.dropout = Dropout(cfg.dropout, _checked=True)
        self.pre_norm = cfg.pre_norm

    def forward(self, x: Tensor, sublayer: Any) -> Tensor:
        if self.pre_norm:  # x + dropout(sublayer(norm(x)))
            return self.dropout.add(sublayer(self.norm(x)), x)
        return self.norm(self.dropout.add(sublayer(x), x))  # norm(x + dropout(sublayer(x)))


class _Layer(Module):
    """What EncoderLayer and DecoderLayer share: their sublayers, read from one config. Each
    attention in ``ATTENTIONS`` (self-attention; the decoder adds cross-attention), then the
    feed-forward, each in a residual block (block1, block2, ...).

    ``EncoderLayer(cfg, generator=None)``: a layer of a TransformerConfig (its ``STACK``'s
    heads and d_ff, ``cfg.sizes``), read as it is: the models and stacks build theirs so.
    ``EncoderLayer(d_model, h, d_ff, dropout=0.0, pre_norm=False, generator=None, d_k=None,
    scale=True, activation="relu", block_size=None)``: by hand, each argument checked once,
    here (``layer_config``). d_model, h, d_ff: the sizes; dropout: P_drop of each sublayer
    output; pre_norm: pre-LN instead of the paper's post-LN; generator: draws the weights;
    d_k (None = d_model / h), scale (1/√d_k) and block_size (None = the fused op) of each
    attention; activation: the feed-forward's nonlinearity.
    """

    STACK: str  # whose sizes the layer reads from a config: "encoder" or "decoder"
    ATTENTIONS: tuple[str, ...]

    def __init__(
        self,
        d_model: int | TransformerConfig,
        h: int | None = None,
        d_ff: int | None = None,
        dropout: float = 0.0,
        pre_norm: bool = False,
        generator: backend.Generator | None = None,
        d_k: int | None = None,
        scale: bool = True,
        activation: str = "relu",
        block_size: int | None = None,
    ):
        super().__init__()
        if isinstance(d_model, TransformerConfig):  # validated when made, frozen since
            cfg = d_model
        else:
            where = type(self).__name__
            cfg = layer_config(where, d_model, h, d_ff, dropout, pre_norm, d_k, scale,
                               activation, block_size)  # fmt: skip
        _, h, d_ff = cfg.sizes(self.STACK)
        self.d_model, self.pre_norm = cfg.d_model, cfg.pre_norm
        for name in self.ATTENTIONS:
            cross = name == "cross_attn"  # reads the whole source: full attention
            setattr(self, name, MultiHeadAttention(cfg, h, generator, cross=cross))
        self.ffn = PositionwiseFeedForward(cfg, d_ff, generator=generator)
        for i in range(1, len(self.ATTENTIONS) + 2):
            setattr(self, f"block{i}", _Residual(cfg))


class EncoderLayer(_Layer):
    """Self-attention then feed-forward, each in a residual block. x (B, S, D) -> (B, S, D).

    ``EncoderLayer(cfg, generator=None)`` or ``EncoderLayer(d_model, h, d_ff, dropout=0.0,
    pre_norm=False, generator=None, d_k=None, scale=True, activation="relu",
    block_size=None)``: see ``_Layer``. ``Block`` is this class: a language model's stack
    (``CausalStack``) is made of these layers, given the causal mask.
    """

    STACK = "encoder"
    ATTENTIONS = ("self_attn",)

    def forward(self, x: Tensor, mask: Any = None, cache: KVCache | None = None) -> Tensor:
        """x (B, L, D), mask broadcastable to (B, H, L, L') (the source's padding mask in the
        encoder; the causal mask in a language model, whose ``cache`` then holds the keys and
        values of the L' - L earlier positions) -> (B, L, D)."""
        x = self.block1(x, lambda y: self.self_attn(y, y, y, mask, cache))
        return self.block2(x, self.ffn)


Block = EncoderLayer  # a language model's name for its layer (GPT's "block"): CausalStack's


class DecoderLayer(_Layer):
    """Masked self-attention, cross-attention over memory, feed-forward; each residual.

    x (B, T, D), memory (B, S, D), tgt_mask (B|1, 1, T, T'), src_mask (B, 1, 1, S).
    ``cache``: (self-attention KVCache, cross-attention KVCache) for cached decoding.
    The arguments are EncoderLayer's (see ``_Layer``); from a config, the decoder's sizes.
    """

    STACK = "decoder"
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

    ``Encoder(cfg, generator=None)``: the layers of a TransformerConfig (N, or decoder_N
    for the Decoder), each given the config. ``Encoder(N, d_model, h, d_ff, dropout=0.0,
    pre_norm=False, generator=None, d_k=None, scale=True, activation="relu",
    block_size=None)``: by hand, the number of layers N, then the arguments of the layer
    class (EncoderLayer's, see ``_Layer``), checked once however many layers there are.
    """

    layer_class: type[_Layer]

    def __init__(
        self,
        N: int | TransformerConfig,
        d_model: int | None = None,
        h: int | None = None,
        d_ff: int | None = None,
        dropout: float = 0.0,
        pre_norm: bool = False,
        generator: backend.Generator | None = None,
        d_k: int | None = None,
        scale: bool = True,
        activation: str = "relu",
        block_size: int | None = None,
    ):
        super().__init__()
        if isinstance(N, TransformerConfig):  # validated when made, frozen since
            cfg = N
        else:
            fix = "N is the number of layers, e.g. 6"
            N = checks.positive_int(type(self).__name__, "N", N, fix)
            cfg = layer_config(self.layer_class.__name__, d_model, h, d_ff, dropout, pre_norm,
                               d_k, scale, activation, block_size, N=N)  # fmt: skip
        N = cfg.sizes(self.layer_class.STACK)[0]
        self.layers = ModuleList([self.layer_class(cfg, generator=generator) for _ in range(N)])
        self.norm = norm_layer(cfg) if cfg.pre_norm else None  # the final norm of pre-LN


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
            None if cfg.tie_embeddings else Linear(D, V, False, generator, _checked=True)
        )
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
        """Keep (on=True) each attention layer's last weights in ``.last_weights``: the
        layers that form them, full attention (cfg.attention local, strided and linear never
        do; a decoder's cross-attention, always full, does)."""
        layers = [m for m in self.modules() if isinstance(m, MultiHeadAttention)]
        full = [m for m in layers if m.attention == "full"]
        if on and not full:
            raise ArgumentError(
                f"attention_weights: this model's attention is {self.cfg.attention!r}, which "
                "never forms the weights P, so there are none to keep; attention maps need "
                "a model with attention='full'"
            )
        for module in full:
            module.store_weights = on
            module.last_weights = None
