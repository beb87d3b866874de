"""Lesson 15 (attention at length): the checks of its exercises.

- ``check_15_1``: Exercise 1 (merging two online-softmax states)
- ``check_15_2``: Exercise 2 (a block's probabilities from the row log-sum-exp)

A state (m, l, acc) of a set of keys J, per query row: any m (a shift, usually the max of
the row's scores over J), l = sum_J exp(s_j - m), acc = sum_J exp(s_j - m) v_j. The check
therefore accepts any shift: it tests what every valid state satisfies, m + log l =
logsumexp over J and acc / l = the attention output over J, and l = 0, acc = 0 for a set
whose keys are all masked. Its inputs include scores in the thousands (exp overflows above
about 709 in float64), and rows whose first blocks are all masked followed by scores near
-1000 (exp underflows to 0 below about -745): a merge that lets a state with no key
contribute a finite shift (m = 0 instead of -inf) loses every key of such a row.

Answers may come back as NumPy arrays, lists or minitransformer Tensors (``_array``).

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._shared import _exercise, _rng, _softmax


def _array(x, what: str) -> np.ndarray:
    """x as a float array: NumPy, a list, or a minitransformer Tensor (its ``.numpy()``)."""
    if hasattr(x, "numpy") and callable(x.numpy):  # a library Tensor (or a torch tensor)
        x = x.numpy()
    try:
        a = np.asarray(x)
    except Exception as err:  # a ragged list, an object that is not an array
        raise AssertionError(
            f"{what}: expected an array of numbers, got {type(x).__name__}"
        ) from err
    assert a.dtype.kind in "fiu", (
        f"{what}: expected an array of numbers, got {type(x).__name__} of dtype {a.dtype}"
    )
    return a if a.dtype.kind == "f" else a.astype(np.float64)


def _state(s: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, l, acc) of scores s (T, b) (-inf = masked) and values v (b, d_v)."""
    m = s.max(axis=-1, keepdims=True)
    shift = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - shift)
    return m, p.sum(axis=-1, keepdims=True), p @ v


def _as_state(result, T: int, d_v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    assert isinstance(result, tuple | list) and len(result) == 3, (
        "merge must return a tuple (m, l, acc), like the states it is given"
    )
    m, l, acc = (_array(x, f"merge's {n}") for x, n in zip(result, ("m", "l", "acc"), strict=True))
    assert m.size == T and l.size == T and acc.shape == (T, d_v), (
        f"m and l need one number per query row ({T}, 1), acc the shape ({T}, {d_v}); got "
        f"{m.shape}, {l.shape}, {acc.shape}"
    )
    return m.reshape(T, 1), l.reshape(T, 1), acc


def _agrees(state, s: np.ndarray, v: np.ndarray, rtol: float, what: str, prefix=None) -> None:
    """state is a valid (m, l, acc) of the scores s (T, S) and values v (S, d_v); ``prefix``
    (T,) bool marks the rows whose first block had no key."""
    if any(x.dtype.itemsize < 8 for x in state):  # a float32 answer: float32's tolerance
        rtol = max(rtol, 1e-4)
    m, l, acc = (x.astype(np.float64) for x in state)
    finite = np.isfinite(s).any(axis=-1, keepdims=True)  # rows with at least one key
    assert not np.isnan(m).any() and not np.isnan(l).any() and not np.isnan(acc).any(), (
        f"{what}: NaN in the merged state; hint: a state whose keys are all masked has "
        "m = -inf, l = 0, acc = 0 (look at what exp gives for -inf - (-inf))"
    )
    assert np.all(l[~finite] == 0) and np.all(acc[~finite[:, 0]] == 0), (
        f"{what}: a row that may attend no key must keep l = 0 and acc = 0"
    )
    rows = finite[:, 0]
    assert np.all(np.isfinite(l[rows])) and np.all(np.isfinite(acc[rows])), (
        f"{what}: inf in l or acc (scores up to {np.abs(s[np.isfinite(s)]).max():.0f}); "
        "hint: exp of a large positive number overflows; which shift keeps every exponent <= 0?"
    )
    lost = rows & (l[:, 0] <= 0)  # rows with keys whose every weight became 0
    if lost.any():
        low = s[lost][np.isfinite(s[lost])].max()
        where = f"{what}: rows {np.flatnonzero(lost).tolist()} have keys but l = 0"
        assert prefix is None or not np.all(prefix[lost]), (
            f"{where}. Their first blocks were all masked and their scores are near {low:.0f}, "
            "where exp underflows to 0. Hint: look at the state your merge returns for two "
            "states with no key (the state of no keys is m = -inf, l = 0, acc = 0): its m "
            "still sets the shift when the real scores arrive"
        )
        raise AssertionError(
            f"{where} (scores near {low:.0f}: exp underflows to 0 below about -745). Hint: "
            "which shift keeps the largest exponent of each row at 0?"
        )
    sm = s.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):  # log 0 = -inf for the rows with no key
        lse = sm + np.log(np.exp(s - np.where(np.isfinite(sm), sm, 0)).sum(-1, keepdims=True))
        mine_lse = m + np.log(l)
    assert np.allclose(mine_lse[rows], lse[rows], rtol=rtol, atol=rtol), (
        f"{what}: l and m do not give the softmax's normaliser of the union; hint: the two "
        "states' sums are relative to different shifts"
    )
    out = _softmax(s[rows]) @ v
    assert np.allclose(acc[rows] / l[rows], out, rtol=rtol, atol=rtol), (
        f"{what}: acc / l is not the attention output over both blocks; hint: acc is relative "
        "to the same shift as l"
    )


