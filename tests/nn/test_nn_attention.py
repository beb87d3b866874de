"""MultiHeadAttention: against a per-head NumPy reference, gradcheck with masks, stored
weights, and the key/value cache."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import to_np

import minitransformer as mt
from minitransformer.errors import ShapeError
from minitransformer.nn import KVCache, MultiHeadAttention, causal_mask, padding_mask


def mha(device, d_model=8, h=2):
    m = MultiHeadAttention(d_model, h, generator=mt.backend.Generator(3)).to(device, "float64")
    rng = np.random.default_rng(2)
    for p in m.parameters():  # non-zero biases
        p.data = mt.backend.asarray(to_np(p) + 0.2 * rng.standard_normal(p.shape), device=device)
    return m


def reference(m, q, k, v, mask):
    """The paper's formula with an explicit loop over heads, in NumPy."""
    W = {n: to_np(p) for n, p in m.named_parameters()}
    Q = q @ W["w_q.weight"] + W["w_q.bias"]
    K = k @ W["w_k.weight"] + W["w_k.bias"]
    Vv = v @ W["w_v.weight"] + W["w_v.bias"]
    heads = []
    for i in range(m.h):
        sl = slice(i * m.d_k, (i + 1) * m.d_k)
        s = Q[..., sl] @ np.swapaxes(K[..., sl], -1, -2) / np.sqrt(m.d_k)  # (B, T, S)
        s = np.where(mask[:, 0], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        heads.append((p / p.sum(-1, keepdims=True)) @ Vv[..., sl])
    return np.concatenate(heads, -1) @ W["w_o.weight"] + W["w_o.bias"]


def test_forward_matches_per_head_reference(device, make, rng):
    m = mha(device)
    x = make(rng.standard_normal((2, 4, 8)), requires_grad=False)
    mem = make(rng.standard_normal((2, 5, 8)), requires_grad=False)
    ids = mt.backend.asarray(np.array([[3, 3, 3, 3, 0], [3, 3, 0, 0, 0]]), device=device)
    mask = padding_mask(ids, 0)
    out = m(x, mem, mem, mask)
    ref = reference(m, to_np(x), to_np(mem), to_np(mem), np.broadcast_to(to_np(mask), (2, 1, 4, 5)))
    np.testing.assert_allclose(to_np(out), ref, rtol=1e-10, atol=1e-12)
    assert out.shape == (2, 4, 8) and out.device == device


@pytest.mark.parametrize("kind", ["padding", "causal"])
def test_gradcheck_with_masks(device, make, rng, kind):
    m = mha(device)
    x = make(rng.standard_normal((2, 3, 8)))
    if kind == "padding":
        ids = mt.backend.asarray(np.array([[4, 4, 0], [4, 0, 0]]), device=device)
        mask = padding_mask(ids, 0)
    else:
        mask = causal_mask(3, device)
    assert mt.gradcheck(lambda x, *ps: m(x, x, x, mask), x, *m.parameters())


def test_weights_are_stored_only_when_asked(device, make, rng):
    m = mha(device)
    x = make(rng.standard_normal((2, 3, 8)), requires_grad=False)
    m(x, x, x)
    assert m.last_weights is None  # off by default: no cost in training
    m.store_weights = True
    m(x, x, x, causal_mask(3, device))
    w = to_np(m.last_weights)
    assert w.shape == (2, 2, 3, 3)
    np.testing.assert_allclose(w.sum(-1), 1.0)
    assert np.all(np.triu(w[0, 0], 1) == 0)  # nothing flows from the future


def test_self_attention_cache_equals_full_causal_attention(device, make, rng):
    m = mha(device)
    x = make(rng.standard_normal((2, 4, 8)), requires_grad=False)
    full = to_np(m(x, x, x, causal_mask(4, device)))
    cache = KVCache()
    with mt.no_grad():
        steps = [
            to_np(m(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], None, cache))
            for t in range(4)
        ]
    assert cache.k.shape == (2, 2, 4, 4)
    np.testing.assert_allclose(np.concatenate(steps, 1), full, rtol=1e-12, atol=1e-13)


def test_static_cache_projects_memory_once(device, make, rng):
    m = mha(device)
    mem = make(rng.standard_normal((2, 5, 8)), requires_grad=False)
    cache = KVCache(static=True)
    q = make(rng.standard_normal((2, 1, 8)), requires_grad=False)
    first = to_np(m(q, mem, mem, None, cache))
    k = cache.k
    again = to_np(m(q, mem * 0.0, mem * 0.0, None, cache))  # key/value ignored now
    assert cache.k is k
    np.testing.assert_array_equal(first, again)


def test_shape_errors(make):
    with pytest.raises(ShapeError, match=r"d_model \(10\) must be divisible by h \(4\)"):
        MultiHeadAttention(10, 4)
    m = MultiHeadAttention(8, 2)
    x = mt.tensor(np.ones((1, 2, 6)), dtype="float32")
    with pytest.raises(ShapeError, match="query has width 6, expected d_model = 8"):
        m(x, x, x)


def test_one_attention_call_checks_its_inputs_once(monkeypatch, rng):
    """MultiHeadAttention checks query, key, value and the mask where they enter; the ops
    it runs (head split, attention, head merge) do not check them a second time."""
    import minitransformer.functional as F
    from minitransformer.nn import attention as nn_attention
    from minitransformer.ops import attention as ops_attention

    calls = []

    def count(name, fn):
        def wrapped(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)

        return wrapped

    for name in ("split_heads", "merge_heads", "scaled_dot_product_attention"):
        monkeypatch.setattr(F, name, count(name, getattr(F, name)))
    monkeypatch.setattr(ops_attention, "check_qkv", count("check_qkv", ops_attention.check_qkv))
    monkeypatch.setattr(nn_attention, "check_mask", count("check_mask", nn_attention.check_mask))
    m = mha("cpu")
    x = mt.tensor(rng.standard_normal((2, 3, 8)))
    m(x, x, x, causal_mask(3, "cpu"))
    assert calls == ["check_mask"]


def test_bad_masks_are_refused_where_they_enter(rng):
    from minitransformer.errors import DTypeError

    m = mha("cpu")
    x = mt.tensor(rng.standard_normal((2, 3, 8)))
    with pytest.raises(ShapeError, match=r"mask of shape \(2, 1, 3, 4\) .* \(2, 2, 3, 3\)"):
        m(x, x, x, np.ones((2, 1, 3, 4), bool))
    with pytest.raises(DTypeError, match="mask has dtype float64, need bool"):
        m(x, x, x, np.ones((2, 1, 1, 3)))
    out = m(x, x, x, [[[[True, True, False]]], [[[True, False, False]]]])  # a list of bools
    assert out.shape == (2, 3, 8)
