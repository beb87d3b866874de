"""Lesson 20 (below n²): the checks of its exercises.

- ``check_20_1``: Exercise 1 (the keys one query of strided attention reads)
- ``check_20_2``: Exercise 2 (causal linear attention without a (T, T) array)
- ``check_20_3``: Exercise 3 (the crossover length from counted multiply-adds)

Exercise 1's answer ``strided_keys(p, S, stride, causal)`` is the sorted list of the key
positions j (0 <= j < S) that the query at position p reads in the merged strided pattern the
library's ``strided_attention`` computes: |p - j| < stride, or (p - j) a multiple of stride;
causal, only j <= p. Cases at both ends of the sequence, stride 1, a stride wider than the
sequence. Any flat sequence of whole numbers passes (a list, a tuple, a range, an array, a
Tensor, NumPy integers); a set (no order), a mask over the keys and a (T, S) array are refused
with their own hint. It must be index arithmetic of the learner's own: a call into the
library or into the lesson's figure helpers (``figures.sparse_patterns.reads``) fails. Each
usual slip gets its own hint: duplicates, unsorted, positions outside the sequence, offsets
for positions, causal ignored or applied when not asked or on the wrong side, columns counted
from 0 instead of from p, the band or the columns missing, the columns on one side, a band
one short, the query's own position left out; anything else names the missing and extra keys.

Exercise 2's answer ``causal_linear_attention(fq, fk, v)`` gets the features fq = phi(q),
fk = phi(k) (T, d), positive, and the values v (T, d_v), and must return out (T, d_v) with
out_i = fq_i^T (sum_{j<=i} fk_j v_j^T) / (fq_i . sum_{j<=i} fk_j). Compared with that formula
written naively through a (T, T) matrix, in float64 (and float32, at float32's tolerance).
Then, at T = 4,096, the answer must not allocate anything like a (T, T) array (tracemalloc's
peak; a (T, T) array of bools is 16 MiB, the prefix sums need well under 1); it must leave its
three input arrays as they were, and it must not call the library.

Exercise 3's answer ``crossover_length(d, window, overhead)`` is the smallest T >= 1 at which
overhead * 2 T (2 window + 1) d < 2 T^2 d; compared with a search over T, with overheads at
which the two counts are equal at a whole T (strictly less starts one later).

Answers may come back as NumPy arrays, lists, numbers or minitransformer Tensors.
See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ._shared import _array, _exercise, _rng, _whole_number, _without_library

# ------------------------------------------------------------------ exercise 1
_FIGURES = str(Path(__file__).resolve().parent.parent / "figures")  # the diagram's helpers


def _strided(
    p: int,
    S: int,
    s: int,
    causal: bool,
    *,
    band: int | None = None,
    columns: str = "both",
    anchor: int | None = None,
    future: bool = False,
) -> set[int]:
    """The keys the query at position p reads in the merged strided pattern: |p - j| < s or
    (p - j) a multiple of s, 0 <= j < S, causal: j <= p. The keywords make the usual slips:
    ``band`` a band of |p - j| < band (0: none), ``columns`` "both", "past", "none" or
    "only" (no band), ``anchor`` the position the columns count from (p unless given),
    ``future`` the causal filter on the wrong side."""
    band = s if band is None else band
    anchor = p if anchor is None else anchor
    keys = set()
    for j in range(S):
        near = abs(p - j) < band and columns != "only"
        column = (anchor - j) % s == 0 and columns != "none"
        if columns == "past":
            column = column and j <= p
        if near or column:
            keys.add(j)
    if causal:
        keys = {j for j in keys if (j >= p if future else j <= p)}
    return keys


def _keys_hint(got: list[int], p: int, S: int, s: int, causal: bool) -> str:
    """Where a wrong key set went wrong, from the usual slips (got: whole numbers)."""
    want = _strided(p, S, s, causal)
    mine = set(got)
    if mine == want:
        if len(got) != len(mine):
            return (
                f"position(s) {sorted(j for j in mine if got.count(j) > 1)} appear more than "
                "once: the band and the columns overlap (p itself is both: p - p = 0 is a "
                "multiple of s); list each key once"
            )
        return "the right keys, but not in order: return them sorted, smallest position first"
    inside = {j for j in mine if 0 <= j < S}
    if inside == want:
        return (
            f"positions {sorted(mine - inside)} are outside the sequence (keys sit at 0 ... "
            f"S - 1 = {S - 1}): keep only the band and the columns that fall inside it"
        )
    if mine == {j - p for j in want}:
        return "these are offsets from the query (j - p); return the key positions j themselves"
    slips = [
        (_strided(p, S, s, False) if causal else None, "with causal=True the query reads no "
         "key after its own position p"),
        (_strided(p, S, s, True) if not causal else None, "with causal=False the query reads "
         "the keys after it too: the band and the columns go both ways"),
        (_strided(p, S, s, causal, future=True), "the causal pattern keeps the keys BEFORE the "
         "query (the past, j <= p), not after it"),
        (_strided(p, S, s, causal, anchor=0), "the columns are every s-th position counted "
         "from the query, (p - j) a multiple of s, not the positions j that are multiples of s"),
        (_strided(p, S, s, causal, columns="none"), "only the band: the strided pattern also "
         "reads every s-th key, the columns (p - j) a multiple of s, as far as the sequence goes"),
        (_strided(p, S, s, causal, columns="only"), "only the columns: the strided pattern also "
         "reads the band |p - j| < s around the query"),
        (_strided(p, S, s, causal, columns="past"), "the columns go both ways when not causal: "
         "p + s, p + 2s, ... as well as p - s, p - 2s, ..."),
        (_strided(p, S, s, causal, band=s - 1) if s > 1 else None, "the band reaches s - 1 "
         "positions on each side (|p - j| < s): look at its edges"),
        (want - {p}, "the query reads its own position p too (the band holds it)"),
    ]  # fmt: skip
    for slip, hint in slips:
        if slip is not None and mine == slip:
            return hint
    missing, extra = sorted(want - mine), sorted(mine - want)
    ends = " (look at the ends: 0 and S - 1 may be columns, and range() stops before its stop)"
    return (
        f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}"
        + (f", and {extra[:8]} should not be there" if extra else "")
        + (ends if {0, S - 1} & set(missing) else "")
    )


def _positions(got: object, where: str, want: list[int], S: int) -> list[int]:
    """The answer as a list of whole numbers, or an AssertionError with what to return."""
    if isinstance(got, set | frozenset):
        raise AssertionError(f"{where}: a set has no order; return the positions as a sorted list")
    a = _array(got, where)
    marks = np.zeros(S, int)
    marks[want] = 1
    assert a.dtype.kind != "b" and not (a.shape == (S,) and np.array_equal(a, marks)), (
        f"{where}: you return a mask over the S keys; return the key positions the query "
        "reads (np.flatnonzero turns a mask into them)"
    )
    assert a.ndim == 1, (
        f"{where}: expected a flat list of key positions (one query's keys), got an array of "
        f"shape {a.shape}"
    )
    whole = np.isfinite(a) & (a == np.round(a))
    assert whole.all(), (
        f"{where}: positions are whole numbers; yours include {a[~whole][:3].tolist()}"
    )
    return [int(j) for j in a]


@_exercise("Exercise 1 (the keys one query of strided attention reads)")
def check_20_1(strided_keys: Callable) -> None:
    """``strided_keys(p, S, stride, causal)`` -> the sorted positions j the query at p reads."""
    cases = [(9, 16, 4, False), (9, 16, 4, True), (12, 16, 4, True), (3, 16, 4, False),
             (0, 10, 3, False), (0, 10, 3, True), (15, 16, 4, True), (5, 6, 1, False),
             (5, 30, 7, False), (29, 30, 7, True), (3, 5, 20, False), (4, 5, 2, True),
             (50, 100, 10, False), (63, 100, 10, True)]  # fmt: skip
    for p, S, stride, causal in cases:
        where = f"strided_keys(p={p}, S={S}, stride={stride}, causal={causal})"
        got = _without_library(
            strided_keys, p, S, stride, causal, where=where, also=(_FIGURES,),
            instead="the band and the columns by index arithmetic, in NumPy or plain Python",
        )  # fmt: skip
        want = sorted(_strided(p, S, stride, causal))
        keys = _positions(got, where, want, S)
        if keys != want:
            raise AssertionError(f"{where}: {_keys_hint(keys, p, S, stride, causal)}")


# ------------------------------------------------------------------ exercise 2
def _phi(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _naive(fq: np.ndarray, fk: np.ndarray, v: np.ndarray, causal: bool = True) -> np.ndarray:
    """The formula through the (T, T) matrix A = fq fk^T, lower triangle when causal."""
    A = fq.astype(np.float64) @ fk.astype(np.float64).T
    if causal:
        A = np.tril(A)
    return (A @ v.astype(np.float64)) / A.sum(axis=1, keepdims=True)


def _linear_hint(got, fq, fk, v) -> str:
    """What a wrong causal linear attention computed, from the usual slips."""
    A = np.tril(fq @ fk.T)
    exclusive = np.tril(fq @ fk.T, k=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        slips = [
            (_naive(fq, fk, v, causal=False), "every query reads every key in your answer: "
             "causal means query i reads only the keys j <= i"),
            ((exclusive @ v) / exclusive.sum(axis=1, keepdims=True), "query i reads its own "
             "key too (j <= i, not j < i)"),
            (A @ v, "the output is a weighted AVERAGE of the values: look at the denominator"),
            ((A @ v) / (fq @ fk.sum(axis=0))[:, None], "the denominator, like the numerator, "
             "sums only the keys query i may read"),
            (_naive(_phi(fq), _phi(fk), v), "fq and fk are already the features phi(q) and "
             "phi(k): apply no feature map"),
        ]  # fmt: skip
    for slip, hint in slips:
        if np.allclose(got, slip, rtol=1e-6, atol=1e-9, equal_nan=True):
            return hint
    return (
        "not the naive formula's output; compare row 0 (it reads only key 0, so out_0 = v_0) "
        "and row 1 with yours, then look at the running sums"
    )


def _unchanged(inputs: dict[str, np.ndarray], copies: dict[str, np.ndarray], where: str) -> None:
    for name, x in inputs.items():
        assert np.array_equal(x, copies[name]), (
            f"{where} changed its input {name} in place (an `out=` argument, `+=` on an input, "
            "or a view of it written to): the caller's arrays must stay as they were"
        )


def _peak_bytes(fn: Callable, *args) -> tuple[object, int]:
    """(fn(*args), the peak bytes NumPy allocated while it ran, by tracemalloc)."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn(*args)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return result, peak


