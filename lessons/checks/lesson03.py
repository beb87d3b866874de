"""Lesson 03 (softmax, cross-entropy): the checks of its exercises.

- ``check_03_1``: Exercise 1 (logsumexp)
- ``check_03_2``: Exercise 2 (best margin with label smoothing)
- ``check_03_3``: Exercise 3 (cross-entropy gradient)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng


@_exercise("Exercise 1 (logsumexp)")
def check_03_1(logsumexp: Callable) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # overflow/invalid warnings become errors
        try:
            rows = np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [0.0, -np.inf]])
            out = np.asarray(logsumexp(rows, axis=-1))
        except RuntimeWarning as w:
            raise AssertionError(f"NumPy warned: {w}; hint: make the largest exponent 0") from None
    assert np.allclose(out, [1000 + np.log(2), -1000 + np.log(2), 0.0]), (
        f"got {out}; hint: make the largest exponent 0, and add back what you took out"
    )
    xr = _rng(5).standard_normal((3, 4, 5))
    for ax in (0, 1, -1):
        got = np.asarray(logsumexp(xr, axis=ax))
        want = np.log(np.exp(xr).sum(axis=ax))
        assert got.shape == want.shape and np.allclose(got, want), (
            f"wrong on axis {ax} (shape {got.shape}, expected {want.shape})"
        )


def _row_losses(ms, eps, V):  # loss of rows [m, 0, ..., 0] with target 0, one per margin
    z = np.zeros((ms.size, V))
    z[:, 0] = ms
    t = np.zeros(ms.size, dtype=np.int64)
    return F.cross_entropy(mt.tensor(z), t, label_smoothing=eps, reduction="none").numpy()


@_exercise("Exercise 2 (best margin with label smoothing)")
def check_03_2(best_margin: Callable) -> None:
    for eps, V in [(0.1, 10), (0.1, 1000), (0.3, 5)]:
        ms = np.linspace(0, 20, 201)  # coarse search, then a fine one around the best
        ms = np.linspace(*ms[_row_losses(ms, eps, V).argmin()] + np.array([-0.1, 0.1]), 201)
        numeric = ms[_row_losses(ms, eps, V).argmin()]
        mine = float(best_margin(eps, V))
        assert abs(mine - numeric) < 0.01, (
            f"eps={eps}, V={V}: your margin {mine:.3f}, the loss is smallest at {numeric:.3f}; "
            "hint: when is cross-entropy against q smallest, and what ratio of probabilities "
            "does a margin m give?"
        )


@_exercise("Exercise 3 (cross-entropy gradient)")
def check_03_3(ce_grad: Callable) -> None:
    rng = _rng(6)
    for trial in range(3):
        N, V = 6, 8
        xc = rng.standard_normal((N, V)) * 2
        tc = rng.integers(0, V, N)
        tc[trial] = -100  # one padding row, marked -100 (PyTorch's default ignore id)
        tc[trial + 3] = -100 if trial == 2 else tc[trial + 3]
        xt = mt.tensor(xc, requires_grad=True, dtype="float64")
        F.cross_entropy(xt, tc, label_smoothing=0.2, ignore_index=-100).backward()
        mine = np.asarray(ce_grad(xc, tc, 0.2, -100))
        assert mine.shape == (N, V), f"the gradient has the logits' shape {(N, V)}"
        assert np.allclose(mine[trial], 0), "hint: what do ignored rows contribute to the loss?"
        kept = xt.grad[tc != -100]
        ratio = np.sum(mine[tc != -100] * kept) / np.sum(kept * kept)
        if not np.allclose(mine, xt.grad) and np.allclose(mine, ratio * xt.grad):
            raise AssertionError(
                f"right direction, wrong size (yours is {ratio:.3g} times the library's); "
                "hint: see the section 'Cross-entropy, fused': which rows does the mean count?"
            )
        assert np.allclose(mine, xt.grad), (
            "the gradient differs from the library's; hint: see the sections 'Cross-entropy, "
            "fused' and 'Label smoothing' of this lesson: which target does a smoothed row "
            "aim at?"
        )
