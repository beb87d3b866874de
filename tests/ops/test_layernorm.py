"""layer_norm: forward vs NumPy, gradcheck, PyTorch oracle, stability, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import DTypeError, ShapeError
from minitransformer.ops.layernorm import layer_norm


def reference(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_forward_matches_numpy(make, rng, shape):
    x, g, b = (
        rng.standard_normal(shape),
        rng.standard_normal(shape[-1]),
        rng.standard_normal(shape[-1]),
    )
    y = layer_norm(make(x), make(g), make(b))
    assert y.shape == shape
    np.testing.assert_allclose(y.numpy(), reference(x, g, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 2, 3)])
def test_gradcheck(make, rng, shape):
    x = make(rng.standard_normal(shape) * 3 + 1)
    g, b = make(rng.standard_normal(shape[-1])), make(rng.standard_normal(shape[-1]))
    assert mt.gradcheck(layer_norm, x, g, b)


def test_gradcheck_only_some_inputs(make, rng):
    x = make(rng.standard_normal((3, 4)))
    g = make(rng.standard_normal(4), requires_grad=False)
    b = make(rng.standard_normal(4), requires_grad=False)
    assert mt.gradcheck(layer_norm, x, g, b)
    x2 = make(rng.standard_normal((3, 4)), requires_grad=False)
    assert mt.gradcheck(layer_norm, x2, make(rng.standard_normal(4)), b)


def test_torch_oracle(make, rng):
    torch = pytest.importorskip("torch")
    x, g, b = rng.standard_normal((2, 3, 6)), rng.standard_normal(6), rng.standard_normal(6)
    u = rng.standard_normal((2, 3, 6))
    X, G, B = make(x), make(g), make(b)
    layer_norm(X, G, B).backward(make(u, requires_grad=False))
    tx, tg, tb = (torch.tensor(a, requires_grad=True) for a in (x, g, b))
    ty = torch.nn.functional.layer_norm(tx, (6,), tg, tb, eps=1e-5)
    ty.backward(torch.tensor(u))
    np.testing.assert_allclose(layer_norm(X, G, B).numpy(), ty.detach().numpy(), atol=1e-10)
    for ours, theirs in ((X, tx), (G, tg), (B, tb)):
        np.testing.assert_allclose(mt.backend.to_numpy(ours.grad), theirs.grad.numpy(), atol=1e-10)


def test_stability_and_dtype(make, rng):
    x = rng.standard_normal((4, 16)) * 1e3 + 1e4  # large offset and scale
    g, b = np.ones(16), np.zeros(16)
    y64 = layer_norm(make(x), make(g), make(b))
    y32 = layer_norm(make(x, "float32"), make(g, "float32"), make(b, "float32"))
    assert mt.backend.dtype_name(y32.dtype) == "float32"
    assert mt.backend.dtype_name(y64.dtype) == "float64"
    assert y32.device == y64.device == make(g).device
    np.testing.assert_allclose(y32.numpy(), y64.numpy(), atol=2e-3)
    y32.backward(make(rng.standard_normal((4, 16)), "float32", requires_grad=False))
    constant = layer_norm(make(np.full((2, 8), 5.0)), make(np.ones(8)), make(np.zeros(8)))
    assert np.all(np.isfinite(constant.numpy())) and np.all(constant.numpy() == 0)


def test_bad_input(make):
    x = make(np.zeros((2, 4)))
    with pytest.raises(ShapeError, match=r"layer_norm: gamma has shape \(3,\).*\(2, 4\).*\(4,\)"):
        layer_norm(x, make(np.ones(3)), make(np.zeros(4)))
    with pytest.raises(ShapeError, match=r"beta has shape \(4, 1\)"):
        layer_norm(x, make(np.ones(4)), make(np.zeros((4, 1))))
    with pytest.raises(DTypeError, match="gamma is float32 but x is float64"):
        layer_norm(x, make(np.ones(4), "float32"), make(np.zeros(4)))
