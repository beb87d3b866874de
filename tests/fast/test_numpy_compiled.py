"""numba's LayerNorm row kernels (``fast/numpy/compiled.py``, an optional extra): off by
default and without numba; switched on, the same values and gradients as the NumPy kernels
and the reference (float32 and float64, one row and many, D = 1), rows that overflow or
underflow handed to the NumPy kernel's redo, other dtypes and layouts not taken."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast
from minitransformer.fast.numpy import compiled
from minitransformer.fast.numpy import layernorm as layernorm_twin


def test_off_by_default_and_importing_it_imports_no_numba():
    import sys

    assert not compiled.enabled()
    assert "numba" not in sys.modules or compiled.available()
    x = np.ones((2, 3))
    assert not compiled.fits(x, x[0], x[0])  # off: nothing fits


def test_enable_without_numba_changes_nothing(monkeypatch):
    monkeypatch.setattr(compiled, "available", lambda: False)
    assert compiled.enable() is False and not compiled.enabled()


@pytest.fixture
def switched_on():
    pytest.importorskip("numba")
    assert compiled.enable()
    yield
    compiled.disable()


def _ln_forward_backward(x, dtype, seed=0):
    rng = np.random.default_rng(seed)
    D = x.shape[-1]
    xt = mt.tensor(x, dtype=dtype, requires_grad=True)
    gamma = mt.tensor(rng.standard_normal(D), dtype=dtype, requires_grad=True)
    beta = mt.tensor(rng.standard_normal(D), dtype=dtype, requires_grad=True)
    y = F.layer_norm(xt, gamma, beta, eps=1e-5)
    u = rng.standard_normal(y.shape).astype(dtype)
    (y * mt.tensor(u)).sum().backward()
    return [y.numpy(), xt.grad, gamma.grad, beta.grad]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 16), (1, 1), (5, 1), (64, 64)])
def test_the_compiled_kernels_match_the_reference(switched_on, shape, dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape) * 3 + 1
    calls = []
    real = compiled._kernels["layer_norm_forward"]
    compiled._kernels["layer_norm_forward"] = lambda *a: calls.append(1) or real(*a)
    with fast.switched_on():
        got = _ln_forward_backward(x, dtype)
    compiled._kernels["layer_norm_forward"] = real
    assert calls  # the compiled kernel is what ran
    want = _ln_forward_backward(x, dtype)  # the reference
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-11, atol=1e-12)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a, b, **tol)


@pytest.mark.parametrize("scale", [1e25, 1e-25, 0.0])
def test_rows_out_of_range_go_to_the_numpy_redo(switched_on, scale):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 8)).astype("float32")
    x[1] *= scale  # a sum of squares that overflows, underflows, or a constant row
    gamma, beta = np.ones(8, "float32"), np.zeros(8, "float32")
    assert compiled.layer_norm_forward(x, gamma, beta, 0.0) is None  # handed back
    got = layernorm_twin.layer_norm_forward(x, gamma, beta, 0.0)
    compiled.disable()
    want = layernorm_twin.layer_norm_forward(x, gamma, beta, 0.0)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_other_dtypes_and_layouts_are_not_taken(switched_on):
    x = np.ones((4, 6), dtype="float32")
    g = np.ones(6, dtype="float32")
    assert compiled.fits(x, g, g)
    assert not compiled.fits(x.astype("float16"), g.astype("float16"), g.astype("float16"))
    assert not compiled.fits(x[:, ::2], g[::2], g[::2])  # not C-contiguous
    assert not compiled.fits(x, g.astype("float64"), g)  # dtypes mixed
