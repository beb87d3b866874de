"""Lesson 09 (training): the checks of its exercises.

- ``check_09_1``: Exercise 1 (the warm-up schedule)
- ``check_09_2``: Exercise 2 (the label-smoothing floor)
- ``check_09_3``: Exercise 3 (Adam's first step)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng


@_exercise("Exercise 1 (the warm-up schedule)")
def check_09_1(noam_lr: Callable) -> None:
    from minitransformer import optim

    for d_model, warmup in [(512, 4000), (64, 100), (1024, 4000)]:
        for step in [1, 2, 10, warmup - 1, warmup, warmup + 1, 5 * warmup, 100_000]:
            expected = optim.NoamSchedule.rate(step, d_model, warmup)
            mine = noam_lr(step, d_model, warmup)
            assert np.isclose(mine, expected, rtol=1e-9), (
                f"noam_lr({step}, {d_model}, {warmup}) = {mine}, expected {expected}. Hint: "
                "the formula of section 2; which branch is smaller before and after warm-up?"
            )


@_exercise("Exercise 2 (the label-smoothing floor)")
def check_09_2(smoothing_floor: Callable) -> None:
    rng = _rng(17)
    for V, eps in [(14, 0.1), (596, 0.1), (37000, 0.1), (10, 0.3), (7, 0.05), (9, 0.0)]:
        q = np.full(V, eps / V)
        q[5] += 1 - eps
        with np.errstate(divide="ignore"):
            logq = np.log(q)[None]
        logq = np.maximum(logq, -1e4)  # eps = 0: a very confident, finite row
        best = F.cross_entropy(
            mt.tensor(logq, dtype="float64"), np.array([5]), label_smoothing=eps
        ).item()
        worse = F.cross_entropy(
            mt.tensor(logq + rng.normal(0, 0.1, (1, V)), dtype="float64"),
            np.array([5]),
            label_smoothing=eps,
        ).item()
        mine = float(smoothing_floor(V, eps))
        assert np.isclose(mine, best, rtol=1e-6, atol=1e-9), (
            f"smoothing_floor({V}, {eps}) = {mine}, but the loss at p = q is {best:.6f}. "
            "Hint: the cross-entropy of q against itself has a name."
        )
        assert worse >= best - 1e-12


@_exercise("Exercise 3 (Adam's first step)")
def check_09_3(adam_first_update: Callable) -> None:
    from minitransformer import optim

    rng = _rng(18)
    for scale in (1e-7, 1e-3, 1.0, 1e4):
        g = scale * rng.normal(size=(5, 2))
        for betas in [(0.9, 0.98), (0.5, 0.9)]:
            p = mt.nn.Parameter(np.zeros((5, 2)), dtype="float64")
            o = optim.Adam([p], lr=0.02, betas=betas)
            p.grad = g.copy()
            o.step()
            assert np.allclose(adam_first_update(g, 0.02), p.numpy(), rtol=1e-7, atol=1e-12), (
                "not what Adam does on its first step. Hint: write out m, v and their bias "
                "corrections for t = 1; the betas cancel."
            )
