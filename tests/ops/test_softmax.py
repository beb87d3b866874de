"""Softmax and log-softmax: forward vs NumPy, gradcheck, stability, dtypes, PyTorch oracle."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import DTypeError, ShapeError
from minitransformer.ops.softmax import log_softmax, softmax

FNS = {"softmax": softmax, "log_softmax": log_softmax}


def ref_log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def ref(name: str, x: np.ndarray, axis: int = -1) -> np.ndarray:
    o = ref_log_softmax(x, axis)
    return np.exp(o) if name == "softmax" else o


def grad_of(t: mt.Tensor) -> np.ndarray:
    return mt.backend.to_numpy(t.grad)


def dtype_of(a) -> str:
    return mt.backend.dtype_name(a.dtype)


@pytest.mark.parametrize("name", FNS)
@pytest.mark.parametrize(
    ("shape", "axis"), [((7,), -1), ((4, 6), -1), ((2, 3, 5), -1), ((2, 3, 5), 1), ((3, 4), 0)]
)
def test_forward_matches_numpy(device, make, rng, name, shape, axis):
    x = rng.standard_normal(shape) * 3
    y = FNS[name](make(x), axis=axis)
    assert y.shape == shape
    np.testing.assert_allclose(y.numpy(), ref(name, x, axis), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", FNS)
@pytest.mark.parametrize(("shape", "axis"), [((3, 4), -1), ((2, 3, 4), -1), ((2, 3, 4), 1)])
def test_gradcheck(device, make, rng, name, shape, axis):
    x = make(rng.standard_normal(shape))
    assert mt.gradcheck(lambda t: FNS[name](t, axis=axis), x)


@pytest.mark.parametrize("name", FNS)
def test_stable_at_huge_logits(device, make, name):
    x = np.array([[1e4, -1e4, 0.0, 1e4 - 1.0], [-1e4, -1e4 + 2.0, -1e4, -1e4]])
    for dtype in ("float32", "float64"):
        t = make(x, dtype=dtype)
        y = FNS[name](t)
        y.backward(mt.tensor(np.ones(x.shape), dtype=dtype, device=device))
        assert np.all(np.isfinite(y.numpy())) and np.all(np.isfinite(grad_of(t)))
        np.testing.assert_allclose(y.numpy(), ref(name, x), rtol=1e-5, atol=1e-6)


def test_masked_entries_softmax(device, make, rng):
    x = rng.standard_normal((3, 5))
    x[0, [1, 3]] = -np.inf
    x[1, :] = -np.inf  # a fully masked row: zeros, never NaN
    t = make(x)
    y = softmax(t)
    g = rng.standard_normal(x.shape)
    y.backward(mt.tensor(g, dtype="float64", device=device))
    yn, dx = y.numpy(), grad_of(t)
    assert np.all(yn[0, [1, 3]] == 0) and np.all(yn[1] == 0)
    np.testing.assert_allclose(yn[[0, 2]], ref("softmax", x[[0, 2]]), atol=1e-12)
    assert np.all(np.isfinite(dx)) and np.all(dx[1] == 0) and np.all(dx[0, [1, 3]] == 0)
    ok = make(x[[0, 2]])  # gradcheck with the -inf entries in place
    assert mt.gradcheck(softmax, ok)


def test_masked_entries_log_softmax(device, make, rng):
    x = rng.standard_normal((3, 5))
    x[0, [1, 3]] = -np.inf
    x[1, :] = -np.inf  # a fully masked row: -inf, and the gradient passes g through
    t = make(x)
    y = log_softmax(t)
    g = rng.standard_normal(x.shape)
    y.backward(mt.tensor(g, dtype="float64", device=device))
    yn, dx = y.numpy(), grad_of(t)
    assert np.all(yn[0, [1, 3]] == -np.inf) and np.all(yn[1] == -np.inf)
    assert not np.any(np.isnan(yn)) and np.all(np.isfinite(dx))
    np.testing.assert_allclose(dx[1], g[1])
    p = np.exp(ref_log_softmax(x[[0, 2]]))
    expect = g[[0, 2]] - p * g[[0, 2]].sum(-1, keepdims=True)
    np.testing.assert_allclose(dx[[0, 2]], expect, atol=1e-12)


@pytest.mark.parametrize("name", FNS)
def test_float32_stays_float32_and_agrees_with_float64(device, make, rng, name):
    x = rng.standard_normal((2, 3, 7)) * 4
    g = rng.standard_normal(x.shape)
    out = {}
    for dtype in ("float32", "float64"):
        t = make(x, dtype=dtype)
        y = FNS[name](t)
        y.backward(mt.tensor(g, dtype=dtype, device=device))
        assert dtype_of(y) == dtype and dtype_of(t.grad) == dtype
        assert y._ctx is None or all(dtype_of(a) == dtype for a in y._ctx.saved)
        out[dtype] = (y.numpy(), grad_of(t))
    np.testing.assert_allclose(out["float32"][0], out["float64"][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["float32"][1], out["float64"][1], rtol=1e-4, atol=1e-5)


def test_tensor_methods_and_no_grad(device, make, rng):
    x = rng.standard_normal((2, 4))
    t = make(x)
    np.testing.assert_allclose(t.softmax().numpy(), ref("softmax", x), atol=1e-12)
    with mt.no_grad():
        y = t.log_softmax(axis=0)
    assert not y.requires_grad
    np.testing.assert_allclose(y.numpy(), ref("log_softmax", x, 0), atol=1e-12)


def test_bad_inputs(device, make):
    with pytest.raises(ShapeError, match=r"softmax: axis 2 is out of range .*\(2, 3\)"):
        softmax(make(np.zeros((2, 3))), axis=2)
    with pytest.raises(DTypeError, match="log_softmax: needs a floating-point tensor, got int64"):
        log_softmax(make(np.zeros((2, 3)), dtype="int64", requires_grad=False))


@pytest.mark.parametrize("name", FNS)
@pytest.mark.parametrize("axis", [-1, 1])
def test_matches_torch(device, make, rng, name, axis):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((2, 3, 5)) * 5
    x[0, 1, 2] = -np.inf
    g = rng.standard_normal(x.shape)
    t = make(x)
    y = FNS[name](t, axis=axis)
    y.backward(mt.tensor(g, dtype="float64", device=device))
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(torch.nn.functional, name)(xt, dim=axis)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(grad_of(t), xt.grad.numpy(), rtol=0, atol=1e-10)
