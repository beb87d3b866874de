"""The encoder-decoder Transformer (paper section 3, figure 1).

    src (B, S) ─ embed·√d_model + PE ─ dropout ─ Encoder: N × EncoderLayer ─► memory (B, S, D)
    tgt_in (B, T) ─ same ─ Decoder: N × DecoderLayer(memory) ─ h @ Eᵀ ─► logits (B, T, V)

The layers and stacks (and their residual blocks, post-LN or pre-LN) are in blocks.py,
shared with the decoder-only language model (language_model.py).
Attention switches (cfg.key_dim, cfg.scale_attention): each head's query/key width d_k
and whether the logits are divided by √d_k; both exist for the Table 3 ablations.
With tied embeddings (paper 3.4), ONE matrix E (V, D) embeds source and target tokens and
projects the decoder's output to logits = h Eᵀ (no bias).

Cached decoding: ``cache = model.new_cache(capacity=steps)``, then ``model.decode(tgt_step,
memory, src, cache)`` for each new token (B, 1); each step projects only the new position
and writes it in place into buffers allocated once (``nn/kv_cache.py``), and its logits
equal those of a full recomputation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import backend, checks
from ..config import TransformerConfig
from ..errors import ArgumentError
from ..tensor import Tensor
from .blocks import Decoder, Encoder, TokenModel
from .inputs import check_ids, check_memory
from .kv_cache import KVCache, PositionBuffer
from .layers import Embedding
from .marian_weights import read_marian, write_marian
from .masks import decoder_mask, padding_mask
from .positional import PositionalEncoding


@dataclass
class DecoderCache:
    """What cached decoding keeps between steps.

    self_attn[i]: layer i's self-attention keys/values of the target so far (B, H, t, d_k).
    cross_attn[i]: layer i's cross-attention keys/values of memory (computed at step 1).
    tgt_keep: which target positions so far are not padding, a buffer of positions whose
        ``view()`` is (B, 1, 1, t) bool, written in place like the keys (nn/kv_cache.py).
    src_keep: (B, 1, 1, S) bool, the source's padding mask (its src checked at step 1).
    offset: t, the number of target positions already decoded (the next one's position).
    """

    self_attn: list[KVCache] = field(default_factory=list)
    cross_attn: list[KVCache] = field(default_factory=list)
    tgt_keep: PositionBuffer = field(default_factory=lambda: PositionBuffer(axis=3))
    src_keep: Any = None
    offset: int = 0
    _src_buffer: Any = None  # the source mask's array, kept by reset (keep_source)

    def keep_rows(self, order: Any) -> None:
        """Keep the rows ``order`` of the target's caches, in place (beam search's
        survivors); the cross-attention caches, the same for a sentence's beams, stay."""
        for kv in self.self_attn:
            kv.keep_rows(order)
        self.tgt_keep.keep_rows(order)

    def keep_source(self, src_keep: Any) -> None:
        """The source's padding mask (B, 1, 1, S), kept at the first step: written into the
        mask a decode of the same shapes kept before (a fixed address), else kept as is."""
        old = self._src_buffer
        if old is not None and old.shape == src_keep.shape and old.dtype == src_keep.dtype:
            old[...] = src_keep
            src_keep = old
        self.src_keep = self._src_buffer = src_keep

    def positions(self) -> tuple:
        """The host side of the target's caches (offset, the mask's span, each layer's
        ``KVCache.positions()``): what a replayed CUDA graph of a step sets, not runs."""
        layers = tuple(kv.positions() for kv in self.self_attn)
        return (self.offset, self.tgt_keep.start, self.tgt_keep.end, layers)

    def set_positions(self, positions: tuple) -> None:
        """Set what ``positions()`` returned."""
        self.offset, self.tgt_keep.start, self.tgt_keep.end, layers = positions
        for kv, p in zip(self.self_attn, layers, strict=True):
            kv.set_positions(p)

    def reset(self) -> None:
        """Empty again for a new decode of the same shapes, every buffer kept (the fixed
        addresses a CUDA graph of the step reads, fast/gpu/decode_graph.py)."""
        for kv in self.self_attn + self.cross_attn:
            kv.reset()
        self.tgt_keep.reset()
        self.src_keep, self.offset = None, 0


def check_capacity(where: str, capacity: Any) -> int | None:
    """``new_cache``'s capacity: None or a positive int (the positions a decode takes)."""
    if capacity is None:
        return None
    return checks.positive_int(
        where, "capacity", capacity, "the positions a decode takes, or None to grow as needed"
    )


