"""Lesson 04 (LayerNorm, residual): the checks of its exercises.

- ``check_04_1``: Exercise 1 (RMSNorm)
- ``check_04_2``: Exercise 2 (LayerNorm's gain on a constant row)
- ``check_04_3``: Exercise 3 (gamma and beta gradients)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng


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
    grads = RMSNorm.backward(ctx, rng.standard_normal(x.shape))
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


@_exercise("Exercise 2 (LayerNorm's gain on a constant row)")
def check_04_2(max_gain: Callable) -> None:
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
            "hint: what is x_hat for a constant row, and what is left of dx then?"
        )


@_exercise("Exercise 3 (gamma and beta gradients)")
def check_04_3(ln_param_grads: Callable) -> None:
    rng = _rng(9)
    # rows of very different spreads: where the variance is near eps, where eps sits matters
    spread = np.array([2.0, 3e-3, 1e-2, 1.0])[None, :, None]
    x0 = rng.standard_normal((3, 4, 6)) * spread + 0.5
    g0 = rng.standard_normal((3, 4, 6))
    gt = mt.tensor(rng.uniform(0.5, 2, 6), requires_grad=True, dtype="float64")
    bt = mt.tensor(rng.standard_normal(6), requires_grad=True, dtype="float64")
    F.layer_norm(mt.tensor(x0, dtype="float64"), gt, bt).backward(g0)
    dgamma, dbeta = ln_param_grads(g0, x0)
    assert np.shape(dgamma) == (6,) and np.shape(dbeta) == (6,), (
        "hint: a parameter gradient has the parameter's shape (D,)"
    )
    assert np.allclose(dbeta, bt.grad), "dbeta is wrong; hint: beta is added to every row"
    assert np.allclose(dgamma, gt.grad), (
        "dgamma is wrong (look at the rows whose variance is close to eps); hint: gamma "
        "multiplies the normalized x -- recompute x_hat exactly as the lesson's forward does"
    )