@_exercise("Exercise 2 (causal linear attention without a (T, T) array)")
def check_20_2(causal_linear_attention: Callable) -> None:
    """``causal_linear_attention(fq, fk, v)``: fq, fk (T, d) features, v (T, d_v) -> (T, d_v)."""
    rng = _rng(20)
    for T, d, d_v, dtype in ((7, 3, 2, np.float64), (12, 5, 4, np.float64),
                             (1, 2, 3, np.float64), (10, 4, 4, np.float32)):  # fmt: skip
        fq, fk = (_phi(rng.standard_normal((T, d)) * 1.5).astype(dtype) for _ in range(2))
        v = rng.standard_normal((T, d_v)).astype(dtype)
        inputs = {"fq": fq, "fk": fk, "v": v}
        copies = {name: x.copy() for name, x in inputs.items()}
        where = f"causal_linear_attention (T={T}, d={d}, d_v={d_v}, {np.dtype(dtype)})"
        got = _without_library(
            causal_linear_attention, fq, fk, v, where=where,
            instead="running sums over the positions, in NumPy",
        )  # fmt: skip
        _unchanged(inputs, copies, where)
        got = _array(got, where)
        assert got.shape == (T, d_v), (
            f"{where}: expected out of shape (T, d_v) = {(T, d_v)}, got {got.shape}"
        )
        tol = 1e-4 if got.dtype.itemsize < 8 or dtype == np.float32 else 1e-10
        f64 = [x.astype(np.float64) for x in (fq, fk, v)]
        want = _naive(*f64)
        if not np.allclose(got.astype(np.float64), want, rtol=tol, atol=tol):
            raise AssertionError(f"{where}: {_linear_hint(got.astype(np.float64), *f64)}")
    # the same at a length where a (T, T) array would be large: the prefix-sum form needs none
    T, d, d_v = 4096, 4, 4
    fq, fk = (_phi(rng.standard_normal((T, d))) for _ in range(2))
    v = rng.standard_normal((T, d_v))
    copies = {"fq": fq.copy(), "fk": fk.copy(), "v": v.copy()}
    got, peak = _peak_bytes(causal_linear_attention, fq, fk, v)
    where = f"causal_linear_attention at T = {T} (d = {d}, d_v = {d_v})"
    _unchanged({"fq": fq, "fk": fk, "v": v}, copies, where)
    square = T * T  # bytes of a (T, T) array of bools; float64 is 8 times more
    assert peak < square / 4, (
        f"{where} allocated up to {peak / 2**20:.1f} MiB at once, as much as a (T, T) array "
        f"({square / 2**20:.0f} MiB as bools, {8 * square / 2**20:.0f} MiB in float64): the "
        "causal sums need only what the positions before i added up, not a score per pair"
    )
    got = _array(got, where)
    tol = 1e-4 if got.dtype.itemsize < 8 else 1e-8  # a float32 answer: float32's tolerance
    assert got.shape == (T, d_v) and np.allclose(got, _naive(fq, fk, v), rtol=tol, atol=tol), (
        f"{where}: right at small T but not here; look at what changes with the length"
    )


