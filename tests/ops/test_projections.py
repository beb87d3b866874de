"""The fused projections and the attention on their packed heads (``ops/projections.py``):
the same values and gradients as the layer's separate products, head split and attention
(self- and cross-attention, GQA's h_kv heads, biases on and off, d_k != d_v), gradcheck in
float64 on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.backend import to_numpy
from minitransformer.ops.attention import ScaledDotProductAttention
from minitransformer.ops.grouped_heads import RepeatHeads
from minitransformer.ops.heads import SplitHeads
from minitransformer.ops.projections import PackedAttention, Projections

# (h, h_kv, d_k, d_v): the paper's heads, GQA, multi-query, keys wider than values
HEADS = [(2, 2, 3, 3), (4, 2, 2, 2), (2, 1, 3, 2)]


def _params(make, rng, D, widths, bias):
    weights = [make(rng.standard_normal((D, w)) * 0.5) for w in widths]
    biases = [make(rng.standard_normal(w) * 0.5) for w in widths] if bias else []
    return weights, biases


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape", [(2, 3, 4), (3, 4), (4,)])
def test_projections_are_the_products_side_by_side(make, rng, x_shape, bias):
    widths = [4, 2, 3]
    x = make(rng.standard_normal(x_shape))
    weights, biases = _params(make, rng, x_shape[-1], widths, bias)
    y = Projections.apply(x, *weights, *biases, parts=3)
    parts = [F.linear(x, w, b) for w, b in zip(weights, biases or [None] * 3, strict=True)]
    want = np.concatenate([p.numpy() for p in parts], axis=-1)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-12)
    assert mt.gradcheck(lambda x, *p: Projections.apply(x, *p, parts=3), x, *weights, *biases)


def _separate(x, memory, weights, biases, mask, h, h_kv, d_k):
    """The layer's path: separate products, SplitHeads, RepeatHeads, the attention op."""
    bq, bk, bv = biases or [None] * 3
    q = SplitHeads.apply(F.linear(x, weights[0], bq), h=h)
    k = SplitHeads.apply(F.linear(memory, weights[1], bk), h=h_kv)
    v = SplitHeads.apply(F.linear(memory, weights[2], bv), h=h_kv)
    if h_kv < h:
        k, v = (RepeatHeads.apply(a, groups=h // h_kv) for a in (k, v))
    return ScaledDotProductAttention.apply(q, k, v, mask)


def _packed(x, memory, weights, biases, mask, h, h_kv, d_k, cross):
    if not cross:
        y = Projections.apply(x, *weights, *biases, parts=3)
        return PackedAttention.apply(y, None, mask, h=h, h_kv=h_kv, d_k=d_k)
    q = SplitHeads.apply(F.linear(x, weights[0], biases[0] if biases else None), h=h)
    kv = Projections.apply(memory, *weights[1:], *biases[1:], parts=2)
    return PackedAttention.apply(kv, q, mask, h=h, h_kv=h_kv, d_k=d_k)


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("h, h_kv, d_k, d_v", HEADS)
def test_packed_attention_is_the_layers_attention(make, rng, h, h_kv, d_k, d_v, bias, cross):
    B, T, S, D = 2, 3, 4 if cross else 3, 5
    x = make(rng.standard_normal((B, T, D)))
    memory = make(rng.standard_normal((B, S, D))) if cross else x
    weights, biases = _params(make, rng, D, [h * d_k, h_kv * d_k, h_kv * d_v], bias)
    keep = rng.random((B, 1, T, S)) > 0.3
    keep[0, 0, 1] = False  # a query row with every key masked: P = 0, no NaN
    mask = make(keep, dtype="bool", requires_grad=False)
    args = (weights, biases, mask, h, h_kv, d_k)
    got = _packed(x, memory, *args, cross)
    want = _separate(x, memory, *args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    u = make(rng.standard_normal(want.shape), requires_grad=False)
    leaves = [x, *([memory] if cross else []), *weights, *biases]
    grads = []
    for out in (lambda: _packed(x, memory, *args, cross), lambda: _separate(x, memory, *args)):
        for t in leaves:
            t.grad = None
        (out() * u).sum().backward()
        grads.append([t.grad for t in leaves])
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-10, atol=1e-12)

    def packed(*p):  # p: x, (memory,) and the weights, no biases
        first_weight = 2 if cross else 1
        ws = p[first_weight : first_weight + 3]
        return _packed(p[0], p[1] if cross else p[0], ws, [], mask, h, h_kv, d_k, cross)

    assert mt.gradcheck(packed, x, *([memory] if cross else []), *weights)
