"""rms_norm: forward vs NumPy, gradcheck of x and gamma, PyTorch's rms_norm and transformers'
LlamaRMSNorm as oracles (values and gradients), the float32 ends, a wrong backward caught,
and every bad argument refused in one line naming it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_local_attention import refused

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import backend
from minitransformer.errors import ArgumentError, DTypeError, ShapeError
from minitransformer.ops.rms_norm import RMSNorm, rms_norm


def reference(x, gamma, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 1, 3, 8)])
@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.5])
def test_forward_matches_numpy(make, rng, shape, eps):
    x, g = rng.standard_normal(shape) * 2, rng.standard_normal(shape[-1])
    y = rms_norm(make(x), make(g), eps=eps)
    assert y.shape == shape
    np.testing.assert_allclose(y.numpy(), reference(x, g, eps), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 2, 3)])
@pytest.mark.parametrize("eps", [1e-5, 0.3])
def test_gradcheck_x_and_gamma(make, rng, shape, eps):
    x = make(rng.standard_normal(shape) * 3 + 1)
    g = make(rng.standard_normal(shape[-1]))
    assert mt.gradcheck(lambda x, g: rms_norm(x, g, eps=eps), x, g)


def test_gradcheck_one_input_at_a_time(make, rng):
    x, g = rng.standard_normal((3, 4)), rng.standard_normal(4)
    assert mt.gradcheck(rms_norm, make(x), make(g, requires_grad=False))
    assert mt.gradcheck(rms_norm, make(x, requires_grad=False), make(g))


def test_the_function_directly(make, rng):
    """The model calls RMSNorm.apply (no checks): the same values and gradients."""
    x, g = make(rng.standard_normal((2, 3, 6))), make(rng.standard_normal(6))
    np.testing.assert_array_equal(
        RMSNorm.apply(x, g, eps=1e-6).numpy(), rms_norm(x, g, 1e-6).numpy()
    )
    assert mt.gradcheck(lambda x, g: RMSNorm.apply(x, g, eps=1e-6), x, g)


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-13), ("float32", 2e-6)])
@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_matches_torch_values_and_gradients(rng, dtype, tol, eps):
    torch = pytest.importorskip("torch")
    x = (rng.standard_normal((2, 5, 16)) * 3).astype(dtype)
    g, u = rng.standard_normal(16).astype(dtype), rng.standard_normal((2, 5, 16)).astype(dtype)
    X, G = mt.tensor(x, requires_grad=True), mt.tensor(g, requires_grad=True)
    y = rms_norm(X, G, eps=eps)
    y.backward(mt.tensor(u))
    tx, tg = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
    ty = torch.nn.functional.rms_norm(tx, (16,), tg, eps=eps)
    ty.backward(torch.tensor(u))
    assert backend.dtype_name(y.dtype) == dtype
    for ours, theirs in ((y.numpy(), ty.detach()), (X.grad, tx.grad), (G.grad, tg.grad)):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=tol, atol=tol)


def test_matches_transformers_llama_rms_norm(rng):
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    x, g = rng.standard_normal((2, 4, 8)).astype(np.float32), rng.standard_normal(8)
    norm = llama.LlamaRMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor(g))
        theirs = norm(torch.tensor(x)).numpy()
    ours = rms_norm(mt.tensor(x), mt.tensor(g.astype(np.float32)), eps=1e-6).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=2e-6)


def test_zero_mean_rows_are_layer_norm_without_beta(make, rng):
    """With the mean taken out first, RMSNorm and LayerNorm agree: LayerNorm = RMSNorm of
    the centred row, plus beta."""
    x = rng.standard_normal((3, 6))
    x -= x.mean(-1, keepdims=True)
    g, zero = rng.standard_normal(6), np.zeros(6)
    ours = rms_norm(make(x), make(g)).numpy()
    np.testing.assert_allclose(ours, F.layer_norm(make(x), make(g), make(zero)).numpy(), atol=1e-14)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_ends_of_the_float_range_stay_finite(make, dtype):
    """Rows of 1e30 (x^2 overflows float32), of 1e-30 and of zeros: finite values and
    gradients, x_hat of the big and tiny rows as in exact arithmetic, zeros map to zeros."""
    base = np.array([1.0, -2.0, 3.0, 0.5])
    x = make(np.stack([base * 1e30, base * 1e-30, np.zeros(4), base]), dtype=dtype)
    gamma = make(np.ones(4), dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or division warning on the way
        y = rms_norm(x, gamma, eps=1e-6)
        y.backward(make(np.ones((4, 4)), dtype=dtype, requires_grad=False))
    y_np = y.numpy()
    exact = base / np.sqrt(np.mean(base**2))
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(y_np[0], exact, rtol=tol)
    np.testing.assert_allclose(y_np[3], reference(base, 1.0, eps=1e-6), rtol=tol)
    np.testing.assert_allclose(y_np[1], base * 1e-30 / np.sqrt(1e-6), rtol=1e-5)  # eps rules
    assert np.all(y_np[2] == 0)
    assert np.all(np.isfinite(backend.to_numpy(x.grad))) and np.all(
        np.isfinite(backend.to_numpy(gamma.grad))
    )


class RMSNormRConstant(RMSNorm):
    """The classic slip: dx = r g_hat, as if r did not depend on x."""

    @staticmethod
    def backward(ctx, grad):
        x_hat, r, gamma = ctx.saved
        return r * grad * gamma, ctx.xp.sum(grad * x_hat, axis=tuple(range(grad.ndim - 1)))


class RMSNormGammaUnscaled(RMSNorm):
    """dgamma summed over rows of g alone (LayerNorm's dbeta, not dgamma)."""

    @staticmethod
    def backward(ctx, grad):
        x_hat, r, gamma = ctx.saved
        dx, _ = RMSNorm.backward(ctx, grad)
        return dx, ctx.xp.sum(grad, axis=tuple(range(grad.ndim - 1)))


@pytest.mark.parametrize("wrong, caught", [(RMSNormRConstant, 0), (RMSNormGammaUnscaled, 1)])
def test_gradcheck_catches_a_wrong_backward(make, rng, wrong, caught):
    x, g = make(rng.standard_normal((3, 4))), make(rng.standard_normal(4))
    with pytest.raises(mt.GradcheckError, match=f"input {caught} at position"):
        mt.gradcheck(lambda x, g: wrong.apply(x, g, eps=1e-5), x, g)


def f32(*shape):
    return mt.tensor(np.ones(shape, dtype=np.float32))


REFUSALS = {
    "x a list": (
        lambda: rms_norm([[1.0, 2.0]], f32(2)),
        ArgumentError,
        r"rms_norm: x must be a Tensor",
    ),
    "gamma None": (
        lambda: rms_norm(f32(2, 3), None),
        ArgumentError,
        r"rms_norm: gamma must be a Tensor",
    ),
    "x int": (
        lambda: rms_norm(f32(2, 3).astype("int64"), f32(3)),
        DTypeError,
        r"rms_norm: x has dtype int64",
    ),
    "gamma int": (
        lambda: rms_norm(f32(2, 3), f32(3).astype("int32")),
        DTypeError,
        r"rms_norm: gamma has dtype",
    ),
    "gamma float64": (
        lambda: rms_norm(f32(2, 3), f32(3).astype("float64")),
        DTypeError,
        r"gamma is float64 but x is float32",
    ),
    "gamma short": (
        lambda: rms_norm(f32(2, 3), f32(2)),
        ShapeError,
        r"gamma has shape \(2,\) .*\(3,\)",
    ),
    "gamma 2-d": (lambda: rms_norm(f32(2, 3), f32(1, 3)), ShapeError, r"gamma has shape \(1, 3\)"),
    "x 0-d": (lambda: rms_norm(mt.tensor(1.0), f32(1)), ShapeError, r"rms_norm: x has shape \(\)"),
    "D = 0": (lambda: rms_norm(f32(2, 0), f32(0)), ShapeError, r"D >= 1"),
    "eps 0": (
        lambda: rms_norm(f32(2, 3), f32(3), eps=0.0),
        ArgumentError,
        r"rms_norm: eps must be .* > 0",
    ),
    "eps negative": (lambda: rms_norm(f32(2, 3), f32(3), eps=-1e-5), ArgumentError, r"eps must"),
    "eps inf": (lambda: rms_norm(f32(2, 3), f32(3), eps=float("inf")), ArgumentError, r"eps must"),
    "eps nan": (lambda: rms_norm(f32(2, 3), f32(3), eps=float("nan")), ArgumentError, r"eps must"),
    "eps str": (lambda: rms_norm(f32(2, 3), f32(3), eps="1e-5"), ArgumentError, r"eps must"),
    "eps bool": (lambda: rms_norm(f32(2, 3), f32(3), eps=True), ArgumentError, r"eps must"),
}


@pytest.mark.parametrize("case", list(REFUSALS.values()), ids=list(REFUSALS))
def test_bad_arguments_are_refused_in_one_line_naming_them(case):
    call, kind, pattern = case
    assert type(refused(kind, pattern, call)) is kind


def test_no_rows_is_an_empty_result():
    y = rms_norm(f32(0, 3), f32(3))
    assert y.shape == (0, 3)