# ------------------------------------------------------------------ exercise 3
# the usual slips of exercise 3, each as the length it gives, with its hint
_CROSSOVER_SLIPS = [
    (lambda d, w, o: math.ceil(o * (2 * w + 1)), "where overhead·(2w + 1) is a whole number "
     "the two counts are equal at that length, and equal is not faster: strictly less starts "
     "one length later"),
    (lambda d, w, o: math.floor(o * w) + 1, "how many keys does each query read in the count? "
     "The window on both sides, and the query's own key"),
    (lambda d, w, o: math.floor(o * (w + 1)) + 1, "how many keys does each query read in the "
     "count? The window on both sides (this count is not causal), and its own key"),
    (lambda d, w, o: math.floor(o * (2 * w + 1) * d) + 1, "d appears in both counts: does d "
     "change the answer?"),
    (lambda d, w, o: 2 * w + 2, "the overhead multiplies local attention's time per "
     "multiply-add: where is it in your comparison?"),
    (lambda d, w, o: math.floor((2 * w + 1) / o) + 1, "the overhead multiplies local "
     "attention's count; it does not divide it"),
]  # fmt: skip
_WINDOWS_OVERHEADS = ((1, 1.0), (2, 1.5), (8, 2.0), (16, 3.25), (64, 0.5), (3, 0.1), (32, 7.0),
                      (128, 2.5), (5, 4.4))  # fmt: skip
