"""gradcheck must pass correct backward passes and catch wrong ones, naming the element."""

import re

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import ArgumentError
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


class OneElementOff(Function):
    """y = 3x with a backward that is right everywhere except element (1, 2) of the input,
    where it returns ``BAD`` (set per test: NaN, Inf, an offset)."""

    BAD = ("set", 0.0)

    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, grad):
        dx = 3 * grad
        how, value = OneElementOff.BAD
        if how == "set":
            dx[1, 2] = value
        else:
            dx[1, 2] += value
        return dx


def _x():
    return mt.tensor(np.random.default_rng(1).standard_normal((3, 4)), requires_grad=True)


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (("set", float("nan")), "backward gives nan"),
        (("set", float("inf")), "backward gives inf"),
        (("set", -float("inf")), "backward gives -inf"),
        (("add", 1e6), r"\|diff\| 1e\+06"),
    ],
    ids=["nan", "inf", "-inf", "off-by-1e6"],
)
def test_one_broken_element_fails_and_is_named(monkeypatch, bad, words):
    monkeypatch.setattr(OneElementOff, "BAD", bad)
    with pytest.raises(mt.GradcheckError, match=r"input 0 at position \(1, 2\)") as info:
        mt.gradcheck(OneElementOff.apply, _x())
    message = str(info.value)
    assert re.search(words, message), message
    assert "finite differences give" in message
    assert "1 of 12 elements fail" in message


def test_an_error_just_above_the_tolerance_fails_and_just_below_passes(monkeypatch):
    monkeypatch.setattr(OneElementOff, "BAD", ("add", 3e-6))  # atol 2e-6, rtol 0
    with pytest.raises(mt.GradcheckError, match=r"position \(1, 2\).*\|diff\| 3e-06 > atol 2e-06"):
        mt.gradcheck(OneElementOff.apply, _x(), atol=2e-6, rtol=0.0)
    monkeypatch.setattr(OneElementOff, "BAD", ("add", 1e-6))
    assert mt.gradcheck(OneElementOff.apply, _x(), atol=2e-6, rtol=0.0)


@pytest.mark.parametrize(("nan_at", "huge_at"), [((2, 3), (0, 0)), ((0, 0), (2, 3))])
def test_a_nan_is_named_even_beside_a_larger_finite_error(nan_at, huge_at):
    """Whichever comes first in the scan: a NaN first used to swallow every later error
    (NaN > x is False), so gradcheck returned True with a 1e6 error elsewhere."""

    class NanAndHuge(Function):
        @staticmethod
        def forward(ctx, x):
            return 3 * x

        @staticmethod
        def backward(ctx, grad):
            dx = 3 * grad
            dx[huge_at] += 1e6
            dx[nan_at] = np.nan
            return dx

    where = re.escape(str(nan_at))
    with pytest.raises(mt.GradcheckError, match=rf"position {where}: backward gives nan") as info:
        mt.gradcheck(NanAndHuge.apply, _x())
    assert "2 of 12 elements fail" in str(info.value)


class MulWrongB(Function):
    """y = a * b with db off by 1 in element 0."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        db = grad * a
        db[0] += 1.0
        return grad * b, db


def test_the_broken_input_is_named_among_several():
    rng = np.random.default_rng(2)
    a = mt.tensor(rng.standard_normal(3), requires_grad=True)
    b = mt.tensor(rng.standard_normal(3), requires_grad=True)
    with pytest.raises(mt.GradcheckError, match=r"input 1 at position \(0,\)"):
        mt.gradcheck(MulWrongB.apply, a, b)


def test_sqrt_at_zero_fails():
    """d sqrt(x)/dx is infinite at 0 and the finite difference there is NaN (sqrt(-eps))."""
    x = mt.tensor(np.array([0.0, 1.0, 4.0]), requires_grad=True)
    with (
        np.errstate(divide="ignore", invalid="ignore"),
        pytest.raises(mt.GradcheckError, match=r"position \(0,\).*not finite"),
    ):
        mt.gradcheck(lambda t: t.sqrt(), x)


def test_exp_of_nan_fails():
    x = mt.tensor(np.array([0.5, np.nan, -1.0]), requires_grad=True)
    with pytest.raises(mt.GradcheckError, match=r"position \(1,\): backward gives nan"):
        mt.gradcheck(lambda t: t.exp(), x)


def test_a_correct_op_with_large_values_passes():
    x = mt.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]) * 3, requires_grad=True)
    assert mt.gradcheck(lambda t: t.exp(), x)


@pytest.mark.parametrize("name", ["eps", "atol", "rtol"])
@pytest.mark.parametrize("value", [0.0, -1e-6, float("nan"), float("inf"), "1e-6", None, True])
def test_tolerances_are_checked(name, value):
    if name == "rtol" and value == 0.0 and not isinstance(value, bool):
        assert mt.gradcheck(lambda t: t * t, _x(), rtol=0.0)  # absolute tolerance only
        return
    with pytest.raises(ArgumentError, match=rf"gradcheck: {name} must be a finite number"):
        mt.gradcheck(lambda t: t * t, _x(), **{name: value})
