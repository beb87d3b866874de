"""tanh and sigmoid: forward against NumPy, backward against finite differences, stability
at extreme inputs, dtype preservation, on every backend."""

import warnings

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@pytest.mark.parametrize("name, ref", [("tanh", np.tanh), ("sigmoid", np_sigmoid)])
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4), ()])
def test_forward_and_gradcheck(make, rng, name, ref, shape):
    x_np = rng.uniform(-3, 3, shape)
    x = make(x_np)
    fn = getattr(F, name)
    np.testing.assert_allclose(fn(x).numpy(), ref(x_np), rtol=1e-12, atol=1e-15)
    assert mt.gradcheck(fn, x)  # with a random upstream gradient (see gradcheck.py)


@pytest.mark.parametrize("name, lo, hi", [("tanh", -1.0, 1.0), ("sigmoid", 0.0, 1.0)])
def test_saturation_is_finite(make, name, lo, hi):
    x = make(np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow in exp would warn
        y = getattr(F, name)(x)
        y.sum().backward()
    y_np, g_np = y.numpy(), mt.backend.to_numpy(x.grad)
    assert np.all(np.isfinite(y_np)) and np.all(np.isfinite(g_np))
    assert y_np[0] == lo and y_np[-1] == hi
    assert g_np[0] == 0.0 and g_np[-1] == 0.0  # saturated: the gradient vanishes
    assert g_np[2] == (1.0 if name == "tanh" else 0.25)  # the largest slope, at x = 0


def test_derivative_bounds(rng):
    x = mt.tensor(rng.uniform(-6, 6, 200), dtype="float64", requires_grad=True)
    F.tanh(x).sum().backward()
    assert np.all(x.grad <= 1.0) and np.all(x.grad > 0)
    x.grad = None
    F.sigmoid(x).sum().backward()
    assert np.all(x.grad <= 0.25) and np.all(x.grad > 0)


def test_float32_stays_float32_and_tensor_methods(make, rng):
    x = make(rng.standard_normal((3, 3)), dtype="float32")
    y = x.tanh() * x.sigmoid()
    assert mt.backend.dtype_name(y.dtype) == "float32"
    y.sum().backward()
    assert mt.backend.dtype_name(x.grad.dtype) == "float32"
    x_np = rng.standard_normal(4)
    np.testing.assert_allclose(mt.tensor(x_np).tanh().numpy(), np.tanh(x_np), rtol=1e-6)
    np.testing.assert_allclose(mt.tensor(x_np).sigmoid().numpy(), np_sigmoid(x_np), rtol=1e-6)


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_matches_torch(rng, name):
    torch = pytest.importorskip("torch")
    x_np = rng.standard_normal((5, 4))
    g_np = rng.standard_normal((5, 4))
    x = mt.tensor(x_np, dtype="float64", requires_grad=True)
    (getattr(F, name)(x) * g_np).sum().backward()
    xt = torch.tensor(x_np, requires_grad=True)
    (getattr(torch, name)(xt) * torch.tensor(g_np)).sum().backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-15)
