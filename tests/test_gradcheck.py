"""gradcheck must pass correct backward passes and catch wrong ones, naming the element."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.function import Function


class WrongSquare(Function):
    """y = x^2 with a backward that is wrong for one element."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved
        dx = 2 * x * grad
        dx[1, 2] += 0.5
        return dx


def test_gradcheck_reports_the_worst_element():
    x = mt.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    with pytest.raises(mt.GradcheckError, match=r"input 0 at position \(1, 2\)"):
        mt.gradcheck(WrongSquare.apply, x)


def test_gradcheck_passes_a_correct_op():
    x = mt.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    assert mt.gradcheck(lambda t: t * t, x)


def test_gradcheck_needs_float64():
    x = mt.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    with pytest.raises(TypeError, match="need float64"):
        mt.gradcheck(lambda t: t * t, x)


def test_gradcheck_needs_something_to_check():
    with pytest.raises(ValueError, match="no input has requires_grad"):
        mt.gradcheck(lambda t: t * t, mt.tensor(np.ones(3)))
