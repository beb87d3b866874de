"""Lesson 01 (autograd): the checks of its exercises.

- ``check_01_1``: Exercise 1 (Value.tanh, negation and subtraction)
- ``check_01_2``: Exercise 2 (Sigmoid)
- ``check_01_3``: Exercise 3 (best one-sided eps in float32)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable

import numpy as np

import minitransformer as mt

from . import _analytic
from ._shared import _LIBRARY, _exercise, _rng, _without_library


@_exercise("Exercise 1 (Value.tanh, negation and subtraction)")
def check_01_1(Value: type) -> None:
    """``Value`` must have the learner's tanh, __neg__ and __sub__ attached."""

    def f(p, q):
        return math.tanh(math.tanh(p - q) * p - 3 * q)

    for a0, b0 in [(0.3, -0.2), (1.5, 0.4), (-2.0, 1.0)]:
        a, b = Value(a0), Value(b0)
        out = ((a - b).tanh() * a - b * 3.0).tanh()
        out.backward()
        h = 1e-6
        da = (f(a0 + h, b0) - f(a0 - h, b0)) / (2 * h)
        db = (f(a0, b0 + h) - f(a0, b0 - h)) / (2 * h)
        assert math.isclose(out.data, f(a0, b0), rel_tol=1e-12), (
            "the forward value is wrong; hint: does a - b compute a minus b?"
        )
        assert abs(a.grad - da) < 1e-6 and abs(b.grad - db) < 1e-6, (
            f"gradients ({a.grad:.6f}, {b.grad:.6f}) != finite differences ({da:.6f}, {db:.6f}); "
            "hint: differentiate tanh by hand once, and ask what d(a - b)/db must be"
        )
    x = Value(0.7)
    y = -x
    y.backward()
    assert y.data == -0.7 and x.grad == -1.0, "hint: -x must have value -x and derivative -1"


@_exercise("Exercise 2 (Sigmoid)")
def check_01_2(Sigmoid: type) -> None:
    """Forward against 1/(1+e^-x), backward by gradcheck (the hint names the mistake: σ
    itself, a sign, or else where to look) and then against σ(1-σ) in float64 at 1e-12 (a
    numerical derivative cannot get there), no overflow at ±1000, written without the
    library's sigmoid."""
    rng = _rng(1)
    xc = mt.tensor(rng.standard_normal((4, 3)) * 3, requires_grad=True, dtype="float64")
    for method in ("forward", "backward"):
        code = getattr(getattr(Sigmoid, method, None), "__code__", None)
        assert code is None or not code.co_filename.startswith(_LIBRARY), (
            f"your Sigmoid's {method} is the library's (your class subclasses the library's "
            "op); hint: write forward and backward yourself, under class Sigmoid(Function)"
        )
    y = _without_library(
        lambda: Sigmoid.apply(xc),
        where="your Sigmoid",
        instead="compute σ with the array functions of ctx.xp (NumPy's exp, where, ...)",
    )
    ref = 1 / (1 + np.exp(-xc.numpy()))
    assert np.allclose(y.numpy(), ref), "forward does not match 1/(1+e^-x)"
    _, ctx = Sigmoid.run(xc)
    g = _without_library(
        lambda: Sigmoid.backward(ctx, np.ones(ref.shape)), where="your Sigmoid.backward",
        instead="write dσ/dx with the arrays forward saved",
    )  # fmt: skip
    g = np.asarray(g[0] if isinstance(g, tuple | list) else g, dtype=np.float64)
    try:
        mt.gradcheck(Sigmoid.apply, xc)
    except mt.GradcheckError as err:
        if g.shape == ref.shape and np.allclose(g, ref):
            hint = (
                "your backward returns σ itself (softplus's derivative, the section 'A custom "
                "Function'): differentiate σ once more and write the result in σ"
            )
        elif g.shape == ref.shape and np.allclose(g, -ref * (1 - ref)):
            hint = "check the sign: σ rises everywhere, so its derivative is positive"
        else:
            hint = "differentiate σ by hand and write the derivative in terms of the output"
        raise AssertionError(f"backward is wrong: {err}; hint: {hint}") from None
    # in float64, beyond what finite differences reach
    _analytic.assert_derivative(g, ref * (1 - ref), "your backward's dσ/dx")
    extremes = np.array([-1000.0, 0.0, 1000.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning becomes an error
        try:
            big = Sigmoid.apply(mt.tensor(extremes)).numpy()
        except RuntimeWarning as w:
            where = (
                "np.where(cond, a, b) receives a and b already computed for EVERY element "
                "(Python evaluates the arguments first), so the branch it discards still "
                "overflows; every exponent you compute must be safe, not only the ones kept"
            )
            sign = "which sign of the exponent can never overflow?"
            source = _source_of(Sigmoid.forward)
            hint = where if "where" in source else sign
            if not source:  # the source cannot be read: give both
                hint = f"{sign} And if you use np.where: {where}"
            raise AssertionError(f"NumPy warned: {w}; hint: {hint}") from None
    assert np.allclose(big, [0.0, 0.5, 1.0]), f"sigmoid(-1000, 0, 1000) gave {big}"


def _source_of(fn: Callable) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):  # defined where no source is kept
        return ""


def _fd_error_f32(eps: float, x0: float, central: bool = True) -> float:
    """|finite difference of tanh at x0 - exact derivative|, computed in float32."""
    x, e = np.float32(x0), np.float32(eps)
    exact = 1 - np.tanh(np.float64(x)) ** 2
    if central:
        d = (np.tanh(x + e) - np.tanh(x - e)) / (np.float32(2) * e)
    else:
        d = (np.tanh(x + e) - np.tanh(x)) / e
    return max(abs(float(d) - exact), 1e-17)


@_exercise("Exercise 3 (best one-sided eps in float32)")
def check_01_3(best_eps_float32: Callable[[], float]) -> None:
    eps_mine = float(best_eps_float32())
    points = np.linspace(0.2, 1.5, 25)  # average over points: single points have lucky roundings

    def mean_error(e):
        return np.mean([_fd_error_f32(e, x0, central=False) for x0 in points])

    err_best = min(mean_error(e) for e in np.logspace(-6, -0.5, 60))
    err_mine = mean_error(eps_mine)
    print(f"your eps = {eps_mine:.2e}: mean error {err_mine:.2e}; best on a grid: {err_best:.2e}")
    assert 1e-6 < eps_mine < 1e-1 and err_mine < 3 * err_best, (
        "your eps is far from the bottom of the one-sided V; hint: write the one-sided "
        "difference's two error terms (its truncation term is not the central one), set the "
        "derivative in eps to zero, and use float32's unit roundoff"
    )
