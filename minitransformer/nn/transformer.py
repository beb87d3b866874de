"""The encoder-decoder Transformer (paper section 3, figure 1).

    src (B, S) ─ embed·√d_model + PE ─ dropout ─ Encoder: N × EncoderLayer ─► memory (B, S, D)
    tgt_in (B, T) ─ same ─ Decoder: N × DecoderLayer(memory) ─ h @ Eᵀ ─► logits (B, T, V)

Each sublayer (self-attention, cross-attention, feed-forward) sits in a residual block:
    post-LN (the paper, default):  x = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN (cfg.pre_norm):         x = x + Dropout(Sublayer(LayerNorm(x))), and each stack
                                   ends with one more LayerNorm
Attention switches (cfg.key_dim, cfg.scale_attention): each head's query/key width d_k
and whether the logits are divided by √d_k; both exist for the Table 3 ablations.
With tied embeddings (paper 3.4), ONE matrix E (V, D) embeds source and target tokens and
projects the decoder's output to logits = h Eᵀ (no bias).

Cached decoding: ``cache = model.new_cache()``, then ``model.decode(tgt_step, memory,
src, cache)`` for each new token (B, 1); each step projects only the new position, and
its logits equal those of a full recomputation.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import backend, checks
from .. import functional as F
from ..config import TransformerConfig
from ..errors import ArgumentError
from ..ops.loss import CrossEntropy
from ..tensor import Tensor
from .attention import KVCache, MultiHeadAttention, check_attention
from .inputs import check_ids, check_memory
from .layers import (
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    PositionwiseFeedForward,
    check_feed_forward,
)
from .marian_weights import read_marian, write_marian
from .masks import causal_mask, padding_mask
from .module import Module, ModuleList, Parameter
from .positional import PositionalEncoding


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

    def forward(self, x: Tensor, src_mask: Any = None) -> Tensor:
        x = self.block1(x, lambda y: self.self_attn(y, y, y, src_mask))
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


@dataclass
class DecoderCache:
    """What cached decoding keeps between steps.

    self_attn[i]: layer i's self-attention keys/values of the target so far (B, H, t, d_k).
    cross_attn[i]: layer i's cross-attention keys/values of memory (computed at step 1).
    tgt_keep: (B, 1, 1, t) bool, which target positions so far are not padding.
    src_keep: (B, 1, 1, S) bool, the source's padding mask (its src checked at step 1).
    offset: t, the number of target positions already decoded (the next one's position).
    """

    self_attn: list[KVCache] = field(default_factory=list)
    cross_attn: list[KVCache] = field(default_factory=list)
    tgt_keep: Any = None
    src_keep: Any = None
    offset: int = 0


class Transformer(Module):
    """Transformer(cfg, seed): the whole model; forward(src, tgt_in) -> logits.

    src (B, S) and tgt_in (B, T) are int token ids (Tensors or raw arrays on the model's
    device, or host NumPy arrays / lists, checked on the host and uploaded); masks come
    from ``cfg.pad_id``. Weights are drawn from ``seed`` (on the host)
    in cfg.dtype on the default device; ``model.to("cuda")`` moves them.
    """

    def __init__(self, cfg: TransformerConfig, seed: int = 0):
        super().__init__()
        if not isinstance(cfg, TransformerConfig):
            raise ArgumentError(
                f"Transformer: cfg must be a TransformerConfig, got {type(cfg).__name__}; "
                "build one with mt.TransformerConfig(src_vocab=V, tgt_vocab=V, ...) or "
                "TransformerConfig.from_dict(d)"
            )
        seed = checks.non_negative_int("Transformer", "seed", seed, "pass e.g. seed=0")
        self.cfg = cfg.validate()  # checked once, here: the layers below trust its values
        gen = backend.Generator(seed, "cpu")
        D, V = cfg.d_model, cfg.tgt_vocab
        self.src_embed = Embedding(cfg.src_vocab, D, generator=gen, _checked=True)
        self.tgt_embed = (
            self.src_embed if cfg.tie_embeddings else Embedding(V, D, gen, _checked=True)
        )
        self.positions = PositionalEncoding(
            D, cfg.max_len, cfg.dropout, cfg.learned_positions, cfg.position_layout, _checked=True
        )
        layer_args = dict(
            dropout=cfg.dropout,
            pre_norm=cfg.pre_norm,
            generator=gen,
            d_k=cfg.key_dim,
            scale=cfg.scale_attention,
            activation=cfg.activation,
            block_size=cfg.attention_block_size,
        )
        for name, stack in (("encoder", Encoder), ("decoder", Decoder)):
            N, h, d_ff = cfg.sizes(name)  # cfg.decoder_* where the decoder differs
            setattr(self, name, stack(N, D, h, d_ff, **layer_args, _checked=True))
        self.out_proj = (
            None if cfg.tie_embeddings else Linear(D, V, bias=False, generator=gen, _checked=True)
        )
        zeros = backend.namespace_for_device("cpu").zeros(V)
        self.logits_bias = Parameter(zeros, dtype="float32") if cfg.logits_bias else None
        self.scale = math.sqrt(D) if cfg.scale_embedding else None  # None: no multiply
        self.to(dtype=cfg.dtype)

    # ------------------------------------------------------------------ the three passes
    # Each public pass checks the ids it is given (check_ids) once, then runs the private
    # pass, which trusts them.
    def forward(self, src: Any, tgt_in: Any, *, checked: bool = False) -> Tensor:
        """src (B, S), tgt_in (B, T) int ids -> logits (B, T, tgt_vocab). ``checked``: the
        ids were checked on the host and are on the model's device (no read-back here)."""
        cfg, tgt = self.cfg, tgt_in
        if not checked:
            src = check_ids("src", src, cfg.src_vocab, cfg.max_len, self.device)
            tgt = check_ids("tgt_in", tgt_in, cfg.tgt_vocab, cfg.max_len, self.device)
        src_keep = padding_mask(src, cfg.pad_id)  # (B, 1, 1, S)
        return self._decode(tgt, self._encode(src, src_keep), src_keep)

    def encode(self, src: Any) -> Tensor:
        """src (B, S) int ids -> memory (B, S, d_model)."""
        src = check_ids("src", src, self.cfg.src_vocab, self.cfg.max_len, self.device)
        return self._encode(src, padding_mask(src, self.cfg.pad_id))

    def decode(
        self, tgt_in: Any, memory: Tensor, src: Any, cache: DecoderCache | None = None
    ) -> Tensor:
        """tgt_in (B, T) ids, memory (B, S, D), src (B, S) ids -> logits (B, T, tgt_vocab).

        With ``cache`` (from ``new_cache()``), tgt_in holds only the NEW positions (usually
        one, (B, 1)); earlier positions' keys and values come from the cache, which is
        updated in place. A cache belongs to one source: its first step checks ``src`` and
        ``memory`` and keeps the source's padding mask (as it keeps memory's keys and
        values), so the later steps of a decoding loop check only their new ids.
        """
        cfg = self.cfg
        offset = cache.offset if cache is not None else 0
        tgt = check_ids("tgt_in", tgt_in, cfg.tgt_vocab, cfg.max_len, self.device, offset)
        if cache is not None and cache.src_keep is not None:
            src_keep = cache.src_keep  # checked at this cache's first step
        else:
            src = check_ids("src", src, cfg.src_vocab, cfg.max_len, self.device)
            check_memory(memory, src, cfg.d_model)
            src_keep = padding_mask(src, cfg.pad_id)  # (B, 1, 1, S)
            if cache is not None:
                cache.src_keep = src_keep
        return self._decode(tgt, memory, src_keep, cache)

    def _encode(self, src: Any, src_keep: Any) -> Tensor:
        """Checked src (B, S) and its padding mask (B, 1, 1, S) -> memory (B, S, D)."""
        x = self.src_embed(src, validate=False)  # (B, S, D)
        x = self.positions(x * self.scale if self.scale is not None else x)
        return self.encoder(x, src_keep)

    def _decode(
        self, tgt: Any, memory: Tensor, src_keep: Any, cache: DecoderCache | None = None
    ) -> Tensor:
        """Checked tgt (B, T), memory (B, S, D), src padding mask -> logits (B, T, V)."""
        cfg = self.cfg
        offset = cache.offset if cache is not None else 0
        T = tgt.shape[1]
        tgt_mask = causal_mask(T, tgt.device, offset)  # (1, 1, T, offset + T)
        if cfg.bos_id != cfg.pad_id:  # else the start token is the pad id: the future only
            keep = padding_mask(tgt, cfg.pad_id)  # (B, 1, 1, T)
            if cache is not None:
                if cache.tgt_keep is not None:
                    keep = backend.namespace(keep).concat([cache.tgt_keep, keep], axis=-1)
                cache.tgt_keep = keep  # (B, 1, 1, offset + T)
            tgt_mask = tgt_mask & keep  # (B, 1, T, offset + T)
        x = self.tgt_embed(tgt, validate=False)  # (B, T, D)
        x = self.positions(x * self.scale if self.scale is not None else x, offset=offset)
        x = self.decoder(x, memory, src_keep, tgt_mask, cache)
        if cache is not None:
            cache.offset += T
        return self.project(x)

    def project(self, x: Tensor) -> Tensor:
        """Decoder output (B, T, D) -> logits (B, T, tgt_vocab): x Eᵀ when tied, else x W;
        plus the logits bias b (tgt_vocab,) when cfg.logits_bias."""
        if self.out_proj is not None:
            logits = self.out_proj(x)
            return logits + self.logits_bias if self.logits_bias is not None else logits
        weight, bias = self.tgt_embed.weight, self.logits_bias
        return F.linear(x, weight, bias, transpose_weight=True)  # (B,T,D) @ (D,V) + b

    # ------------------------------------------------------------------ Marian's files
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], dtype: str = "float32") -> Transformer:
        """The model of a Hugging Face Marian folder (Helsinki-NLP/opus-mt-*: config.json and
        model.safetensors), in eval mode; ``model(src, tgt_in)`` gives MarianMTModel's logits.
        Every field and array is checked first (nn/marian_config.py, nn/marian_weights.py)."""
        cfg, state = read_marian(path, dtype)
        model = cls(cfg)
        model.load_state_dict(state)
        return model.eval()

    def save_pretrained(self, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write this model as a Marian folder that transformers.MarianMTModel.from_pretrained
        reads with the same logits; returns the folder. Existing files need ``overwrite``."""
        return write_marian(self, path, checks.flag("save_pretrained", "overwrite", overwrite))

    # ------------------------------------------------------------------ helpers
    def loss(self, logits: Tensor, tgt_out: Any, *, checked: bool = False) -> Tensor:
        """Label-smoothed cross-entropy (cfg.label_smoothing), ignoring padding targets.
        ``checked``: as ``forward``'s (no read-back: a CUDA graph can hold the pass)."""
        eps, pad = float(self.cfg.label_smoothing), self.cfg.pad_id
        if checked:
            return CrossEntropy.apply(logits, tgt_out, label_smoothing=eps, ignore_index=pad)
        return F.cross_entropy(
            logits,
            tgt_out,
            label_smoothing=self.cfg.label_smoothing,
            ignore_index=self.cfg.pad_id,
        )

    def new_cache(self) -> DecoderCache:
        """An empty cache for cached (incremental) decoding; one per batch being decoded."""
        N = self.cfg.sizes("decoder")[0]
        return DecoderCache(
            self_attn=[KVCache(static=False) for _ in range(N)],
            cross_attn=[KVCache(static=True) for _ in range(N)],
        )

    def attention_weights(self, on: bool = True) -> None:
        """Keep (on=True) each attention layer's last weights in ``.last_weights``."""
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.store_weights = on
                module.last_weights = None

    def extra_repr(self) -> str:
        c = self.cfg
        return f"d_model={c.d_model}, h={c.h}, N={c.N}, d_ff={c.d_ff}, tied={c.tie_embeddings}"