class Transformer(TokenModel):
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
        self.cfg = cfg  # validated when it was made, frozen since: read, not checked again
        gen = backend.Generator(seed, "cpu")
        D, V = cfg.d_model, cfg.tgt_vocab
        self.src_embed = Embedding(cfg.src_vocab, D, generator=gen, _checked=True)
        self.tgt_embed = (
            self.src_embed if cfg.tie_embeddings else Embedding(V, D, gen, _checked=True)
        )
        self.positions = PositionalEncoding(cfg)  # each reads what it needs from cfg: the
        self.encoder = Encoder(cfg, generator=gen)  # stacks their sizes (the decoder's are
        self.decoder = Decoder(cfg, generator=gen)  # cfg.decoder_* where set)
        self._build_output(cfg, gen)  # W (unless tied), the logits bias, √d_model

    @property
    def output_embedding(self) -> Embedding:
        """The target embedding E, which a tied model projects with (TokenModel.project)."""
        return self.tgt_embed

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
        self, tgt_in: Any, memory: Tensor, src: Any, cache: DecoderCache | None = None,
        *, checked: bool = False,
    ) -> Tensor:  # fmt: skip
        """tgt_in (B, T) ids, memory (B, S, D), src (B, S) ids -> logits (B, T, tgt_vocab).

        With ``cache`` (from ``new_cache()``), tgt_in holds only the NEW positions (usually
        one, (B, 1)); earlier positions' keys and values come from the cache, which is
        updated in place. A cache belongs to one source: its first step checks ``src`` and
        ``memory`` and keeps the source's padding mask (as it keeps memory's keys and
        values), so the later steps of a decoding loop check only their new ids.
        ``checked``: tgt_in was checked (or made by the decoder, e.g. an argmax) and is on
        the model's device: no read-back here (a step replayed from a CUDA graph has none).
        """
        cfg = self.cfg
        offset = cache.offset if cache is not None else 0
        tgt = tgt_in
        if checked is not True:
            checks.flag("Transformer.decode", "checked", checked)
            tgt = check_ids("tgt_in", tgt_in, cfg.tgt_vocab, cfg.max_len, self.device, offset)
        if cache is not None and cache.src_keep is not None:
            src_keep = cache.src_keep  # checked at this cache's first step
        else:
            src = check_ids("src", src, cfg.src_vocab, cfg.max_len, self.device)
            check_memory(memory, src, cfg.d_model)
            src_keep = padding_mask(src, cfg.pad_id)  # (B, 1, 1, S)
            if cache is not None:
                cache.keep_source(src_keep)
                src_keep = cache.src_keep
        return self._decode(tgt, memory, src_keep, cache)

    def _encode(self, src: Any, src_keep: Any) -> Tensor:
        """Checked src (B, S) and its padding mask (B, 1, 1, S) -> memory (B, S, D)."""
        return self.encoder(self.embedded(self.src_embed, src), src_keep)  # (B, S, D)

    def _decode(
        self, tgt: Any, memory: Tensor, src_keep: Any, cache: DecoderCache | None = None
    ) -> Tensor:
        """Checked tgt (B, T), memory (B, S, D), src padding mask -> logits (B, T, V)."""
        cfg = self.cfg
        offset = cache.offset if cache is not None else 0
        T = tgt.shape[1]
        keep = None  # the start token may be the pad id: then the future alone is masked
        if cfg.bos_id != cfg.pad_id:
            keep = padding_mask(tgt, cfg.pad_id)  # (B, 1, 1, T)
            if cache is not None:  # written in place after the earlier positions' own
                keep = cache.tgt_keep.append(keep)  # (B, 1, 1, offset + T)
        # causal AND padding, (B, 1, T, offset + T); a rule, not an array, for kinds that
        # never form the scores (cfg.attention local, strided, linear)
        tgt_mask = decoder_mask(cfg.attention, T, tgt.device, offset, keep)
        x = self.embedded(self.tgt_embed, tgt, offset)  # (B, T, D)
        x = self.decoder(x, memory, src_keep, tgt_mask, cache)
        if cache is not None:
            cache.offset += T
        return self.project(x)

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
    def new_cache(self, capacity: int | None = None) -> DecoderCache:
        """An empty cache for cached (incremental) decoding; one per batch being decoded.
        ``capacity``: the target positions the decode will take (at most cfg.max_len),
        so that its buffers are allocated once; None: they grow as needed (kv_cache.py)."""
        capacity = check_capacity("Transformer.new_cache", capacity)
        if capacity is not None:
            capacity = min(capacity, self.cfg.max_len)
        N = self.cfg.sizes("decoder")[0]
        return DecoderCache(
            self_attn=[KVCache(static=False, capacity=capacity) for _ in range(N)],
            cross_attn=[KVCache(static=True) for _ in range(N)],
            tgt_keep=PositionBuffer(axis=3, capacity=capacity),
        )

    def extra_repr(self) -> str:
        c = self.cfg
        return f"d_model={c.d_model}, h={c.h}, N={c.N}, d_ff={c.d_ff}, tied={c.tie_embeddings}"
