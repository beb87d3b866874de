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
    xr = mt.tensor(rng.standard_normal((2, 3, 5)) * 2, requires_grad=True, dtype="float64")
    gr = mt.tensor(rng.uniform(0.5, 1.5, 5), requires_grad=True, dtype="float64")
    yr = RMSNorm.apply(xr, gr).numpy()
    x = xr.numpy()
    expected = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * gr.numpy()
    assert np.allclose(yr, expected), "forward is wrong: y = gamma * x / sqrt(mean(x^2) + eps)"
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
    x0, g0 = rng.standard_normal((3, 4, 6)) * 2 + 0.5, rng.standard_normal((3, 4, 6))
    gt = mt.tensor(rng.uniform(0.5, 2, 6), requires_grad=True, dtype="float64")
    bt = mt.tensor(rng.standard_normal(6), requires_grad=True, dtype="float64")
    F.layer_norm(mt.tensor(x0, dtype="float64"), gt, bt).backward(g0)
    dgamma, dbeta = ln_param_grads(g0, x0)
    assert np.shape(dgamma) == (6,) and np.shape(dbeta) == (6,), (
        "hint: a parameter gradient has the parameter's shape (D,)"
    )
    assert np.allclose(dbeta, bt.grad), "dbeta is wrong; hint: beta is added to every row"
    assert np.allclose(dgamma, gt.grad), (
        "dgamma is wrong; hint: gamma multiplies the normalized x, not the output"
    )
