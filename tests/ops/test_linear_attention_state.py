"""The RNN form of causal linear attention: a sequence fed one position at a time, or in
chunks, gives causal ``linear_attention`` on the whole (1e-12 in float64, with a key padding
mask), the state holds the sums over every position seen, the output has no graph, a
reordered state follows its batch, and bad states and inputs are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import ArgumentError, DTypeError, ShapeError
from minitransformer.ops import linear_attention_sums
from minitransformer.ops.feature_map import elu1
from minitransformer.ops.linear_attention import linear_attention
from minitransformer.ops.linear_attention_state import (
    LinearAttentionState,
    linear_attention_step,
)

B, H, T, D_K, D_V = 3, 2, 9, 4, 5


def sequence(rng):
    """q, k, v (B, H, T, d) and a key padding mask (B, 1, 1, T): sequence 0 starts with two
    pads (its first queries read nothing), sequence 1 has pads inside, sequence 2 none."""
    q, k = rng.standard_normal((2, B, H, T, D_K))
    v = rng.standard_normal((B, H, T, D_V))
    mask = np.ones((B, 1, 1, T), bool)
    mask[0, ..., :2] = False
    mask[1, ..., [3, 4, 7]] = False
    return q, k, v, mask


def feed(make, q, k, v, mask, cuts, dtype="float64"):
    """Run the steps over the chunks [cuts[i], cuts[i + 1]); the outputs joined, and the state."""
    state, outs = LinearAttentionState(), []
    with mt.no_grad():
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            chunk = [make(x[..., a:b, :], dtype) for x in (q, k, v)]
            m = None if mask is None else make(mask[..., a:b], "bool", False)
            out = linear_attention_step(*chunk, state, mask=m)
            assert not out.requires_grad and out.shape == (B, H, b - a, D_V)
            outs.append(out.numpy())
    return np.concatenate(outs, axis=-2), state


CUTS = [list(range(T + 1)), [0, 4, T], [0, 1, T], [0, T], [0, 2, 3, 8, T]]


@pytest.mark.parametrize("chunk", [2, 64])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("cuts", CUTS, ids=["one-at-a-time", "4+5", "1+8", "whole", "ragged"])
def test_steps_equal_causal_linear_attention_on_the_whole(
    make, rng, cuts, with_mask, chunk, monkeypatch
):
    monkeypatch.setattr(linear_attention_sums, "CHUNK", chunk)  # 2: a prompt in several chunks
    q, k, v, mask = sequence(rng)
    mask = mask if with_mask else None
    whole = linear_attention(
        make(q), make(k), make(v), causal=True,
        mask=None if mask is None else make(mask, "bool", False),
    ).numpy()  # fmt: skip
    got, state = feed(make, q, k, v, mask, cuts)
    np.testing.assert_allclose(got, whole, rtol=0, atol=1e-12)
    K = elu1(np, k) * (1.0 if mask is None else mask[:, :, 0, :, None])
    kv, z = mt.backend.to_numpy(state.kv), mt.backend.to_numpy(state.z)
    np.testing.assert_allclose(kv, np.swapaxes(K, -1, -2) @ v, rtol=0, atol=1e-12)
    np.testing.assert_allclose(z, K.sum(axis=-2), rtol=0, atol=1e-12)
    if with_mask:  # sequence 0's first two queries read only pads
        assert np.all(got[0, :, :2] == 0)


def test_float32_and_inputs_without_grad_need_no_no_grad(make, rng):
    q, k, v, mask = sequence(rng)
    ref, _ = feed(make, q, k, v, mask, [0, 5, T])
    state = LinearAttentionState()
    parts = []
    for a, b in ((0, 5), (5, T)):  # grad mode on, but no input requires grad: allowed
        chunk = [make(x[..., a:b, :], "float32", requires_grad=False) for x in (q, k, v)]
        m = make(mask[..., a:b], "bool", False)
        parts.append(linear_attention_step(*chunk, state, mask=m).numpy())
    got = np.concatenate(parts, axis=-2)
    assert got.dtype == np.float32 and mt.backend.dtype_name(state.kv.dtype) == "float32"
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_a_reordered_state_follows_its_batch(make, rng):
    """Beam search reorders kv and z with xp.take along axis 0 (the caller's job)."""
    q, k, v, mask = sequence(rng)
    order = np.array([2, 0, 0])
    _, state = feed(make, q, k, v, None, [0, T - 1])
    xp = mt.backend.namespace(state.kv)
    index = make(order, "int64", False).data
    state.kv, state.z = xp.take(state.kv, index, axis=0), xp.take(state.z, index, axis=0)
    last = [make(x[order][..., T - 1 :, :]) for x in (q, k, v)]
    with mt.no_grad():
        got = linear_attention_step(*last, state).numpy()
    whole = linear_attention(*(make(x[order]) for x in (q, k, v)), causal=True).numpy()
    np.testing.assert_allclose(got, whole[..., T - 1 :, :], rtol=0, atol=1e-12)


def test_bad_states_and_inputs_are_refused(make, rng):
    q, k, v, _ = sequence(rng)
    q1, k1, v1 = (make(x[..., :1, :], requires_grad=False) for x in (q, k, v))
    with pytest.raises(ArgumentError, match="an input requires grad.*run it under mt.no_grad"):
        linear_attention_step(make(q[..., :1, :]), k1, v1, LinearAttentionState())
    with pytest.raises(ArgumentError, match="state must be a LinearAttentionState, got dict"):
        linear_attention_step(q1, k1, v1, {"kv": None, "z": None})
    with pytest.raises(ArgumentError, match="state has kv but not z"):
        linear_attention_step(q1, k1, v1, LinearAttentionState(kv=np.zeros((B, H, D_K, D_V))))
    _, state = feed(make, q, k, v, None, [0, 2])
    xp = mt.backend.namespace(state.kv)
    small = LinearAttentionState(state.kv[:2, ...], state.z[:2, ...])  # a batch of 2, not 3
    with pytest.raises(ShapeError, match=r"state.kv is \(2, 2, 4, 5\), need \(3, 2, 4, 5\)"):
        linear_attention_step(q1, k1, v1, small)
    wide = LinearAttentionState(xp.astype(state.kv, xp.float32), xp.astype(state.z, xp.float32))
    with pytest.raises(DTypeError, match="state.kv is float32 on .*, q float64"):
        linear_attention_step(q1, k1, v1, wide)
    with pytest.raises(ArgumentError, match="feature_map 'relu' is unknown"):
        linear_attention_step(q1, k1, v1, LinearAttentionState(), feature_map="relu")
    q2, k2, v2 = (make(x[..., :2, :], requires_grad=False) for x in (q, k, v))
    with pytest.raises(ShapeError, match="q has 1 new positions but k and v have 2"):
        linear_attention_step(q1, k2, v2, LinearAttentionState())
    square = make(np.ones((2, 2), bool), "bool", False)  # a (T, S) mask: the op's own pattern
    with pytest.raises(ShapeError, match="has a query axis of 2"):
        linear_attention_step(q2, k2, v2, LinearAttentionState(), mask=square)
