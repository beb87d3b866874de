"""Lesson 05 (attention): the checks of its exercises.

- ``check_05_1``: Exercise 1 (softmax backward)
- ``check_05_2``: Exercise 2 (padding mask from lengths)
- ``check_05_3``: Exercise 3 (local causal mask)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng, _softmax


@_exercise("Exercise 1 (softmax backward)")
def check_05_1(softmax_backward: Callable) -> None:
    rng = _rng(10)
    s, dP = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    numeric = np.zeros_like(s)
    for idx in np.ndindex(s.shape):
        e = np.zeros_like(s)
        e[idx] = 1e-6
        numeric[idx] = ((_softmax(s + e) * dP).sum() - (_softmax(s - e) * dP).sum()) / 2e-6
    mine = np.asarray(softmax_backward(_softmax(s), dP))
    assert mine.shape == s.shape, (
        f"dS must have the shape of the scores {s.shape}, got {mine.shape}"
    )
    assert np.allclose(mine, numeric, atol=1e-6), (
        "dS differs from finite differences; hint: every score moves every probability of its "
        "row; the row's probabilities sum to 1"
    )


@_exercise("Exercise 2 (padding mask from lengths)")
def check_05_2(padding_mask_from_lengths: Callable) -> None:
    rng = _rng(11)
    for lengths, S in [([3, 5, 1, 4], 6), ([6, 6], 6), ([0, 2], 3)]:
        ids = np.zeros((len(lengths), S), dtype=np.int64)
        for b, n in enumerate(lengths):
            ids[b, :n] = rng.integers(4, 20, size=n)
        expected = mt.nn.padding_mask(ids, pad_id=0)
        mine = np.asarray(padding_mask_from_lengths(lengths, S))
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
