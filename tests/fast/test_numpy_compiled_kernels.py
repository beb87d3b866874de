"""numba's cross-entropy rows and dropout pass (``fast/numpy/compiled_rows.py``, switched on
by ``compiled.enable()``): the compiled kernels are what runs, and they give the reference's
values and gradients (float32 and float64, odd shapes, label smoothing or none, ignored rows,
every row ignored, masked -inf logits, NaN and Inf rows as the NumPy twin treats them);
dropout's mask is the generator's own draw, the products the NumPy twin's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast
from minitransformer.backend import Generator
from minitransformer.fast.numpy import compiled
from minitransformer.fast.numpy import loss as loss_twin
from minitransformer.functional import dropout, dropout_add

pytest.importorskip("numba")

CE_KERNELS = ("cross_entropy_shift", "cross_entropy_sums", "cross_entropy_backward")


@pytest.fixture
def switched_on():
    assert compiled.enable()
    yield
    compiled.disable()


def _counting(names):
    """Wrap the compiled kernels ``names`` so that each call is recorded; -> the record."""
    used = []
    for name in names:
        real = compiled._kernels[name]
        compiled._kernels[name] = lambda *a, _r=real, _n=name: used.append(_n) or _r(*a)
    return used


def _cross_entropy(x, t, dtype, eps, ignore_index, reduction):
    """loss and dlogits of cross_entropy(x, t) (weighted by u for "none")."""
    xt = mt.tensor(x, dtype=dtype, requires_grad=True)
    loss = F.cross_entropy(xt, t, label_smoothing=eps, ignore_index=ignore_index,
                           reduction=reduction)  # fmt: skip
    if reduction == "none":
        u = np.random.default_rng(9).standard_normal(loss.shape).astype(dtype)
        (loss * mt.tensor(u)).sum().backward()
    else:
        loss.backward()
    return loss.numpy(), xt.grad


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 13), (33, 1001)])
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("reduction, ignore", [("mean", None), ("mean", 0), ("sum", 2),
                                               ("none", 1)])  # fmt: skip
def test_the_compiled_cross_entropy_matches_the_reference(switched_on, dtype, shape, eps,
                                                          reduction, ignore):  # fmt: skip
    rng = np.random.default_rng(sum(shape))
    V = shape[-1]
    x = rng.standard_normal(shape) * 4
    t = rng.integers(0, V, shape[:-1])
    if ignore is not None and t.size > 1:
        t.reshape(-1)[::3] = ignore if ignore < V else 0  # some rows ignored
    used = _counting(CE_KERNELS)
    with fast.switched_on():
        got = _cross_entropy(x, t, dtype, eps, ignore if (ignore or 0) < V else None, reduction)
    compiled.disable()
    assert set(used) == set(CE_KERNELS)  # the compiled kernels are what ran
    want = _cross_entropy(x, t, dtype, eps, ignore if (ignore or 0) < V else None, reduction)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a, b, **tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_every_row_ignored_gives_the_references_zeros(switched_on, dtype, reduction):
    x = np.random.default_rng(3).standard_normal((4, 6))
    t = np.full((4,), 5)
    with fast.switched_on():
        got = _cross_entropy(x, t, dtype, 0.1, 5, reduction)
    compiled.disable()
    want = _cross_entropy(x, t, dtype, 0.1, 5, reduction)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)  # 0 loss, 0 gradient
        assert not a.any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_masked_nan_and_inf_logits_as_the_numpy_twin(switched_on, dtype, eps):
    """Row 0 masked (-inf, finite loss; inf with smoothing), row 1 all -inf, row 2 a NaN,
    row 3 a +inf, row 4 ordinary: the kernels' loss, e, s and gradient are the NumPy
    twin's (NaN where it has NaN, inf where it has inf)."""
    x = np.random.default_rng(4).standard_normal((5, 9)).astype(dtype)
    x[0, 5:] = -np.inf
    x[1, :] = -np.inf
    x[2, 3] = np.nan
    x[3, 7] = np.inf
    t = np.array([1, 2, 3, 4, 8], dtype=np.intp)
    w = np.full((5, 1), 0.2, dtype=dtype)
    with np.errstate(all="ignore"):
        got = compiled.cross_entropy_forward(x, t, eps)
        got_d = compiled.cross_entropy_backward(got[1], got[2], t, w.reshape(-1), eps)
        compiled.disable()
        want = loss_twin.cross_entropy_forward(x, t, eps)
        want_d = loss_twin.cross_entropy_backward(want[1], want[2], t, w, eps)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for a, b in zip((*got, got_d), (*want, want_d), strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)  # NaN and inf where they are
    assert np.isnan(got[0][2]) and np.isnan(got_d[2]).all()
    assert np.isfinite(got_d[0]).all() and np.isfinite(got[0][0]) == (eps == 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("w_shape", [(6, 1), (1,), ()])
def test_the_compiled_backward_is_the_numpy_twins_to_the_bit(switched_on, dtype, w_shape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 11)).astype(dtype)
    t = rng.integers(0, 11, 6)
    w = rng.random(w_shape).astype(dtype)
    e, s = loss_twin.cross_entropy_forward(x, t, 0.1)[1:]
    used = _counting(["cross_entropy_backward"])
    got = loss_twin.cross_entropy_backward(e, s, t, w, 0.1)
    compiled.disable()
    assert used
    np.testing.assert_array_equal(got, loss_twin.cross_entropy_backward(e, s, t, w, 0.1))


