"""The CuPy twins of ReLU, the embedding (``fast/cupy/elementwise.py``, ``embedding.py``) and
the cross-entropy's reduction (``fast/cupy/loss.py``) against their references, on a GPU: the
same values and gradients, the corners included (NaN gradients, an embedding weight under
an optimizer, ignored rows, every row ignored, "sum")."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast

gpu = pytest.mark.gpu  # skipped without a GPU (tests/conftest.py)
DEV = "cuda:0"


def _both(fn):
    """fn() with the reference ops, then with the twins (the fast tier's default on a GPU)."""
    with fast.reference_only():
        want = fn()
    return want, fn()


def _close(got, want, dtype):
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_relu_backward_is_the_references(dtype, kernels_switch):
    kernels_switch("1")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)).astype(dtype)
    x[0, :3] = 0.0  # the subgradient 0 at 0
    g = rng.standard_normal((5, 7)).astype(dtype)
    g[1, :] = np.nan  # NaN stays NaN where the mask is 0, as in the reference's product

    def run():
        xt = mt.Tensor(x, device=DEV, requires_grad=True)
        y = F.relu(xt)
        (y * mt.Tensor(g, device=DEV)).sum().backward()
        return y.numpy(), mt.backend.to_numpy(xt.grad)

    (y0, d0), (y1, d1) = _both(run)
    _close(y1, y0, dtype)
    np.testing.assert_array_equal(np.isnan(d1), np.isnan(d0))
    _close(np.nan_to_num(d1), np.nan_to_num(d0), dtype)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("with_optimizer", [False, True])
def test_gpu_embedding_backward_is_the_references(dtype, with_optimizer, kernels_switch):
    """Repeated ids add up; under an optimizer the gradient is its buffer."""
    from minitransformer.optim import Adam

    kernels_switch("1")
    rng = np.random.default_rng(1)
    ids = np.array([[3, 1, 3, 0], [2, 3, 9, 1]])
    table = rng.standard_normal((10, 6)).astype(dtype)
    g = rng.standard_normal((2, 4, 6)).astype(dtype)

    def run():
        w = mt.nn.Parameter(table.copy(), device=DEV)
        if with_optimizer:
            Adam([w], lr=1e-3)
        y = F.embedding(mt.backend.asarray(ids, device=DEV), w)
        (y * mt.Tensor(g, device=DEV)).sum().backward()
        assert not with_optimizer or w.grad is w._grad_buffer
        return y.numpy(), mt.backend.to_numpy(w.grad)

    (y0, d0), (y1, d1) = _both(run)
    _close(y1, y0, dtype)
    _close(d1, d0, dtype)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore", [None, 0, -100, "all"])
def test_gpu_cross_entropy_reduction_is_the_references(dtype, reduction, ignore, kernels_switch):
    kernels_switch("1")
    rng = np.random.default_rng(2)
    N, V = 37, 11
    x = rng.standard_normal((N, V)).astype(dtype)
    t = rng.integers(0, V, size=N)
    if ignore == "all":
        ignore_index, t[:] = 5, 5  # every row ignored: "mean" is 0 with a zero gradient
    else:
        ignore_index = ignore
        if ignore is not None:
            t[::3] = ignore

    def run():
        xt = mt.Tensor(x, device=DEV, requires_grad=True)
        loss = F.cross_entropy(xt, t, label_smoothing=0.1, ignore_index=ignore_index,
                               reduction=reduction)  # fmt: skip
        (loss * 3.0).backward()
        return float(loss.item()), mt.backend.to_numpy(xt.grad)

    (l0, d0), (l1, d1) = _both(run)
    _close(l1, l0, dtype)
    _close(d1, d0, dtype)
    if ignore == "all":
        assert l1 == 0.0 and not d1.any()
