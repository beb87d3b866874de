"""fast/gpu/cublaslt.py: the bias in the Linear layer's products.

On the CPU: every product the Linear twin asks for, executed in NumPy as cuBLASLt documents
its epilogues in column-major terms (``cublaslt.run_plan``), gives x W + b, and the column
sums of g as the bias gradient: the row-major to column-major mapping (which epilogue, A or
B) is right. On a GPU: the library itself against the reference, and the Linear and
LayerNorm twins writing the parameters' gradients into an optimizer's buffers.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from minitransformer.fast.gpu import cublas, cublaslt


def _plan(a, b):
    item = a.itemsize
    return cublas.plan(a.shape, tuple(s // item for s in a.strides), b.shape,
                       tuple(s // item for s in b.strides))  # fmt: skip


def _weight(rng, d_in, d_out, transposed, dtype):
    """(stored weight, the (d_in, d_out) matrix it stands for)."""
    w = rng.standard_normal((d_out, d_in) if transposed else (d_in, d_out)).astype(dtype)
    return w, (w.mT if transposed else w)


SIZES = [(1, 3, 2), (7, 5, 4), (33, 16, 9)]  # (rows, d_in, d_out)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(("rows", "d_in", "d_out"), SIZES)
def test_forward_epilogue_adds_the_bias_to_every_row(rows, d_in, d_out, transposed, dtype):
    rng = np.random.default_rng(0)
    x2 = rng.standard_normal((rows, d_in)).astype(dtype)
    _, w = _weight(rng, d_in, d_out, transposed, dtype)
    b = rng.standard_normal(d_out).astype(dtype)
    p = _plan(x2, w)
    y, grad = cublaslt.run_plan(p, x2, w, cublaslt.epilogue_for(True, None), bias=b)
    assert grad is None
    np.testing.assert_allclose(y, x2 @ w + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(("rows", "d_in", "d_out"), SIZES)
def test_weight_grad_epilogue_sums_the_columns_of_g(rows, d_in, d_out, transposed, dtype):
    """dW = x^T g (g is our b: BGRADA) or, for a weight stored (d_out, d_in), g^T x (g is
    our a: BGRADB); either way the bias gradient is g's column sums."""
    rng = np.random.default_rng(1)
    x2 = rng.standard_normal((rows, d_in)).astype(dtype)
    g2 = rng.standard_normal((rows, d_out)).astype(dtype)
    a, b = (g2.mT, x2) if transposed else (x2.mT, g2)
    epilogue = cublaslt.epilogue_for(False, "a" if transposed else "b")
    assert epilogue == (cublaslt.BGRADB if transposed else cublaslt.BGRADA)
    dw, db = cublaslt.run_plan(_plan(a, b), a, b, epilogue)
    np.testing.assert_allclose(dw, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, g2.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_the_other_epilogue_would_sum_the_wrong_operand():
    """The check above can fail: with A and B swapped the 'bias gradient' is x's sums."""
    rng = np.random.default_rng(2)
    x2, g2 = rng.standard_normal((6, 3)), rng.standard_normal((6, 4))
    a, b = x2.mT, g2
    _, wrong = cublaslt.run_plan(_plan(a, b), a, b, cublaslt.BGRADB)
    assert wrong.shape == (3,)
    np.testing.assert_allclose(wrong, x2.sum(axis=0))


def test_no_epilogue_is_the_plain_product():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    y, grad = cublaslt.run_plan(_plan(a, b), a, b, cublaslt.DEFAULT)
    assert grad is None
    np.testing.assert_allclose(y, a @ b)


# ----------------------------------------------------------------------------- on a GPU

gpu = pytest.mark.gpu  # skipped without a GPU (tests/conftest.py)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("transposed", [False, True])
def test_gpu_cublaslt_matches_the_reference(transposed, dtype):
    import cupy as cp

    rng = np.random.default_rng(4)
    rows, d_in, d_out = 40, 24, 20
    x2 = rng.standard_normal((rows, d_in)).astype(dtype)
    stored, w = _weight(rng, d_in, d_out, transposed, dtype)
    b = rng.standard_normal(d_out).astype(dtype)
    g2 = rng.standard_normal((rows, d_out)).astype(dtype)
    X, W, B, G = (cp.asarray(v) for v in (x2, stored, b, g2))
    W = W.mT if transposed else W
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    y = cublaslt.matmul(X, W, cublaslt.BIAS, bias=B, cp=cp)
    if dtype == "float32":  # what the twin relies on: offered for float32
        assert y is not None, "cuBLASLt offered no algorithm for x W + b in float32"
    if y is not None:
        np.testing.assert_allclose(cp.asnumpy(y), x2 @ w + b, **tol)
    a, bb = (G.mT, X) if transposed else (X.mT, G)
    db = cp.full((d_out,), np.nan, dtype=dtype)
    epilogue = cublaslt.BGRADB if transposed else cublaslt.BGRADA
    dw = cublaslt.matmul(a, bb, epilogue, bias=db, cp=cp)
    if dtype == "float32":
        assert dw is not None, "cuBLASLt offered no algorithm for dW with db in float32"
    if dw is not None:
        want = (g2.T @ x2) if transposed else (x2.T @ g2)
        np.testing.assert_allclose(cp.asnumpy(dw), want, **tol)
        np.testing.assert_allclose(cp.asnumpy(db), g2.sum(axis=0), **tol)


def _linear_then_layer_norm(device: str, dtype: str, reference: bool):
    """y = LayerNorm(Linear(x)) and its backward under Adam (one flat gradient buffer):
    (y, dL/dx, the parameters)."""
    import minitransformer as mt
    from minitransformer import fast, nn
    from minitransformer.optim import Adam

    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 11, 16)).astype(dtype)
    g = rng.standard_normal((3, 11, 12)).astype(dtype)
    mt.backend.manual_seed(0)
    lin, ln = nn.Linear(16, 12), nn.LayerNorm(12)
    lin.to(device, dtype), ln.to(device, dtype)
    params = [*lin.parameters(), *ln.parameters()]
    Adam(params, lr=1e-3)  # each parameter's gradient has its place in one flat buffer
    xt = mt.Tensor(x, device=device, requires_grad=True)
    with fast.reference_only() if reference else contextlib.nullcontext():
        y = ln(lin(xt))
        (y * mt.Tensor(g, device=device)).sum().backward()
    return y.numpy(), mt.backend.to_numpy(xt.grad), params


