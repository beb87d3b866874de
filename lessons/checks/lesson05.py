"""Lesson 05 (attention): the checks of its exercises.

- ``check_05_1``: Exercise 1 (the gradient of a softmax temperature)
- ``check_05_2``: Exercise 2 (padding mask from lengths)
- ``check_05_3``: Exercise 3 (local causal mask)

Exercise 1 is an analytic derivative, compared at 1e-12 of its terms' size (``_analytic``): a
central-difference answer fails with a hint asking for the derivative written out. Exercises 1
and 2 watch library calls (``_shared._without_library``).

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from . import _analytic
from ._shared import _exercise, _rng, _softmax, _without_library


def _temperature_hint(mine: Any, S: np.ndarray, tau: float, dP: np.ndarray) -> str:
    """Where to look, for a wrong temperature gradient."""
    if np.ndim(mine) != 0 and np.size(mine) != 1:
        return (
            f"you return {np.shape(mine)} numbers: τ is one number that touches every score, "
            "so its gradient sums over all of them"
        )
    mine = float(np.asarray(mine).reshape(()))
    P = _softmax(S / tau)
    dZ = P * (dP - (dP * P).sum(axis=-1, keepdims=True))
    for other, hint in [
        ((dZ * S / tau**2).sum(), "the sign: does S/τ grow or shrink when τ grows?"),
        ((dZ * -S / tau).sum(), "differentiate S/τ with respect to τ once more"),
        ((P * dP * -S / tau**2).sum(), "the softmax's backward has two terms: raising one "
            "score lowers every other weight of its row (section 'The backward pass')"),
        ((dP * -S / tau**2).sum(), "dP is the gradient at the weights P, not at the scores: "
            "the softmax's backward comes first"),
    ]:  # fmt: skip
        if np.isclose(mine, other, rtol=1e-6, atol=1e-9):
            return hint
    return "go backwards from P to the scaled scores S/τ (this lesson's backward), then to τ"


def _temperature_grad(S: np.ndarray, tau: float, dP: np.ndarray) -> tuple[float, float]:
    """dL/dτ written out, and the size of what it sums (its terms' magnitudes)."""
    P = _softmax(S / tau)
    row = (dP * P).sum(axis=-1, keepdims=True)
    dZ = P * (dP - row)
    scale = (P * (np.abs(dP) + np.abs(row)) * np.abs(S)).sum() / tau**2
    return float((dZ * -S / tau**2).sum()), float(scale)


@_exercise("Exercise 1 (the gradient of a softmax temperature)")
def check_05_1(temperature_grad: Callable) -> None:
    """dL/dτ of P = softmax(S/τ), L = Σ dP ⊙ P, against the derivative written out, in float64
    at 1e-12 of the size of its terms (``_analytic``: central differences cannot reach it and
    get a hint saying so), on scores with one and with two leading axes; NumPy only."""
    rng = _rng(10)
    for shape, tau in [((3, 5), 1.0), ((2, 3, 4, 6), 0.7), ((4, 7), 2.5)]:
        S, dP = rng.standard_normal(shape) * 2, rng.standard_normal(shape)
        want, scale = _temperature_grad(S, tau, dP)
        mine = _without_library(
            temperature_grad, S, tau, dP, where="temperature_grad",
            instead="the softmax backward of this lesson and the chain rule, in NumPy",
        )  # fmt: skip
        if isinstance(mine, mt.Tensor):  # a library Tensor of one number is a number too
            mine = mine.numpy()
        if np.size(mine) == 1:
            got = _analytic.floats(mine, "dL/dτ").reshape(())
            if _analytic.exact(got, np.asarray(want), scale):
                continue
            if _analytic.near(got, np.asarray(want), scale):
                hint = _analytic.numerical_hint("dL/dτ")
                raise AssertionError(f"scores {shape}, τ = {tau}: {hint}")
        raise AssertionError(
            f"scores {shape}, τ = {tau}: dL/dτ = {want:.6g}, you give {mine!r:.60}; hint: "
            f"{_temperature_hint(mine, S, tau, dP)}"
        )


@_exercise("Exercise 2 (padding mask from lengths)")
def check_05_2(padding_mask_from_lengths: Callable) -> None:
    rng = _rng(11)
    for lengths, S in [([3, 5, 1, 4], 6), ([6, 6], 6), ([0, 2], 3)]:
        ids = np.zeros((len(lengths), S), dtype=np.int64)
        for b, n in enumerate(lengths):
            ids[b, :n] = rng.integers(4, 20, size=n)
        expected = mt.nn.padding_mask(ids, pad_id=0)
        mine = _without_library(
            padding_mask_from_lengths, lengths, S, where="padding_mask_from_lengths",
            instead="compare each position with its sentence's length, in NumPy",
        )  # fmt: skip
        mine = np.asarray(mine)
        want = (len(lengths), 1, 1, S)
        assert mine.shape == want, f"shape must be (B, 1, 1, S) = {want}, got {mine.shape}"
        assert mine.dtype == bool, f"the mask must be bool (True = may attend), got {mine.dtype}"
        assert np.array_equal(mine, expected), (
            f"lengths {lengths}: True must mark positions 0 .. length-1 of each sentence"
        )


def _future_leaks(mask: np.ndarray, T: int) -> list[tuple[int, int]]:
    """(query, key) pairs with key > query whose input changes the query's attention output."""
    rng = _rng(12)
    x = rng.standard_normal((1, 1, T, 4))

    def out(a):
        return F.scaled_dot_product_attention(mt.tensor(a), mt.tensor(a), mt.tensor(a), mask)

    base = out(x).numpy()
    leaks = []
    for j in range(T):
        x2 = x.copy()
        x2[0, 0, j] += 1.0
        changed = np.abs(out(x2).numpy() - base).max(axis=-1)[0, 0] > 1e-9  # (T,)
        leaks += [(i, j) for i in range(j) if changed[i]]
    return leaks


@_exercise("Exercise 3 (local causal mask)")
def check_05_3(local_causal_mask: Callable) -> None:
    for T, w in [(6, 1), (6, 2), (7, 3), (5, 5), (4, 9)]:
        expected = np.zeros((1, 1, T, T), dtype=bool)
        for i in range(T):
            for j in range(max(0, i - w + 1), i + 1):
                expected[0, 0, i, j] = True
        mine = np.asarray(local_causal_mask(T, w))
        assert mine.shape == (1, 1, T, T) and mine.dtype == bool, (
            "need a bool array of shape (1, 1, T, T)"
        )
        assert not _future_leaks(mine, T), f"T={T}, w={w}: the mask leaks the future"
        assert np.array_equal(mine, expected), (
            f"T={T}, w={w}: query t must see the w most recent keys, itself included"
        )