@_exercise("Exercise 1 (merging two online-softmax states)")
def check_15_1(merge: Callable) -> None:
    rng = _rng(150)
    T, d_v, cuts = 5, 3, (0, 4, 9, 10, 16)
    # (scale, offset): scores scale * N(0, 1) + offset
    for (scale, offset), dtype, rtol in (((2.0, 0.0), np.float64, 1e-9),
                                         ((1000.0, 0.0), np.float64, 1e-9),
                                         ((2.0, -1000.0), np.float64, 1e-9),
                                         ((2.0, 0.0), np.float32, 1e-4)):  # fmt: skip
        s = rng.standard_normal((T, cuts[-1])) * scale + offset
        s[1, :9] = -np.inf  # row 1: the first two blocks all masked
        s[3, :] = -np.inf  # row 3: every key masked
        v = rng.standard_normal((cuts[-1], d_v))
        blocks = [
            tuple(x.astype(dtype) for x in _state(s[:, a:b], v[a:b]))
            for a, b in zip(cuts, cuts[1:], strict=False)
        ]
        kind = f"{np.dtype(dtype)}" + (f", scores near {offset:.0f}" if offset else "")
        what = f"blocks of {cuts[1] - cuts[0]} and {cuts[2] - cuts[1]} keys ({kind})"
        _agrees(_as_state(merge(*blocks[:2]), T, d_v), s[:, : cuts[2]], v[: cuts[2]], rtol, what)
        prefix = ~np.isfinite(s[:, : cuts[1]]).any(axis=-1)  # rows whose first block is empty
        for order, name in ((1, "left to right"), (-1, "right to left")):
            state = blocks[::order][0]  # left to right, as the forward pass streams them
            for blk in blocks[::order][1:]:
                state = merge(state, blk) if order == 1 else merge(blk, state)
                state = _as_state(state, T, d_v)  # m and l as (T, 1), whatever came back
            _agrees(state, s, v, rtol, f"four blocks merged {name} ({kind})", prefix)
    empty = (np.full((T, 1), -np.inf), np.zeros((T, 1)), np.zeros((T, d_v)))
    both = _as_state(merge(empty, empty), T, d_v)
    _agrees(both, np.full((T, 2), -np.inf), v[:2], 1e-9, "two states with no key")


def _queries_keys(rng, T: int, S: int, d_k: int, scale: float, offset: float, dtype):
    """q (T, d_k), k (S, d_k) whose scaled scores are scale * N(0, 1)-ish + offset: the last
    coordinate of q and k carries the offset (10 * q_last / sqrt(d_k) = offset)."""
    q = rng.standard_normal((T, d_k)) * scale
    k = rng.standard_normal((S, d_k))
    if offset:
        q[:, -1], k[:, -1] = offset * np.sqrt(d_k) / 10.0, 10.0
    return q.astype(dtype), k.astype(dtype)


@_exercise("Exercise 2 (a block's probabilities from the row log-sum-exp)")
def check_15_2(block_probs: Callable) -> None:
    rng = _rng(151)
    T, S, d_k = 4, 11, 8
    for (scale, offset), dtype, rtol in (((1.0, 0.0), np.float64, 1e-9),
                                         ((1000.0, 0.0), np.float64, 1e-9),
                                         ((1.0, -1000.0), np.float64, 1e-9),
                                         ((1.0, 0.0), np.float32, 1e-4)):  # fmt: skip
        q, k = _queries_keys(rng, T, S, d_k, scale, offset, dtype)
        s = q.astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(d_k)
        sm = s.max(axis=-1, keepdims=True)
        lse = sm + np.log(np.exp(s - sm).sum(axis=-1, keepdims=True))  # (T, 1)
        P = _softmax(s)
        for a, b in ((0, 3), (3, 7), (7, 11), (0, 11)):
            mine = _array(block_probs(q, k[a:b], lse.astype(dtype)), f"keys {a}..{b - 1}")
            tol = max(rtol, 1e-4) if mine.dtype.itemsize < 8 else rtol  # a float32 answer
            mine = mine.astype(np.float64)
            assert mine.shape == (T, b - a), (
                f"keys {a}..{b - 1}: need P_j of shape (T, b) = {(T, b - a)}, got {mine.shape}"
            )
            big = "overflows to inf above" if s.max() > 0 else "underflows to 0 below"
            assert np.all(np.isfinite(mine)), (
                f"keys {a}..{b - 1}, scores from {s.min():.0f} to {s.max():.0f}: inf or NaN; "
                f"hint: exp {big} about {709 if s.max() > 0 else -745} (float64); lesson 03's "
                "stable softmax and section 2 show which exponents stay safe"
            )
            assert np.allclose(mine, P[:, a:b], rtol=tol, atol=tol), (
                f"keys {a}..{b - 1} ({np.dtype(dtype)}): not the columns of the whole row's "
                "softmax; hint: the scores are scaled as in the forward pass, and the "
                "normaliser is the whole row's, not the block's"
            )
