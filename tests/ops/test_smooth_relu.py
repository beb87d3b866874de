"""GELU (exact and tanh), SiLU (swish), and the erf under GELU: forward against NumPy formulas
and PyTorch, backward against finite differences on every backend, finite limits at extreme inputs,
dtype preservation, and a wrong backward that the gradient check must catch."""

import math
import warnings

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import backend
from minitransformer.errors import ArgumentError, DTypeError
from minitransformer.ops.smooth_relu import GELU, GELUTanh, SiLU

np_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_gelu(x):
    return x * 0.5 * (1.0 + np_erf(x / math.sqrt(2.0)))


def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def np_silu(x):
    return x / (1.0 + np.exp(-x))


# ----------------------------------------------------------------------------- erf


def erf_grid():
    """Dense over [-7, 7], every branch boundary of FDLIBM's erf on both sides, tiny and
    subnormal inputs, and far tails."""
    edges = [0.84375, 1.25, 1 / 0.35, 6.0]
    near = [np.nextafter(e, d) for e in edges for d in (0.0, 10.0)] + edges
    special = [0.0, 1e-300, 5e-324, 2.0**-28, 1e-20, 1e-8, 0.5, 1.0, 2.0, 3.0, 5.9, 30.0, 1e300]
    pos = np.array(near + special)
    return np.concatenate([np.linspace(-7.0, 7.0, 40_001), pos, -pos])


def test_erf_matches_math_erf_to_the_last_bit(device):
    x = erf_grid()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no branch may overflow or divide by zero
        y = backend.to_numpy(backend.erf(backend.asarray(x, device=device)))
    ref = np_erf(x)
    ulps = np.abs(y - ref) / np.spacing(np.abs(ref))
    assert ulps.max() <= (2 if device.startswith("cuda") else 1)  # CUDA's erf: 2 ulp
    assert np.all(np.abs(y) <= 1.0)
    assert y[x == 6.0][0] == 1.0 and y[x == 30.0][0] == 1.0 and y[x == -30.0][0] == -1.0


def test_erf_special_values(device):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324])
    y = backend.to_numpy(backend.erf(backend.asarray(x, device=device)))
    assert y[0] == 0.0 and not np.signbit(y[0])
    assert y[1] == 0.0 and np.signbit(y[1])  # odd: erf(-0) = -0
    assert y[2] == 1.0 and y[3] == -1.0
    assert np.isnan(y[4])
    assert y[5] > 0 and y[6] < 0  # the smallest subnormal: positive, 2/√π times it


@pytest.mark.parametrize("dtype, ulps", [("float32", 1), ("float16", 1)])
def test_erf_keeps_a_lower_precision_dtype(device, dtype, ulps):
    if dtype == "float16" and device.startswith("strict"):
        pytest.skip("the array API standard has no float16")
    x = np.linspace(-7.0, 7.0, 20_001).astype(dtype)
    y = backend.erf(backend.asarray(x, device=device))
    assert backend.dtype_name(y.dtype) == dtype
    ref = np_erf(x.astype(np.float64))
    y_np = backend.to_numpy(y).astype(np.float64)
    assert np.max(np.abs(y_np - ref) / np.spacing(np.abs(ref).astype(dtype))) <= ulps


def test_erf_refuses_what_it_cannot_take():
    with pytest.raises(ArgumentError, match="erf: x must be an array"):
        backend.erf([0.5, 1.0])
    with pytest.raises(DTypeError, match="erf: x has dtype int64"):
        backend.erf(np.arange(3))
    assert backend.erf(np.float64(0.5)) == math.erf(0.5)  # a NumPy scalar is a 0-d array


# ----------------------------------------------------------------------------- GELU and SiLU


@pytest.mark.parametrize(
    "name, ref", [("gelu", np_gelu), ("gelu_tanh", np_gelu_tanh), ("silu", np_silu)]
)
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4), ()])
def test_forward_and_gradcheck(make, rng, name, ref, shape):
    x_np = rng.uniform(-4, 4, shape)
    x = make(x_np)
    fn = getattr(F, name)
    np.testing.assert_allclose(fn(x).numpy(), ref(x_np), rtol=1e-13, atol=1e-15)
    assert mt.gradcheck(fn, x)  # with a random upstream gradient (see gradcheck.py)


