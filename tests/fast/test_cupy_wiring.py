"""The wiring of the CuPy Linear and LayerNorm twins (``fast/cupy/linear.py``,
``fast/cupy/layernorm.py``), run on the CPU: CuPy replaced by NumPy; cuBLASLt's product by its
documented result in NumPy (the bias added; the bias gradient of our b as its column sums,
of our a as its row sums), cuBLAS's by ``numpy.matmul``, LayerNorm's kernels by the NumPy
twin's row kernels. What this checks is the twins' own code around the kernels: what forward
saves and backward reads (the twin's forward, or the reference's where cuBLASLt has no
algorithm), inputs of every rank, the weight either way, gradients written into the
optimizer's buffer. The kernels themselves are checked on a GPU (tests/fast/test_cuda_*.py,
tests/fast/test_cublaslt_plan.py)."""

import types

import numpy as np
import pytest
from cupy_standin import numpy_cublaslt

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast
from minitransformer.fast.cupy import layernorm as cupy_layernorm
from minitransformer.fast.cupy import linear as cupy_linear
from minitransformer.fast.gpu import cublas, cublaslt
from minitransformer.fast.numpy import layernorm as numpy_layernorm
from minitransformer.optim import Adam


@pytest.fixture
def on_numpy(monkeypatch):
    stand_in = types.SimpleNamespace(reshape=np.reshape, empty=np.empty, sum=np.sum)
    monkeypatch.setattr(cupy_linear, "cp", stand_in)
    monkeypatch.setattr(cublas, "matmul", lambda a, b, cp=None, out=None: np.matmul(a, b, out=out))

    def use(available):
        monkeypatch.setattr(cublaslt, "matmul", numpy_cublaslt(available))

    return use


def _step(linear, x_shape, transposed, optimizer):
    rng = np.random.default_rng(0)
    w_shape = (3, 5) if transposed else (5, 3)
    x = mt.tensor(rng.standard_normal(x_shape), requires_grad=True)
    w = mt.tensor(rng.standard_normal(w_shape), requires_grad=True)
    b = mt.tensor(rng.standard_normal(3), requires_grad=True)
    opt = Adam([w, b]) if optimizer else None
    y = linear(x, w, b, transposed)
    (y * mt.tensor(rng.standard_normal(y.shape))).sum().backward()
    return y.numpy(), x.grad, w.grad, b.grad, opt, (w, b)


def _twin(x, w, b, transposed):
    return cupy_linear.Linear.apply(x, w, b, transpose_weight=transposed)


def _reference(x, w, b, transposed):
    return F.linear(x, w, b, transpose_weight=transposed)


