"""Blocked (memory-efficient) attention: equal to the plain op in float64 to 1e-12 (outputs
and gradients, every mask form, block sizes dividing S or not), gradcheck, float32, bad
block sizes, and a deliberately broken backward that the checks catch."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.errors import ArgumentError, ShapeError
from minitransformer.gradcheck import GradcheckError
from minitransformer.ops import blocked_attention as blocked_module
from minitransformer.ops.blocked_attention import BlockedAttention, blocked_attention


def qkv(rng, B=2, H=2, T=5, S=7, d_k=3, d_v=2):
    return (
        rng.standard_normal((B, H, T, d_k)),
        rng.standard_normal((B, H, S, d_k)),
        rng.standard_normal((B, H, S, d_v)),
    )


def masks(rng, B=2, T=5, S=7):
    pad = np.ones((B, 1, 1, S), bool)
    pad[0, ..., -3:] = False
    causal = np.tril(np.ones((T, S), bool), k=S - T)[None, None]
    combined = pad & causal & (rng.random((B, 1, T, S)) > 0.3)
    rows = np.ones((B, 1, T, 1), bool)  # broadcast over the keys: whole query rows
    rows[1, 0, 2] = False
    empty = np.ones((B, 1, T, S), bool)
    empty[0, 0, 1] = False  # a query that may attend nothing
    empty[1] = False  # a whole sequence that may attend nothing
    return {
        "none": None, "pad": pad, "causal": causal, "combined": combined, "rows": rows,
        "empty": empty,
    }  # fmt: skip


KINDS = ["none", "pad", "causal", "combined", "rows", "empty"]
BLOCKS = [1, 2, 3, 7, 50]  # 1; ragged last block (2, 3 do not divide S = 7); b = S; b > S


def run(make, q, k, v, mask, u, block_size, dtype="float64"):
    """Output and the gradients of q, k, v under upstream gradient u, as host arrays."""
    Q, K, V = make(q, dtype), make(k, dtype), make(v, dtype)
    m = None if mask is None else make(mask, "bool", requires_grad=False)
    out = F.scaled_dot_product_attention(Q, K, V, mask=m, block_size=block_size)
    out.backward(make(u, dtype, requires_grad=False))
    return [out.numpy()] + [mt.backend.to_numpy(t.grad) for t in (Q, K, V)]


@pytest.mark.parametrize("block_size", BLOCKS)
@pytest.mark.parametrize("kind", KINDS)
def test_equals_the_plain_op_in_float64(make, rng, kind, block_size):
    q, k, v = qkv(rng)
    mask = masks(rng)[kind]
    u = rng.standard_normal((2, 2, 5, 2))
    plain = run(make, q, k, v, mask, u, None)
    blocked = run(make, q, k, v, mask, u, block_size)
    for name, a, b in zip(("out", "dq", "dk", "dv"), plain, blocked, strict=True):
        assert a.shape == b.shape and np.all(np.isfinite(b)), name
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12, err_msg=name)
    if kind == "empty":  # fully masked rows: exactly zero, as in the plain op
        assert np.all(blocked[0][0, :, 1] == 0) and np.all(blocked[0][1] == 0)
        assert np.all(blocked[1][1] == 0) and np.all(blocked[3][1] == 0)


@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck(make, rng, kind):
    q, k, v = qkv(rng, T=4, S=5)
    mask = masks(rng, T=4, S=5)[kind]
    m = None if mask is None else make(mask, "bool", requires_grad=False).data
    fn = lambda q, k, v: blocked_attention(q, k, v, mask=m, block_size=2)  # noqa: E731
    assert mt.gradcheck(fn, make(q), make(k), make(v))


def test_large_logits_float32_and_any_leading_axes(make, rng):
    q, k, v = qkv(rng, T=6, S=9, d_k=4)
    q, k = q * 30, k * 30  # logits ~ 1e3: the running max must keep exp() finite
    mask = masks(rng, T=6, S=9)["combined"]
    u = rng.standard_normal((2, 2, 6, 2))
    ref = run(make, q, k, v, mask, u, None)
    got32 = run(make, q, k, v, mask, u, 4, dtype="float32")
    for a, b in zip(ref, got32, strict=True):
        assert b.dtype == np.float32 and np.all(np.isfinite(b))
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(a).max()))
    q3, k3, v3 = q[0], k[0], v[0]  # (H, T, d_k): any leading axes work
    out = blocked_attention(make(q3), make(k3), make(v3), block_size=4)
    np.testing.assert_allclose(out.numpy(), F.scaled_dot_product_attention(
        make(q3), make(k3), make(v3)).numpy(), atol=1e-12)  # fmt: skip


@pytest.mark.parametrize("bad", [0, -1, 2.5, "8", True, np.nan])
def test_bad_block_size_refused(make, rng, bad):
    q, k, v = (make(a) for a in qkv(rng))
    with pytest.raises(ArgumentError, match="block_size must be a positive int"):
        F.scaled_dot_product_attention(q, k, v, block_size=bad)
    with pytest.raises(ArgumentError, match="block_size"):
        blocked_attention(q, k, v, block_size=bad)
    with pytest.raises(ArgumentError, match="block_size"):
        mt.nn.MultiHeadAttention(8, 2, block_size=bad)


def test_bad_inputs_and_weights_refused(make, rng):
    q, k, v = (make(a) for a in qkv(rng))
    with pytest.raises(ArgumentError, match="need_weights.*block_size=None"):
        F.scaled_dot_product_attention(q, k, v, need_weights=True, block_size=4)
    with pytest.raises(ShapeError, match="do not fit"):
        blocked_attention(q, make(np.zeros((2, 2, 7, 4))), v, block_size=4)
    with pytest.raises(ShapeError, match="does not broadcast"):
        blocked_attention(q, k, v, mask=make(np.ones((3, 7), bool), "bool", False))


def test_a_wrong_backward_is_caught(make, rng, monkeypatch):
    """Drop the "- D" term of dS = P (dP - D): gradcheck and the plain op both notice."""
    q, k, v = qkv(rng, T=3, S=4)
    original = BlockedAttention.backward

    def broken(ctx, grad):
        out = ctx.saved[3]
        ctx.saved = (*ctx.saved[:3], out * 0, ctx.saved[4])  # D = rowsum(dO * 0) = 0
        return original(ctx, grad)

    monkeypatch.setattr(BlockedAttention, "backward", staticmethod(broken))
    fn = lambda q, k, v: blocked_attention(q, k, v, block_size=2)  # noqa: E731
    with pytest.raises(GradcheckError):
        mt.gradcheck(fn, make(q), make(k), make(v))


def test_never_forms_the_score_matrix(make, rng, monkeypatch):
    """Every score block the op builds is (..., T, <= block_size), in forward and backward."""
    q, k, v = qkv(rng, T=6, S=20)
    widths = []
    scores = blocked_module._scores

    def spy(xp, qs, k, mask, j0, j1):
        s = scores(xp, qs, k, mask, j0, j1)
        widths.append(s.shape[-1])
        return s

    monkeypatch.setattr(blocked_module, "_scores", spy)
    out = blocked_attention(make(q), make(k), make(v), block_size=8)
    out.sum().backward()
    assert widths == [8, 8, 4] * 2  # forward's 3 blocks, then backward's recomputed 3


def test_multihead_attention_switch(make, rng):
    """nn.MultiHeadAttention(block_size=b): the same output and gradients as the fused op;
    store_weights still returns the weights (it runs the fused op)."""
    x = rng.standard_normal((2, 9, 8))
    layers = [mt.nn.MultiHeadAttention(8, 2, mt.backend.Generator(0, "cpu")) for _ in range(2)]
    layers[1].block_size = 4
    outs, grads = [], []
    for layer in layers:
        layer.to(dtype="float64", device=make(x).device)
        X = make(x)
        out = layer(X, X, X, mask=make(masks(rng, T=9, S=9)["causal"], "bool", False))
        out.sum().backward()
        outs.append(out.numpy())
        grads.append(mt.backend.to_numpy(layer.w_q.weight.grad))
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-12)
    np.testing.assert_allclose(grads[1], grads[0], atol=1e-12)
    assert "block_size=4" in repr(layers[1])
    layers[1].store_weights = True
    layers[1](make(x), make(x), make(x))
    assert tuple(layers[1].last_weights.shape) == (2, 2, 9, 9)
