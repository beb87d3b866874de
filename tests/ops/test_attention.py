"""scaled_dot_product_attention: masks, gradcheck, PyTorch oracle, stability, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import DTypeError, ShapeError
from minitransformer.ops.attention import scaled_dot_product_attention as sdpa


def reference(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = np.max(s, -1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    d = e.sum(-1, keepdims=True)
    p = e / np.where(d == 0, 1, d)
    return p @ v, p


def qkv(rng, B=2, H=2, T=3, S=4, d_k=3, d_v=2):
    return (
        rng.standard_normal((B, H, T, d_k)),
        rng.standard_normal((B, H, S, d_k)),
        rng.standard_normal((B, H, S, d_v)),
    )


def masks(rng, B=2, T=3, S=4):
    pad = np.ones((B, 1, 1, S), bool)
    pad[0, ..., -2:] = False
    causal = np.tril(np.ones((T, S), bool), k=S - T)[None, None]
    combined = pad & causal & (rng.random((B, 1, T, S)) > 0.2)
    return {"none": None, "pad": pad, "causal": causal, "combined": combined}


@pytest.mark.parametrize("kind", ["none", "pad", "causal", "combined"])
def test_forward_and_weights_match_numpy(make, rng, kind):
    q, k, v = qkv(rng)
    mask = masks(rng)[kind]
    m = None if mask is None else make(mask, "bool", requires_grad=False)
    out, p = sdpa(make(q), make(k), make(v), mask=m, need_weights=True)
    ref_out, ref_p = reference(q, k, v, mask)
    assert out.shape == (2, 2, 3, 2) and tuple(p.shape) == (2, 2, 3, 4)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mt.backend.to_numpy(p), ref_p, rtol=1e-12, atol=1e-12)
    if mask is not None:
        assert np.all(mt.backend.to_numpy(p)[~np.broadcast_to(mask, ref_p.shape)] == 0)


@pytest.mark.parametrize("kind", ["none", "pad", "causal", "combined"])
def test_gradcheck(make, rng, kind):
    q, k, v = qkv(rng)
    mask = masks(rng)[kind]
    m = None if mask is None else make(mask, "bool", requires_grad=False).data  # raw array
    assert mt.gradcheck(lambda q, k, v: sdpa(q, k, v, mask=m), make(q), make(k), make(v))


def test_cross_attention_shapes_and_3d_inputs(make, rng):
    q, k, v = qkv(rng, B=1, H=1, T=2, S=5, d_k=4, d_v=3)
    q, k, v = q[0], k[0], v[0]  # (H, T, d_k): any leading axes work
    mask = np.array([[[True, True, True, False, False]]])  # (1, 1, S)
    out = sdpa(make(q), make(k), make(v), mask=make(mask, "bool", requires_grad=False))
    assert out.shape == (1, 2, 3)
    np.testing.assert_allclose(out.numpy(), reference(q, k, v, mask)[0], atol=1e-12)
    assert mt.gradcheck(lambda q, k, v: sdpa(q, k, v, mask=None), make(q), make(k), make(v))


def test_fully_masked_rows_give_zeros_not_nan(make, rng):
    q, k, v = qkv(rng)
    mask = np.ones((2, 1, 3, 4), bool)
    mask[0, 0, 1] = False  # query 1 of batch 0 may attend nothing
    mask[1] = False  # batch 1 entirely masked
    m = make(mask, "bool", requires_grad=False)
    Q, K, V = make(q), make(k), make(v)
    out, p = sdpa(Q, K, V, mask=m, need_weights=True)
    o = out.numpy()
    assert np.all(np.isfinite(o)) and np.all(o[0, :, 1] == 0) and np.all(o[1] == 0)
    assert np.all(mt.backend.to_numpy(p)[1] == 0)
    out.backward(make(rng.standard_normal(out.shape), requires_grad=False))
    grads = [mt.backend.to_numpy(t.grad) for t in (Q, K, V)]
    assert all(np.all(np.isfinite(g)) for g in grads)
    assert np.all(grads[0][0, :, 1] == 0) and np.all(grads[0][1] == 0)
    assert np.all(grads[1][1] == 0) and np.all(grads[2][1] == 0)
    assert mt.gradcheck(lambda q, k, v: sdpa(q, k, v, mask=m), make(q), make(k), make(v))


@pytest.mark.parametrize("kind", ["none", "pad", "causal", "combined"])
def test_torch_oracle(make, rng, kind):
    torch = pytest.importorskip("torch")
    q, k, v = qkv(rng, B=2, H=2, T=3, S=4, d_k=5, d_v=3)
    mask = masks(rng)[kind]
    u = rng.standard_normal((2, 2, 3, 3))
    Q, K, V = make(q), make(k), make(v)
    m = None if mask is None else make(mask, "bool", requires_grad=False)
    out = sdpa(Q, K, V, mask=m)
    out.backward(make(u, requires_grad=False))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tm = None if mask is None else torch.tensor(mask)
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
    ty.backward(torch.tensor(u))
    np.testing.assert_allclose(out.numpy(), ty.detach().numpy(), atol=1e-10)
    for ours, theirs in ((Q, tq), (K, tk), (V, tv)):
        np.testing.assert_allclose(mt.backend.to_numpy(ours.grad), theirs.grad.numpy(), atol=1e-10)


def test_large_logits_stable_and_float32_agrees(make, rng):
    q, k, v = qkv(rng, d_k=4)
    q, k = q * 100, k * 100  # q . k ~ 1e4
    mask = masks(rng)["combined"]
    m = make(mask, "bool", requires_grad=False)
    o64 = sdpa(make(q), make(k), make(v), mask=m)
    Q32, K32, V32 = make(q, "float32"), make(k, "float32"), make(v, "float32")
    o32 = sdpa(Q32, K32, V32, mask=m)
    assert mt.backend.dtype_name(o32.dtype) == "float32" and o32.device == make(q).device
    np.testing.assert_allclose(o64.numpy(), reference(q, k, v, mask)[0], atol=1e-9)
    np.testing.assert_allclose(o32.numpy(), o64.numpy(), atol=1e-2)
    o32.backward(make(np.ones(o32.shape), "float32", requires_grad=False))
    for t in (Q32, K32, V32):
        assert mt.backend.dtype_name(t.grad.dtype) == "float32"
        assert np.all(np.isfinite(mt.backend.to_numpy(t.grad)))
    q2, k2, v2 = qkv(rng)
    o32b = sdpa(make(q2, "float32"), make(k2, "float32"), make(v2, "float32"), mask=m)
    np.testing.assert_allclose(o32b.numpy(), reference(q2, k2, v2, mask)[0], atol=1e-5)


def test_bad_input(make, rng):
    q, k, v = (make(a) for a in qkv(rng))  # q (2,2,3,3) k (2,2,4,3) v (2,2,4,2)
    with pytest.raises(ShapeError, match=r"q \(2, 2, 3, 3\), k \(2, 2, 4, 5\)"):
        sdpa(q, make(np.zeros((2, 2, 4, 5))), v)
    with pytest.raises(ShapeError, match=r"v \(2, 2, 3, 2\).*same S for k and v"):
        sdpa(q, k, make(np.zeros((2, 2, 3, 2))))
    with pytest.raises(ShapeError, match=r"leading .* k \(1, 2, 4, 3\)"):
        sdpa(q, make(np.zeros((1, 2, 4, 3))), v)
    with pytest.raises(ShapeError, match="same rank"):
        sdpa(q, make(np.zeros((4, 3))), v)
    bad = make(np.ones((2, 1, 3, 3), bool), "bool", requires_grad=False)
    with pytest.raises(ShapeError, match=r"mask of shape \(2, 1, 3, 3\).*\(2, 2, 3, 4\)"):
        sdpa(q, k, v, mask=bad)
    with pytest.raises(ShapeError, match=r"mask of shape \(1, 2, 1, 3, 4\)"):
        sdpa(q, k, v, mask=make(np.ones((1, 2, 1, 3, 4), bool), "bool", requires_grad=False))
    with pytest.raises(DTypeError, match="mask has dtype float64, need bool"):
        sdpa(q, k, v, mask=make(np.ones((2, 1, 1, 4)), requires_grad=False))


def test_mask_on_another_device_is_refused(rng):
    pytest.importorskip("array_api_strict")
    q, k, v = (mt.tensor(a, device="strict:device1") for a in qkv(rng))
    with pytest.raises(mt.errors.DeviceError, match="different devices"):
        sdpa(q, k, v, mask=np.ones((2, 1, 1, 4), bool))