@pytest.mark.parametrize("optimizer", [False, True])
@pytest.mark.parametrize("lt", [True, False])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("x_shape", [(4, 5), (2, 3, 5), (2, 1, 3, 5)])
def test_the_cupy_linear_twin_computes_the_references_gradients(
    on_numpy, x_shape, transposed, lt, optimizer
):
    on_numpy(lt)
    got = _step(_twin, x_shape, transposed, optimizer)
    ref = _step(_reference, x_shape, transposed, optimizer)
    for a, b in zip(got[:4], ref[:4], strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    if optimizer:  # written into the buffer: the optimizer's own views
        group, (w, b) = got[4].groups[0], got[5]
        assert w.grad is group.grad_views[0] and b.grad is group.grad_views[1]


@pytest.mark.parametrize("optimizer", [False, True])
@pytest.mark.parametrize("x_shape", [(4, 6), (2, 3, 6), (2, 1, 3, 6)])
def test_the_cupy_layer_norm_twin_computes_the_references_gradients(
    monkeypatch, x_shape, optimizer
):
    def backward_kernel(g, x_hat, rstd, gamma, needs, outs=(None, None, None)):
        dx, dgamma, dbeta = numpy_layernorm.layer_norm_backward(g, x_hat, rstd, gamma, needs)
        for out, d in zip(outs[1:], (dgamma, dbeta), strict=True):
            if out is not None and d is not None:
                out[...] = d
        return dx, *(d if o is None else o for o, d in zip(outs[1:], (dgamma, dbeta), strict=True))

    monkeypatch.setattr(cupy_layernorm, "cp", types.SimpleNamespace(reshape=np.reshape))
    monkeypatch.setattr(cupy_layernorm, "layer_norm_backward", backward_kernel)
    monkeypatch.setattr(
        cupy_layernorm.LayerNorm, "forward_kernel", staticmethod(numpy_layernorm.layer_norm_forward)
    )

    def run(twin):
        rng = np.random.default_rng(1)
        x = mt.tensor(rng.standard_normal(x_shape), requires_grad=True)
        gamma = mt.tensor(rng.standard_normal(6), requires_grad=True)
        beta = mt.tensor(rng.standard_normal(6), requires_grad=True)
        opt = Adam([gamma, beta]) if optimizer else None
        with fast.reference_only():
            twin_ln = cupy_layernorm.LayerNorm
            y = twin_ln.apply(x, gamma, beta) if twin else F.layer_norm(x, gamma, beta)
        assert (y._ctx.fn is cupy_layernorm.LayerNorm) == twin
        (y * mt.tensor(rng.standard_normal(x_shape))).sum().backward()
        return y.numpy(), x.grad, gamma.grad, beta.grad, opt, (gamma, beta)

    got, ref = run(True), run(False)
    for a, b in zip(got[:4], ref[:4], strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    if optimizer:
        group, (gamma, beta) = got[4].groups[0], got[5]
        assert gamma.grad is group.grad_views[0] and beta.grad is group.grad_views[1]


@pytest.mark.parametrize("optimizer", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("x_shape", [(4, 5), (2, 3, 5), (2, 1, 3, 5)])
def test_the_cupy_linear_twin_computes_a_product_without_bias_as_one_2d_gemm(
    monkeypatch, x_shape, transposed, optimizer
):
    """No bias (the tied output projection): the twin's own forward, ONE cuBLAS product of
    the rows (rows, d_in) by the weight (a transposed weight read in place, no copy), where
    the reference's product of an N-D stack is a batch of products; gradients as the
    reference's."""
    products = []

    def counted(a, b, cp=None, out=None):  # noqa: ARG001
        products.append((a, b))
        return np.matmul(a, b, out=out)

    stand_in = types.SimpleNamespace(reshape=np.reshape, empty=np.empty, sum=np.sum)
    monkeypatch.setattr(cupy_linear, "cp", stand_in)
    monkeypatch.setattr(cublas, "matmul", counted)
    monkeypatch.setattr(cublaslt, "matmul", lambda *a, **k: pytest.fail("no bias: no epilogue"))

    def run(twin):
        rng = np.random.default_rng(2)
        x = mt.tensor(rng.standard_normal(x_shape), requires_grad=True)
        w = mt.tensor(rng.standard_normal((3, 5) if transposed else (5, 3)), requires_grad=True)
        opt = Adam([w]) if optimizer else None
        if not twin:
            y = F.linear(x, w, transpose_weight=transposed)
        elif transposed:
            y = cupy_linear.Linear.apply(x, w, None, transpose_weight=True)
        else:
            y = cupy_linear.Linear.apply(x, w)
        forward = list(products)
        (y * mt.tensor(rng.standard_normal(y.shape))).sum().backward()
        return (y.numpy(), x.grad, w.grad), forward, opt, w

    (got, forward, opt, w), (want, _, _, _) = run(True), run(False)
    [(a, b)] = forward
    rows = int(np.prod(x_shape[:-1]))
    assert a.shape == (rows, 5) and b.shape == (5, 3)
    assert np.shares_memory(b, w.data), "the weight read where it lies (a view, no copy)"
    for g, r in zip(got, want, strict=True):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
    if optimizer:
        assert w.grad is opt.groups[0].grad_views[0]
