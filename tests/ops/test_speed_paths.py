"""The fast paths compute the same numbers as the plain ones: every NumPy kernel in
kernels/numpy.py against its reference op (forward and backward, float32 and float64, under
``kernels.reference_only()``), gradchecks of the reference math, linear with a transposed
weight (the tied output projection), gradients added in place into fresh arrays, and the
per-product BLAS-thread policy of kernels.numpy.matmul."""

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import backend, host, kernels
from minitransformer.errors import ShapeError
from minitransformer.kernels import numpy as numpy_kernels
from minitransformer.ops.matmul import linear


@pytest.mark.parametrize("bias", [True, False])
def test_linear_transpose_weight(make, rng, bias):
    x_np, w_np, b_np = (rng.standard_normal(s) for s in ((2, 3, 4), (5, 4), (5,)))
    x, w, b = make(x_np), make(w_np), make(b_np)
    out = linear(x, w, b if bias else None, transpose_weight=True)
    np.testing.assert_allclose(out.numpy(), x_np @ w_np.T + (b_np if bias else 0), atol=1e-12)

    def f(x, w, *b):
        return linear(x, w, *b, transpose_weight=True)

    assert mt.gradcheck(f, x, w, *([b] if bias else []))


def test_linear_transpose_weight_checks_shapes(make, rng):
    x, w = make(rng.standard_normal((2, 4))), make(rng.standard_normal((4, 5)))
    with pytest.raises(ShapeError, match="weight.shape\\[1\\]"):
        linear(x, w, transpose_weight=True)
    w2 = make(rng.standard_normal((5, 4)))
    with pytest.raises(ShapeError, match="bias"):
        linear(x, w2, make(rng.standard_normal(4)), transpose_weight=True)


def test_gradient_of_a_tensor_used_many_times_adds_up(make, rng):
    """x feeds three linears (fresh gradients, summed in place) and a residual add (a
    shared gradient, which must not be written into)."""
    x = make(rng.standard_normal((2, 3, 4)))
    ws = [make(rng.standard_normal((4, 4))) for _ in range(3)]

    def f(x, *ws):
        y = linear(x, ws[0]) + linear(x, ws[1]) * linear(x, ws[2])
        return (y + x).sum()

    assert mt.gradcheck(f, x, *ws)


def test_leaf_gradients_accumulate_over_two_backwards(make, rng):
    x = make(rng.standard_normal((3, 4)))
    w = make(rng.standard_normal((4, 2)))
    linear(x, w).sum().backward()
    first_w, first_x = backend.to_numpy(w.grad).copy(), backend.to_numpy(x.grad).copy()
    linear(x, w).sum().backward()
    np.testing.assert_allclose(backend.to_numpy(w.grad), 2 * first_w)
    np.testing.assert_allclose(backend.to_numpy(x.grad), 2 * first_x)


def test_retained_gradient_is_not_changed_by_a_later_backward(rng):
    x = mt.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    w = mt.tensor(rng.standard_normal((4, 4)), requires_grad=True)
    h = linear(x, w).retain_grad()
    y = h.reshape(12)
    y.sum().backward(retain_graph=True)
    kept = h.grad
    snapshot = np.array(kept, copy=True)
    (y * 2.0).sum().backward()
    np.testing.assert_allclose(kept, snapshot)  # the old array was not added into
    np.testing.assert_allclose(h.grad, 3 * snapshot)


