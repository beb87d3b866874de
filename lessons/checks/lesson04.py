"""Lesson 04 (LayerNorm, residual): the checks of its exercises.

- ``check_04_1``: Exercise 1 (RMSNorm)
- ``check_04_2``: Exercise 2 (LayerNorm's gain on a constant row)
- ``check_04_3``: Exercise 3 (Add & Norm backwards: dx and dW of LayerNorm(x + xW))

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from . import _analytic
from ._shared import _exercise, _rng, _without_library


@_exercise("Exercise 1 (RMSNorm)")
def check_04_1(RMSNorm: type) -> None:
    rng = _rng(7)
    # rows of very different sizes: where mean(x^2) is near eps, where eps sits matters
    scale = np.array([2.0, 1e-3, 3e-3])[None, :, None]
    xr = mt.tensor(rng.standard_normal((2, 3, 5)) * scale, requires_grad=True, dtype="float64")
    gr = mt.tensor(rng.uniform(0.5, 1.5, 5), requires_grad=True, dtype="float64")
    y, ctx = RMSNorm.run(xr, gr)
    x = xr.numpy()
    expected = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * gr.numpy()
    assert np.allclose(y.numpy(), expected), (
        "forward is wrong (look at the rows whose mean(x^2) is close to eps); hint: reread "
        "the definition of r in the exercise, bracket by bracket"
    )
    G = rng.standard_normal(x.shape)
    grads = RMSNorm.backward(ctx, G)
    assert isinstance(grads, tuple | list) and len(grads) >= 2, (
        "backward must return one gradient per input: (dx, dgamma)"
    )
    assert np.shape(grads[0]) == x.shape and np.shape(grads[1]) == (5,), (
        f"backward returned shapes {np.shape(grads[0])} and {np.shape(grads[1])}, need "
        f"{x.shape} and (5,); hint: a parameter's gradient has the parameter's shape -- gamma "
        "is shared by every row"
    )
    try:
        mt.gradcheck(RMSNorm.apply, xr, gr)
    except mt.GradcheckError as err:
        raise AssertionError(
            f"backward is wrong ({err}); hint: follow LayerNorm's derivation and drop the "
            "terms that came from the mean"
        ) from None
    r = 1 / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)  # the analytic derivative, float64
    g_hat, x_hat = G * gr.numpy(), x * r
    _analytic.assert_derivative(
        grads[0], r * (g_hat - x_hat * (g_hat * x_hat).mean(-1, keepdims=True)), "dx"
    )
    _analytic.assert_derivative(grads[1], (G * x_hat).reshape(-1, 5).sum(0), "dgamma")


def _gain_hint(mine: float, eps: float) -> str:
    """Where to look, for a gain answer that is off at this eps."""
    for value, hint in [
        (1.0, "the gradient does not pass unchanged: every term of dx carries the factor r; "
              "how large is r when the row's variance is (almost) 0?"),
        (0.0, "x_hat ≈ 0 removes one term of dx, not all of them"),
        (np.sqrt(eps), "upside down: a nearly constant row is scaled up, not down"),
        (1 / eps, "look again at how r is defined (section 'The math with shapes')"),
    ]:  # fmt: skip
        if np.isclose(mine, value, rtol=0.01, atol=1e-12):
            return hint
    return "what is x_hat for a constant row, and what is left of dx then?"


@_exercise("Exercise 2 (LayerNorm's gain on a constant row)")
def check_04_2(max_gain: Callable) -> None:
    """||dx|| / ||g|| of the library's LayerNorm (γ = 1) on a row that varies by 1e-7, for an
    upstream g of mean 0, at three eps."""
    rng = _rng(8)
    for eps in [1e-5, 1e-3, 1e-1]:
        row = mt.tensor(
            (2.0 + 1e-7 * rng.standard_normal(16))[None], requires_grad=True, dtype="float64"
        )
        g = rng.standard_normal((1, 16))
        g -= g.mean()
        F.layer_norm(row, mt.tensor(np.ones(16)), mt.tensor(np.zeros(16)), eps=eps).backward(g)
        gain = np.linalg.norm(row.grad) / np.linalg.norm(g)
        mine = float(max_gain(eps))
        assert abs(mine / gain - 1) < 0.01, (
            f"eps={eps}: measured gain {gain:.4g}, your answer {mine:.4g}; "
            f"hint: {_gain_hint(mine, eps)}"
        )


def _add_norm_reference(x: np.ndarray, W: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, ...]:
    """(dx, dW, the gradient reaching z = x + xW) of LayerNorm(x + xW), by the library."""
    xt = mt.tensor(x, requires_grad=True, dtype="float64")
    Wt = mt.tensor(W, requires_grad=True, dtype="float64")
    z = (xt + xt @ Wt).retain_grad()
    D = x.shape[-1]
    F.layer_norm(z, mt.tensor(np.ones(D)), mt.tensor(np.zeros(D))).backward(g)
    return np.asarray(xt.grad), np.asarray(Wt.grad), np.asarray(z.grad)


def _add_norm_hint(dx: np.ndarray, dW: np.ndarray, x: np.ndarray, W: np.ndarray,
                   g: np.ndarray, want: tuple[np.ndarray, ...]) -> str:  # fmt: skip
    """What is wrong with a right-shaped (dx, dW), in words; '' when both are right."""
    want_dx, want_dW, dz = want
    rows = x.reshape(-1, x.shape[-1])
    if not np.allclose(dx, want_dx):
        for other, hint in [
            (dz @ W.T, "x reaches y along two paths, through xW and past it (the residual): "
                       "add both"),
            (g + g @ W.T, "the gradient that reaches x + xW is not g: it goes through "
                          "LayerNorm's backward first (my_layer_norm_backward)"),
            (dz + dz @ W, "the backward of x @ W: lesson 02, 'The math of matmul backward'"),
        ]:  # fmt: skip
            if np.allclose(dx, other):
                return f"dx: {hint}"
        return "dx: go backwards one step at a time, LayerNorm first, then the sum x + xW"
    if np.allclose(dW, rows.T @ g.reshape(rows.shape)):
        return "dW: W sees the gradient after LayerNorm's backward, not g"
    if not np.allclose(dW, want_dW):
        return "dW: every row of x meets the same W, so its gradient sums over all rows (lesson 02)"
    return ""


@_exercise("Exercise 3 (Add & Norm backwards)")
def check_04_3(add_norm_backward: Callable) -> None:
    """(dx, dW) of y = LayerNorm(x + xW) (γ = 1, β = 0, eps = 1e-5) against the library's
    autograd, with NumPy only; rows of very different spreads."""
    rng = _rng(9)
    B, T, D = 3, 4, 6
    spread = np.array([2.0, 3e-3, 1e-2, 1.0])[None, :, None]  # a row with variance near eps
    x = rng.standard_normal((B, T, D)) * spread + 0.5
    W = rng.standard_normal((D, D)) / np.sqrt(D)
    g = rng.standard_normal((B, T, D))
    got = _without_library(
        add_norm_backward, x, W, g, where="add_norm_backward",
        instead="NumPy, and this notebook's my_layer_norm / my_layer_norm_backward if you like",
    )  # fmt: skip
    assert isinstance(got, tuple | list) and len(got) == 2, (
        f"return the pair (dx, dW), got {type(got).__name__}"
    )
    dx, dW = (np.asarray(a, dtype=np.float64) for a in got)
    assert dx.shape == x.shape and dW.shape == W.shape, (
        f"dx has shape {dx.shape} and dW {dW.shape}; x has {x.shape} and W {W.shape}: a "
        "gradient has its input's shape"
    )
    want = _add_norm_reference(x, W, g)
    hint = _add_norm_hint(dx, dW, x, W, g, want)
    assert not hint, f"your gradients differ from the library's autograd; hint: {hint}"
    # in float64, closer than a numerical derivative gets
    _analytic.assert_derivative(dx, want[0], "dx")
    _analytic.assert_derivative(dW, want[1], "dW")
