"""Elementwise ops: forward against NumPy, backward against finite differences, on every backend."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import ArgumentError
from minitransformer.ops import elementwise as E

SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), ())]


@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
@pytest.mark.parametrize(
    "name, ref",
    [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide)],
)
def test_binary_ops_forward_and_gradcheck(make, rng, shapes, name, ref):
    a_np = rng.standard_normal(shapes[0])
    b_np = rng.uniform(0.5, 2.0, shapes[1])  # away from 0 for div
    a, b = make(a_np), make(b_np)
    fn = getattr(E, name)
    np.testing.assert_allclose(fn(a, b).numpy(), ref(a_np, b_np), rtol=1e-12)
    assert mt.gradcheck(fn, a, b)


@pytest.mark.parametrize(
    "name, ref, low, high",
    [
        ("neg", np.negative, -2, 2),
        ("exp", np.exp, -2, 2),
        ("log", np.log, 0.2, 3),
        ("sqrt", np.sqrt, 0.2, 3),
        ("relu", lambda x: np.maximum(x, 0), -2, 2),
    ],
)
def test_unary_ops_forward_and_gradcheck(make, rng, name, ref, low, high):
    x_np = rng.uniform(low, high, (3, 5))
    if name == "relu":  # keep clear of the kink at 0 where the derivative jumps
        x_np[np.abs(x_np) < 0.05] = 0.5
    x = make(x_np)
    fn = getattr(E, name)
    np.testing.assert_allclose(fn(x).numpy(), ref(x_np), rtol=1e-12)
    assert mt.gradcheck(fn, x)


@pytest.mark.parametrize("p", [2, 3.0, 0.5, -1.5])
def test_pow(make, rng, p):
    x_np = rng.uniform(0.5, 2.0, (4, 3))
    x = make(x_np)
    np.testing.assert_allclose((x**p).numpy(), x_np**p, rtol=1e-12)
    assert mt.gradcheck(lambda t: t**p, x)


def test_operators_with_python_scalars(make, rng):
    x_np = rng.uniform(0.5, 2.0, (2, 3))
    x = make(x_np)
    y = 2.0 * x + 1.0 - x / 4.0 + 3.0 / x - (1.0 - x)
    np.testing.assert_allclose(
        y.numpy(), 2 * x_np + 1 - x_np / 4 + 3 / x_np - (1 - x_np), rtol=1e-12
    )
    assert mt.gradcheck(lambda t: 2.0 * t + 1.0 - t / 4.0 + 3.0 / t - (1.0 - t), x)


def test_float32_stays_float32(make, rng):
    x = make(rng.standard_normal((3, 3)), dtype="float32")
    y = (x * 2.0 + 1.0).exp().relu()
    assert mt.backend.dtype_name(y.dtype) == "float32"
    y.sum().backward()
    assert mt.backend.dtype_name(x.grad.dtype) == "float32"


def test_pow_rejects_tensor_exponent(make):
    x = make(np.ones(3))
    with pytest.raises(ArgumentError, match="exponent must be a real number"):
        E.pow(x, x)
