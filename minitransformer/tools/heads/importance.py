"""The importance of each head (Michel, Levy & Neubig, 2019), and switching heads off.

Each head's output is multiplied by a gate m_h (``MultiHeadAttention.head_mask``; all 1: the
model unchanged). The importance of head h is how much the loss moves when its gate does:

    I_h = sum over batches of | dL(batch) / dm_h |    at m = 1

computed by the library's own backward (one backward per batch gives every head's score).
Michel et al. take the expectation over examples of |dL/dm_h|; a batch's loss is a mean over
its tokens, so a smaller batch is closer to their per-example form. ``normalize=True``
divides each layer's scores by their L2 norm, as they do before comparing layers.
``prune_order`` lists the heads from least to most important; ``set_heads`` switches heads
off (gate 0) and back on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ... import backend
from ...errors import ArgumentError
from ...nn.attention import MultiHeadAttention
from ...tensor import Tensor
from .collect import KINDS, _kind


def _layers(model: Any) -> list[tuple[tuple[str, int], MultiHeadAttention]]:
    """The model's attention layers as ((kind, layer), module), in ``KINDS`` order."""
    found = [(key, m) for name, m in model.named_modules()
             if isinstance(m, MultiHeadAttention) and (key := _kind(name)) is not None]  # fmt: skip
    return sorted(found, key=lambda km: (KINDS.index(km[0][0]), km[0][1]))


def head_importance(model: Any, batches: Iterable[tuple[Any, Any, Any]],
                    normalize: bool = True) -> dict[tuple[str, int], np.ndarray]:  # fmt: skip
    """{(kind, layer): I (H,)} for the Transformer ``model`` over ``batches`` of ids
    (src, tgt_in, tgt_out): the sum over batches of |dL/dm_h| (module doc), in evaluation
    mode (no dropout). The model's gates, mode and parameters' gradients are left as they
    were (its parameters get no gradient from this)."""
    layers = _layers(model)
    was_training, before = model.training, [m.head_mask for _, m in layers]
    params = list(model.parameters())
    needed = [p.requires_grad for p in params]
    scores = {key: np.zeros(m.h) for key, m in layers}
    model.eval()
    try:
        for p in params:
            p.requires_grad = False  # only the gates' gradients are wanted
        for src, tgt_in, tgt_out in batches:
            gates = {}
            for key, m in layers:
                w = m.w_o.weight
                ones = backend.asarray(np.ones(m.h), dtype=backend.dtype_name(w.dtype),
                                       device=w.device)  # fmt: skip
                m.head_mask = gates[key] = Tensor(ones, requires_grad=True)
            model.loss(model(src, tgt_in), tgt_out).backward()
            for key, g in gates.items():
                scores[key] += np.abs(backend.to_numpy(g.grad))
    finally:
        for p, was in zip(params, needed, strict=True):
            p.requires_grad = was
        for (_, m), mask in zip(layers, before, strict=True):
            m.head_mask = mask
        model.train(was_training)
    if normalize:
        scores = {k: v / (np.linalg.norm(v) or 1.0) for k, v in scores.items()}
    return scores


def prune_order(scores: dict[tuple[str, int], np.ndarray]) -> list[tuple[str, int, int]]:
    """Every head as (kind, layer, head), from the least to the most important (ties in
    the order of ``scores``)."""
    flat = []
    for i, ((kind, layer), v) in enumerate(scores.items()):
        flat += [(float(v[h]), i, h, (kind, layer, h)) for h in range(len(v))]
    return [head for *_, head in sorted(flat, key=lambda x: x[:3])]


def set_heads(model: Any, off: Iterable[tuple[str, int, int]] = ()) -> int:
    """Switch the heads in ``off`` ((kind, layer, head) triples) off and every other head
    on (an empty ``off`` removes every gate). Returns how many heads are off."""
    off = set(off)
    layers = _layers(model)
    known = {(kind, layer, h) for (kind, layer), m in layers for h in range(m.h)}
    if unknown := sorted(off - known, key=str):
        raise ArgumentError(
            f"set_heads: no such head {unknown[0]!r} in this model; heads are (kind, layer, "
            f"head) with kind one of {KINDS}, e.g. ('encoder self', 0, 1)"
        )
    count = 0
    for (kind, layer), m in layers:
        gate = [0.0 if (kind, layer, h) in off else 1.0 for h in range(m.h)]
        count += gate.count(0.0)
        m.head_mask = gate if 0.0 in gate else None
    return count
