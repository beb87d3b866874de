"""Every attention layer's weights for a batch, and their statistics per head.

A Transformer has three kinds of attention (``KINDS``): the encoder's self-attention over
the source, the decoder's masked self-attention over the target, and its cross-attention
from the target to the source. ``attention_maps`` runs the model once (evaluation mode, no
gradients) with each layer keeping its weights; ``model_head_stats`` turns them into one
row per (kind, layer, head) with ``stats.head_stats``, over the real tokens only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import backend
from ...errors import ArgumentError, ShapeError
from ...nn.attention import MultiHeadAttention
from ...tensor import no_grad
from .args import KINDS, check_batch, check_model, given
from .stats import STATS, head_stats


def _kind(name: str) -> tuple[str, int] | None:
    """('encoder self', 0) for 'encoder.layers.0.self_attn', ... ; None for another name."""
    parts = name.split(".")
    if len(parts) != 4 or parts[1] != "layers":
        return None
    kind = {("encoder", "self_attn"): "encoder self", ("decoder", "self_attn"): "decoder self",
            ("decoder", "cross_attn"): "cross"}.get((parts[0], parts[3]))  # fmt: skip
    return None if kind is None else (kind, int(parts[2]))


def attention_maps(model: Any, src: Any, tgt_in: Any) -> dict[tuple[str, int], np.ndarray]:
    """{(kind, layer): weights (B, H, T, S) as NumPy} for every attention layer of the
    Transformer ``model`` on ids src (B, S) and tgt_in (B, T). The model's mode and its
    layers' ``store_weights`` are left as they were."""
    model = check_model("attention_maps", model)
    src, tgt_in = check_batch("attention_maps", model, (src, tgt_in))
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)]
    was_training, stored = model.training, [m.store_weights for _, m in layers]
    model.eval()
    for _, m in layers:
        m.store_weights = True
    try:
        with no_grad():
            model(src, tgt_in, checked=True)
        maps = {}
        for name, m in layers:
            key = _kind(name)
            if key is not None:
                maps[key] = backend.to_numpy(m.last_weights)
    finally:
        model.train(was_training)
        for (_, m), was in zip(layers, stored, strict=True):
            m.store_weights, m.last_weights = was, None
    return maps


Maps = dict[tuple[str, int], np.ndarray]  # (kind, layer) -> weights (B, H, T, S)


def model_head_stats(
    model: Any, src: Any, tgt_in: Any, maps: Maps | None = None
) -> list[dict[str, Any]]:
    """One row per (kind, layer, head): {"kind", "layer", "head", and each of ``STATS``},
    over the rows of real tokens (the source's in the encoder, the target's in the
    decoder; padding is ``model.cfg.pad_id``). ``maps``: ``attention_maps`` of these ids,
    where the caller has them already (else the model runs once more to make them)."""
    model = check_model("model_head_stats", model)
    src, tgt_in = check_batch("model_head_stats", model, (src, tgt_in))
    pad = model.cfg.pad_id
    src_valid = backend.to_numpy(src) != pad
    tgt_valid = backend.to_numpy(tgt_in) != pad
    rows = []
    if maps is None:
        maps = attention_maps(model, src, tgt_in)
    else:
        check_maps(maps, src_valid.shape, tgt_valid.shape)
    for (kind, layer), w in sorted(maps.items(),
                                   key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1])):  # fmt: skip
        stats = head_stats(w, src_valid if kind == "encoder self" else tgt_valid)
        for h in range(w.shape[1]):
            rows.append({"kind": kind, "layer": layer, "head": h,
                         **{k: float(stats[k][h]) for k in STATS}})  # fmt: skip
    return rows


def check_maps(maps: Any, src_shape: tuple[int, int], tgt_shape: tuple[int, int]) -> None:
    """``maps`` given to ``model_head_stats``: a dict {(kind, layer): weights (B, H, T, S)}
    whose rows and keys are those of the ids (src (B, S), tgt_in (B, T)), as
    ``attention_maps`` makes it."""
    where = "model_head_stats"
    if not isinstance(maps, dict):
        raise ArgumentError(
            f"{where}: maps must be the dict {{(kind, layer): weights}} that attention_maps "
            f"returns, got {type(maps).__name__}; or leave it out (None)"
        )
    sides = {"encoder self": (src_shape, src_shape), "decoder self": (tgt_shape, tgt_shape),
             "cross": (tgt_shape, src_shape)}  # fmt: skip
    for key, w in maps.items():
        if not isinstance(key, tuple) or len(key) != 2 or key[0] not in KINDS:
            raise ArgumentError(
                f"{where}: a key of maps must be (kind, layer) with kind one of {KINDS}, got "
                f"{given(key)}; pass attention_maps(model, src, tgt_in)"
            )
        (B, T), (_, S) = sides[key[0]]
        shape = getattr(w, "shape", None)
        if shape is None or len(shape) != 4 or (shape[0], shape[2], shape[3]) != (B, T, S):
            raise ShapeError(
                f"{where}: maps[{given(key)}] has shape {shape}, need (B, H, T, S) with (B, T, S) "
                f"= {(B, T, S)} for these ids; pass attention_maps(model, src, tgt_in)"
            )