def test_other_dtypes_are_not_taken(switched_on):
    x = np.random.default_rng(6).standard_normal((3, 4)).astype("float16")
    t = np.array([0, 1, 3])
    used = _counting(CE_KERNELS)
    loss, e, s = loss_twin.cross_entropy_forward(x, t, 0.1)
    loss_twin.cross_entropy_backward(e, s, t, np.float64(0.5), 0.1)  # w of another dtype
    assert not used and loss.dtype == np.float16


def _dropout_run(op, dtype, p, shape, seed=3):
    """y, dx, dr of sum(u * op) with a fresh generator of ``seed``."""
    rng = np.random.default_rng(seed)
    x = mt.tensor(rng.standard_normal(shape), dtype=dtype, requires_grad=True)
    r = mt.tensor(rng.standard_normal(shape), dtype=dtype, requires_grad=True)
    gen = Generator(seed)
    y = dropout(x, p, generator=gen) if op == "dropout" else dropout_add(x, r, p, generator=gen)
    u = rng.standard_normal(shape).astype(dtype)
    (y * mt.tensor(u)).sum().backward()
    return y.numpy(), x.grad, r.grad


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("shape", [(1,), (3, 5, 7), (2, 17, 129)])
@pytest.mark.parametrize("op", ["dropout", "dropout_add"])
def test_the_compiled_dropout_is_the_twins_and_the_references_bit_for_bit(switched_on, op, p,
                                                                         shape, dtype):  # fmt: skip
    used = _counting(["dropout", "dropout_add"])
    with fast.switched_on():
        got = _dropout_run(op, dtype, p, shape)
    compiled.disable()
    assert used.count("dropout") >= 1  # backward's dx; forward too for dropout
    assert ("dropout_add" in used) == (op == "dropout_add")
    with fast.switched_on():
        twin = _dropout_run(op, dtype, p, shape)  # the NumPy twin, the same mask
    reference = _dropout_run(op, dtype, p, shape)
    for a, b, c in zip(got, twin, reference, strict=True):
        if c is None:
            assert a is None and b is None
            continue
        assert a.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_a_dropped_inf_or_nan_is_nan_as_in_the_numpy_twin(switched_on):
    x = np.full((64,), np.inf)
    x[::2] = np.nan
    r = np.ones(64)
    with fast.switched_on(), np.errstate(invalid="ignore"):
        got = dropout_add(mt.tensor(x), mt.tensor(r), 0.5, generator=Generator(7)).numpy()
        compiled.disable()
        twin = dropout_add(mt.tensor(x), mt.tensor(r), 0.5, generator=Generator(7)).numpy()
    np.testing.assert_array_equal(got, twin)
    assert np.isnan(got).any() and np.isinf(got).any()


def test_negative_dropped_elements_are_minus_zero_as_in_the_numpy_twin(switched_on):
    x = -np.ones((32,), dtype="float32")
    with fast.switched_on():
        got = dropout(mt.tensor(x), 0.5, generator=Generator(8)).numpy()
        compiled.disable()
        twin = dropout(mt.tensor(x), 0.5, generator=Generator(8)).numpy()
    assert np.array_equal(np.signbit(got), np.signbit(twin)) and (got == 0).any()
    np.testing.assert_array_equal(got, twin)


def test_layouts_the_kernel_does_not_take_go_to_numpy(switched_on):
    x = np.random.default_rng(10).standard_normal((6, 8)).astype("float32")
    keep = np.ones((6, 8), dtype=bool)
    used = _counting(["dropout", "dropout_add"])
    from minitransformer.fast.numpy.dropout import _apply

    y = _apply(x[:, ::2], keep[:, ::2], 2.0)  # not C-contiguous
    y2 = _apply(x, keep, 2.0, x[:1])  # a residual that broadcasts
    assert not used
    np.testing.assert_array_equal(y, x[:, ::2] * 2)
    np.testing.assert_array_equal(y2, x * 2 + x[:1])