def test_linear_then_layer_norm_runs_on_the_cpu():
    """The GPU test's model, on the CPU: the gradients land in the flat buffer."""
    y, dx, params = _linear_then_layer_norm("cpu", "float64", reference=True)
    assert y.shape == (3, 11, 12) and dx.shape == (3, 11, 16)
    assert all(p.grad is p._grad_buffer for p in params)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_linear_and_layer_norm_twins_write_into_the_flat_buffer(
    dtype, kernels_switch, monkeypatch
):
    """The twins' values and gradients match the reference's, and their backward returns
    the offered buffers themselves (written there: the engine copies nothing)."""
    import minitransformer as mt
    from minitransformer.fast.cupy import layernorm as cupy_layernorm
    from minitransformer.fast.cupy import linear as cupy_linear

    kernels_switch("1")
    written = []
    for cls in (cupy_linear.Linear, cupy_layernorm.LayerNorm):

        def spy(ctx, grad, _inner=cls.backward):
            buffers = [p._grad_buffer for p in ctx.parents]  # what take_grad_buffer hands out
            out = _inner(ctx, grad)
            written.extend(o is not None and g is o for o, g in zip(buffers, out, strict=False))
            return out

        monkeypatch.setattr(cls, "backward", staticmethod(spy))
    y0, dx0, p0 = _linear_then_layer_norm("cuda:0", dtype, reference=True)
    y1, dx1, p1 = _linear_then_layer_norm("cuda:0", dtype, reference=False)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(y1, y0, **tol)
    np.testing.assert_allclose(dx1, dx0, **tol)
    for a, b in zip(p1, p0, strict=True):
        np.testing.assert_allclose(mt.backend.to_numpy(a.grad), mt.backend.to_numpy(b.grad), **tol)
    assert written.count(True) == 4, written  # W, b, gamma, beta: each written in place
