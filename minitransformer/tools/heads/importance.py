"""The importance of each head (Michel, Levy & Neubig, 2019), and switching heads off.

Each head's output is multiplied by a gate m_h (``MultiHeadAttention.head_mask``; all 1: the
model unchanged). The importance of head h is how much the loss moves when its gate does:

    I_h = sum over batches of | dL(batch) / dm_h |    at m = 1

computed by the library's own backward (one backward per batch gives every head's score).
Michel et al. take the expectation over examples of |dL/dm_h|; a batch's loss is a mean over
its tokens, and per-example derivatives of opposite signs cancel inside a batch, so batches
of one sentence give their form (lesson 19 measures the difference).

The scores are raw by default, and ``prune_order`` ranks every head of every layer on them
at once. ``normalize=True`` divides each layer's scores by their L2 norm, as Michel et al.
do: that leaves the order of the heads within a layer as it is and changes only how layers
compare, so it must not be ranked across layers (lesson 19: on en-es-tiny the normalised
scores hardly correlate with the loss each head's removal causes, the raw ones do).
``set_heads`` switches heads off (gate 0) and back on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ... import backend, checks
from ...errors import ArgumentError
from ...nn.attention import MultiHeadAttention
from ...tensor import Tensor
from .args import EXAMPLE, check_batches, check_heads, check_model, check_scores, given
from .collect import KINDS, _kind


def _layers(model: Any) -> list[tuple[tuple[str, int], MultiHeadAttention]]:
    """The model's attention layers as ((kind, layer), module), in ``KINDS`` order."""
    found = [(key, m) for name, m in model.named_modules()
             if isinstance(m, MultiHeadAttention) and (key := _kind(name)) is not None]  # fmt: skip
    return sorted(found, key=lambda km: (KINDS.index(km[0][0]), km[0][1]))


def head_importance(model: Any, batches: Iterable[tuple[Any, Any, Any]],
                    normalize: bool = False) -> dict[tuple[str, int], np.ndarray]:  # fmt: skip
    """{(kind, layer): I (H,)} for the Transformer ``model`` over ``batches`` of ids
    (src, tgt_in, tgt_out): the sum over batches of |dL/dm_h| (module doc), in evaluation
    mode (no dropout). The model's gates, mode and parameters' gradients are left as they
    were (its parameters get no gradient from this). ``batches``: a list (or a stream) of
    triples, or of ``data.batching.Batch``; at least one."""
    model = check_model("head_importance", model)
    batches = check_batches("head_importance", model, batches)
    normalize = checks.flag("head_importance", "normalize", normalize)
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
            model.loss(model(src, tgt_in, checked=True), tgt_out).backward()
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
    """Every head as (kind, layer, head), from the least to the most important, ranked on
    the scores as given across every layer and kind at once (ties in the order of
    ``scores``). ``scores``: ``head_importance``'s raw dict, its default (a list of numbers
    stands for an array; every score finite); scores normalised per layer would rank a
    layer's heads by how the layer's other heads compare, not by what they cost."""
    scores = check_scores("prune_order", scores)
    flat = []
    for i, ((kind, layer), v) in enumerate(scores.items()):
        flat += [(float(v[h]), i, h, (kind, layer, h)) for h in range(len(v))]
    return [head for *_, head in sorted(flat, key=lambda x: x[:3])]


def set_heads(model: Any, off: Iterable[tuple[str, int, int]] = ()) -> int:
    """Switch the heads in ``off`` ((kind, layer, head) triples) off and every other head
    on (an empty ``off`` removes every gate). Returns how many heads are off.

    A head may be a list ``[kind, layer, head]`` (as JSON gives a triple back) and its
    indices NumPy integers; a head the model does not have is an ArgumentError that says
    which heads it has."""
    model = check_model("set_heads", model)
    off = check_heads("set_heads", off)
    layers = _layers(model)
    known = {(kind, layer, h) for (kind, layer), m in layers for h in range(m.h)}
    if unknown := sorted(off - known):
        sizes = ", ".join(f"{kind}: {sum(k == kind for (k, _), _ in layers)} layers of "
                          f"{max((m.h for (k, _), m in layers if k == kind), default=0)} heads"
                          for kind in KINDS)  # fmt: skip
        raise ArgumentError(
            f"set_heads: no such head {given(unknown[0])} in this model ({sizes}; layers and "
            f"heads count from 0); e.g. {EXAMPLE}"
        )
    count = 0
    for (kind, layer), m in layers:
        gate = [0.0 if (kind, layer, h) in off else 1.0 for h in range(m.h)]
        count += gate.count(0.0)
        m.head_mask = gate if 0.0 in gate else None
    return count