TORCH = {"gelu": {}, "gelu_tanh": {"approximate": "tanh"}, "silu": {}}


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu"])
def test_matches_torch(rng, name):
    torch = pytest.importorskip("torch")
    x_np = np.concatenate([rng.standard_normal(200) * 3, [-40.0, -8.0, -0.0, 0.0, 8.0, 40.0]])
    g_np = rng.standard_normal(x_np.shape)
    x = mt.tensor(x_np, dtype="float64", requires_grad=True)
    y = getattr(F, name)(x)
    (y * g_np).sum().backward()
    xt = torch.tensor(x_np, requires_grad=True)
    torch_name = name.removesuffix("_tanh")  # gelu: approximate="none", the exact one
    yt = getattr(torch.nn.functional, torch_name)(xt, **TORCH[name])
    (yt * torch.tensor(g_np)).sum().backward()
    rtol = 1e-11 if name == "gelu_tanh" else 1e-14  # 1 + tanh cancels for x < 0: a few ulp
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=rtol, atol=1e-15)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=10 * rtol, atol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_tanh_matches_torch_in_float32_and_past_torchs_overflow(rng, dtype):
    """float32 values and gradients agree; at |x| = 1e30 torch's x³ overflows (NaN gradient
    in float32), ours clips inside the cubic and gives y = x or 0, dy/dx = 1 or 0."""
    torch = pytest.importorskip("torch")
    x_np = (rng.standard_normal(300) * 4).astype(dtype)
    x = mt.tensor(x_np, requires_grad=True)
    F.gelu_tanh(x).sum().backward()
    xt = torch.tensor(x_np, requires_grad=True)
    yt = torch.nn.functional.gelu(xt, approximate="tanh")
    yt.sum().backward()
    tol = 2e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(F.gelu_tanh(x).numpy(), yt.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=tol, atol=tol)
    far = mt.tensor(np.array([-1e30, 1e30], dtype=dtype), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = F.gelu_tanh(far)
        y.sum().backward()
    np.testing.assert_array_equal(
        y.numpy(), [0.0, 1e30 if dtype == "float64" else np.float32(1e30)]
    )
    np.testing.assert_array_equal(far.grad, [0.0, 1.0])


def test_gelu_tanh_is_within_5e_4_of_the_exact_gelu():
    x = mt.tensor(np.linspace(-8.0, 8.0, 32_001))
    gap = np.abs(F.gelu_tanh(x).numpy() - F.gelu(x).numpy())
    assert 1e-4 < gap.max() < 5e-4


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_extreme_inputs_are_finite_with_the_right_limits(make, name, dtype):
    x = make(np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0]), dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow in exp would warn
        y = getattr(F, name)(x)
        y.sum().backward()
    y_np, g_np = y.numpy(), backend.to_numpy(x.grad)
    assert np.all(np.isfinite(y_np)) and np.all(np.isfinite(g_np))
    assert y_np[-1] == 1000.0 and y_np[-2] == 50.0  # like relu: y -> x
    assert g_np[-1] == 1.0 and g_np[-2] == 1.0  # and dy/dx -> 1
    assert y_np[0] == 0.0 and g_np[0] == 0.0  # the gate closed: y -> 0, dy/dx -> 0
    assert -1e-18 < y_np[1] <= 0.0 and -1e-18 < g_np[1] <= 0.0  # from below, tiny
    assert y_np[2] == 0.0 and g_np[2] == 0.5  # Φ(0) = σ(0) = 1/2


@pytest.mark.parametrize("fn, at, low", [(F.gelu, -0.7518, -0.16997), (F.silu, -1.2785, -0.27846)])
def test_negative_dip(fn, at, low):
    """Both dip below zero for negative x: gelu's minimum is about -0.170 near x = -0.752,
    silu's about -0.278 near x = -1.278, where the derivative changes sign."""
    np.testing.assert_allclose(fn(mt.tensor(at, dtype="float64")).numpy(), low, atol=1e-5)
    left = mt.tensor(np.array([at - 0.01]), requires_grad=True)
    right = mt.tensor(np.array([at + 0.01]), requires_grad=True)
    fn(left).sum().backward()
    fn(right).sum().backward()
    assert left.grad[0] < 0 < right.grad[0]


def test_float32_stays_float32_and_tensor_methods(make, rng):
    x = make(rng.standard_normal((3, 3)), dtype="float32")
    y = x.gelu() * x.silu()
    assert backend.dtype_name(y.dtype) == "float32"
    y.sum().backward()
    assert backend.dtype_name(x.grad.dtype) == "float32"
    x_np = rng.standard_normal(4)
    np.testing.assert_allclose(mt.tensor(x_np).gelu().numpy(), np_gelu(x_np), rtol=1e-6)
    np.testing.assert_allclose(mt.tensor(x_np).silu().numpy(), np_silu(x_np), rtol=1e-6)
    np.testing.assert_array_equal(F.swish(x).numpy(), F.silu(x).numpy())


class GELUWithoutDensity(GELU):
    """The classic slip: dy/dx = Φ(x), forgetting the product rule's x φ(x)."""

    @staticmethod
    def backward(ctx, grad):
        _, cdf = ctx.saved
        return grad * cdf


class GELUTanhWithoutCubicTerm(GELUTanh):
    """du/dx taken as c, forgetting the cubic's 3k x²."""

    @staticmethod
    def backward(ctx, grad):
        x, _, t = ctx.saved
        return grad * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * math.sqrt(2.0 / math.pi))


class SiLUWithoutProductRule(SiLU):
    """dy/dx = σ(x), as if the gate were a constant."""

    @staticmethod
    def backward(ctx, grad):
        _, sig = ctx.saved
        return grad * sig


@pytest.mark.parametrize(
    "wrong", [GELUWithoutDensity, GELUTanhWithoutCubicTerm, SiLUWithoutProductRule]
)
def test_gradcheck_catches_a_wrong_backward(make, rng, wrong):
    x = make(rng.uniform(-3, 3, (3, 4)))
    with pytest.raises(mt.GradcheckError, match="input 0 at position"):
        mt.gradcheck(wrong.apply, x)


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu", "swish"])
def test_inputs_are_checked(name):
    fn = getattr(F, name)
    with pytest.raises(ArgumentError, match=f"{name}: x must"):
        fn([1.0, 2.0])
    with pytest.raises(DTypeError, match="need a float dtype"):
        fn(mt.tensor([1, 2]))