_CROSSOVER_CASES = [(d, w, o) for d in (1, 16, 64) for w, o in _WINDOWS_OVERHEADS]


def _first_length(d: int, window: int, overhead: float) -> int:
    """The smallest T >= 1 with overhead * 2T(2w + 1)d < 2T²d, by search."""
    T = 1
    while not overhead * 2 * T * (2 * window + 1) * d < 2 * T * T * d:
        T += 1
    return T


@_exercise("Exercise 3 (the crossover length from counted multiply-adds)")
def check_20_3(crossover_length: Callable) -> None:
    """Against a search over T with the exercise's counts; a wrong answer that one of the
    usual slips explains at every case it gets wrong gets that slip's hint."""
    answers, wrong = {}, []
    for d, window, overhead in _CROSSOVER_CASES:
        where = f"crossover_length(d={d}, window={window}, overhead={overhead})"
        T = _whole_number(crossover_length(d, window, overhead), where, "positions T")
        answers[d, window, overhead] = T
        if T != _first_length(d, window, overhead):
            wrong.append((d, window, overhead))
    if not wrong:
        return
    d, window, overhead = wrong[0]
    T = answers[wrong[0]]
    where = f"crossover_length(d={d}, window={window}, overhead={overhead}) = {T}"
    assert T >= 1, f"{where}: a length counts positions, so it is at least 1"
    for slip, hint in _CROSSOVER_SLIPS:
        if all(answers[case] == slip(*case) for case in wrong):
            raise AssertionError(f"{where}, not the first such length. Hint: {hint}")
    local, full = overhead * 2 * T * (2 * window + 1) * d, 2 * T * T * d
    assert local < full, (
        f"{where}: at that length local attention's counted time ({local:,.1f}) is not below "
        f"full attention's ({full:,}). Hint: write both counts with T, then compare them"
    )
    raise AssertionError(
        f"{where}: local attention is already faster at T = {T - 1}, so {T} is not the first "
        "such length. Hint: write both counts with T and solve for the smallest T"
    )
