"""The NumPy twins of dropout and dropout_add (``fast/numpy/dropout.py``): the generator's own
mask (the same draw as the reference's) applied as a product, x * scale * keep, instead of
``where``: the reference's numbers for finite inputs, forward and backward, every float
dtype and several p, the residual's gradient passed through, gradcheck; what differs (a
dropped inf) is the documented NaN."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import fast
from minitransformer.backend import Generator
from minitransformer.fast.numpy import dropout as numpy_twins
from minitransformer.functional import dropout, dropout_add

SHAPE = (4, 5, 6)


def _run(op, dtype, p, seed=3):
    """y, dx (and dr) of sum(u * op) with a fresh generator of ``seed``; and ctx.fn."""
    rng = np.random.default_rng(seed)
    x = mt.tensor(rng.standard_normal(SHAPE), dtype=dtype, requires_grad=True)
    r = mt.tensor(rng.standard_normal(SHAPE), dtype=dtype, requires_grad=True)
    gen = Generator(seed)
    y = dropout(x, p, generator=gen) if op == "dropout" else dropout_add(x, r, p, generator=gen)
    fn = y._ctx.fn
    u = rng.standard_normal(SHAPE).astype(dtype)
    (y * mt.tensor(u)).sum().backward()
    return y.numpy(), x.grad, r.grad, fn


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("op", ["dropout", "dropout_add"])
def test_the_twins_match_the_reference(op, p, dtype):
    ref = _run(op, dtype, p)
    with fast.switched_on():
        got = _run(op, dtype, p)
    twin = numpy_twins.Dropout if op == "dropout" else numpy_twins.DropoutAdd
    assert got[3] is twin and ref[3] is not twin
    for a, b in zip(got[:3], ref[:3], strict=True):
        if b is None:
            assert a is None  # dropout has no residual
            continue
        assert a.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, b)  # the same mask, the same products: bit for bit
    dx = got[1]  # zero exactly where dropped: the mask did both
    assert (dx == 0).any() and (dx != 0).any()


def test_a_residual_alone_needs_no_mask_gradient():
    x = mt.tensor(np.ones(SHAPE))  # no gradient wanted for x
    r = mt.tensor(np.ones(SHAPE), requires_grad=True)
    with fast.switched_on():
        y = dropout_add(x, r, 0.5, generator=Generator(1))
        assert y._ctx.fn is numpy_twins.DropoutAdd
        y.sum().backward()
    np.testing.assert_array_equal(r.grad, np.ones(SHAPE))


def test_the_twins_pass_gradcheck():
    rng = np.random.default_rng(4)
    x = mt.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    r = mt.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    with fast.switched_on():
        assert mt.gradcheck(lambda x: dropout(x, 0.4, generator=Generator(5)), x)
        assert mt.gradcheck(lambda x, r: dropout_add(x, r, 0.3, generator=Generator(2)), x, r)


def test_a_dropped_inf_is_nan_in_the_twin_and_zero_in_the_reference():
    """The one documented difference: inf * 0 is NaN (a product), where() gives 0."""
    x = np.full((64,), np.inf)
    ref = dropout(mt.tensor(x), 0.5, generator=Generator(7)).numpy()
    with fast.switched_on(), np.errstate(invalid="ignore"):
        got = dropout(mt.tensor(x), 0.5, generator=Generator(7)).numpy()
    dropped = ref == 0
    assert dropped.any() and np.isnan(got[dropped]).all()
    np.testing.assert_array_equal(got[~dropped], ref[~dropped])