@pytest.mark.parametrize("shape", [((3, 4), (4, 5)), ((512, 512), (512, 300))])
def test_kernel_matmul_matches_and_restores_threads(shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape[0]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    threads = host.blas_threads()
    np.testing.assert_allclose(numpy_kernels.matmul(a, b), a @ b, rtol=1e-5, atol=1e-4)
    assert host.blas_threads() == threads


# ----------------------------------------------------------------------------- fast vs reference

IGN = -100
_T = np.array([[1, 4, IGN], [0, 2, 3]])  # targets for logits (2, 3, 5), one ignored


def _masked(x):
    """Logits with masked (-inf) entries and one all -inf row (softmax gives 0 there)."""
    x = x.copy()
    x[0, 0, 1] = x[1, 2, :2] = -np.inf
    x[1, 1, :] = -np.inf
    return x


def _masked_ce(x):
    """Cross-entropy logits with -inf entries away from the targets (a finite loss)."""
    x = x.copy()
    x[0, 0, 0] = x[0, 2, 4] = -np.inf
    return x


# name -> (the op, input shapes, the kernels it must use on NumPy, make inputs)
CASES = {
    "layer_norm": (lambda x, g, b: F.layer_norm(x, g, b), [(2, 3, 8), (8,), (8,)],
                   ["layer_norm_forward", "layer_norm_backward"], None),
    "softmax": (lambda x: F.softmax(x), [(2, 3, 5)], ["softmax"], None),
    "softmax_axis0": (lambda x: F.softmax(x, axis=0), [(4, 3)], ["softmax"], None),
    "softmax_masked": (lambda x: F.softmax(x), [(2, 3, 5)], ["softmax"], _masked),
    "log_softmax": (lambda x: F.log_softmax(x, axis=1), [(2, 3, 5)], ["log_softmax"], None),
    "cross_entropy": (lambda x: F.cross_entropy(x, _T, ignore_index=IGN), [(2, 3, 5)],
                      ["cross_entropy_forward", "cross_entropy_backward"], None),
    "cross_entropy_smoothed": (
        lambda x: F.cross_entropy(x, _T, label_smoothing=0.1, ignore_index=IGN, reduction="sum"),
        [(2, 3, 5)], ["cross_entropy_forward", "cross_entropy_backward"], None),
    "cross_entropy_none": (
        lambda x: F.cross_entropy(x, np.where(_T == IGN, 0, _T), reduction="none"),
        [(2, 3, 5)], ["cross_entropy_forward", "cross_entropy_backward"], None),
    "cross_entropy_masked": (lambda x: F.cross_entropy(x[0], _T[1]), [(2, 3, 5)],
                             ["cross_entropy_forward", "cross_entropy_backward"],
                             _masked_ce),
    "linear": (lambda x, w, b: F.linear(x, w, b), [(2, 3, 4), (4, 5), (5,)], ["matmul"], None),
    "linear_transposed": (lambda x, w: F.linear(x, w, transpose_weight=True),
                          [(2, 3, 4), (5, 4)], ["matmul"], None),
    "matmul_rows": (lambda a, b: F.matmul(a, b), [(2, 3, 4), (4, 5)], ["matmul"], None),
    "matmul_batched": (lambda a, b: F.matmul(a, b), [(2, 2, 3, 4), (2, 1, 4, 5)], ["matmul"],
                       None),
}  # fmt: skip


def _forward_backward(case, dtype, seed=0):
    fn, shapes, _, prepare = CASES[case]
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    if prepare is not None:
        arrays[0] = prepare(arrays[0])
    xs = [mt.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
    y = fn(*xs)
    u = rng.standard_normal(y.shape).astype(dtype)
    (y * mt.tensor(u)).sum().backward()
    return y.numpy(), [x.grad.copy() for x in xs]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_numpy_kernel_matches_its_reference(case, dtype, monkeypatch):
    used = []

    def counted(name, real):
        def kernel(*args):
            used.append(name)
            return real(*args)

        return kernel

    for name in CASES[case][2]:  # count the kernel's calls: the op must take the fast path
        monkeypatch.setattr(numpy_kernels, name, counted(name, getattr(numpy_kernels, name)))
    y, grads = _forward_backward(case, dtype)
    assert set(used) == set(CASES[case][2]), used
    used.clear()
    with kernels.reference_only():
        y_ref, grads_ref = _forward_backward(case, dtype)
    assert not used  # the reference ran without a kernel
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    assert y.dtype == y_ref.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, y_ref, **tol)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        assert g.dtype == g_ref.dtype == np.dtype(dtype)
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, g_ref, **tol)


def test_reference_only_switches_every_kernel_off_and_back_on():
    x = np.zeros(3)
    assert kernels.find(x) is numpy_kernels
    with kernels.reference_only():
        assert kernels.find(x) is None
    assert kernels.find(x) is numpy_kernels


@pytest.mark.parametrize(
    "case",
    ["layer_norm", "softmax", "log_softmax", "cross_entropy", "cross_entropy_smoothed",
     "linear", "linear_transposed"],
)  # fmt: skip
def test_reference_math_passes_gradcheck(case):
    fn, shapes, _, _ = CASES[case]
    rng = np.random.default_rng(1)
    xs = [mt.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    with kernels.reference_only():
        assert mt.gradcheck(fn, *xs)


def test_kernels_leave_their_inputs_and_saved_arrays_intact():
    """No kernel writes into an array it was given (a saved array may be one)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5))
    t = np.array([0, 4, 2, 1, 3, 0])
    gamma, beta = rng.standard_normal(5), rng.standard_normal(5)
    before = [a.copy() for a in (x, t, gamma, beta)]
    _, x_hat, rstd = numpy_kernels.layer_norm_forward(x, gamma, beta, 1e-5)
    saved = [x_hat.copy(), rstd.copy()]
    numpy_kernels.layer_norm_backward(x, x_hat, rstd, gamma, (True, True, True))
    numpy_kernels.softmax(x, -1)
    numpy_kernels.log_softmax(x, 0)
    _, e, s = numpy_kernels.cross_entropy_forward(x, t, 0.1)
    saved += [e.copy(), s.copy()]
    numpy_kernels.cross_entropy_backward(e, s, t, np.float64(0.5), 0.1)
    for a, b in zip((x, t, gamma, beta, x_hat, rstd, e, s), (*before, *saved), strict=True):
        np.testing.assert_array_equal(a, b)
