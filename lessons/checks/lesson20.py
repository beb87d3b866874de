"""Lesson 20 (below n²): the checks of its exercises.

- ``check_20_1``: Exercise 1 (the dense band mask of local attention)
- ``check_20_2``: Exercise 2 (causal linear attention without a (T, T) array)
- ``check_20_3``: Exercise 3 (the crossover length from counted multiply-adds)

Exercise 1's answer ``band_mask(T, S, window, causal)`` is compared with the band the
library's ``local_attention`` reads, positions as in the library: key j at position j, query
i at position i + S - T (the queries are the last T positions, as in cached decoding). Cases
with T < S, a window wider than the sequence and a single query. Any (T, S) array of
booleans or of 0/1 numbers passes (a list, a Tensor); it must be built in NumPy: a call into
the library fails. Each usual slip gets its own hint: the position offset ignored, |p - j| <
window, the causal edge on the wrong side, the causal case reading every earlier key.

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

import numpy as np

from ._shared import _array, _exercise, _rng, _whole_number, _without_library


# ------------------------------------------------------------------ exercise 1
def _band(T: int, S: int, window: int, causal: bool, offset: int | None = None) -> np.ndarray:
    """The band local attention reads: |p - j| <= window (causal: p - window <= j <= p),
    p = i + offset, offset S - T unless given."""
    p = np.arange(T)[:, None] + (S - T if offset is None else offset)
    j = np.arange(S)[None, :]
    allowed = np.abs(p - j) <= window
    return allowed & (j <= p) if causal else allowed


def _mask_hint(got: np.ndarray, T: int, S: int, window: int, causal: bool) -> str:
    """Where a wrong band mask went wrong, from the usual slips."""
    p = np.arange(T)[:, None] + S - T
    j = np.arange(S)[None, :]
    slips = [
        (_band(T, S, window, causal, offset=0), "your query i sits at position i, but the "
         "queries are the LAST T positions of the keys' sequence (as in cached decoding): "
         "look at where query i sits when T < S"),
        (_band(T, S, window - 1, causal) if window > 0 else None, "a key exactly `window` "
         "positions away is read too: look at the comparison at the band's edges"),
        (_band(T, S, window, False), "with causal=True no query reads a key after its own "
         "position"),
        (_band(T, S, window, False) & (j >= p), "the causal band keeps the keys BEFORE the "
         "query (the past), not after it"),
        ((j <= p), "the causal band still has a lower edge: a query reads at most `window` "
         "keys back"),
    ]  # fmt: skip
    for slip, hint in slips:
        if slip is not None and np.array_equal(got, slip):
            return hint
    want = _band(T, S, window, causal)
    row = int(np.flatnonzero((got != want).any(axis=1))[0])
    return (
        f"query row {row} (at position {row + S - T}) reads keys "
        f"{np.flatnonzero(got[row]).tolist()} in your mask, and "
        f"{np.flatnonzero(want[row]).tolist()} in local attention's band"
    )


@_exercise("Exercise 1 (the dense band mask of local attention)")
def check_20_1(band_mask: Callable) -> None:
    """``band_mask(T, S, window, causal)`` -> (T, S) bool, True where query i reads key j."""
    cases = [(6, 6, 1, False), (6, 6, 2, True), (4, 10, 2, False), (4, 10, 3, True),
             (1, 7, 2, True), (1, 7, 2, False), (5, 5, 9, False), (5, 5, 9, True),
             (3, 8, 1, True), (1, 1, 1, False), (9, 12, 4, False)]  # fmt: skip
    for T, S, window, causal in cases:
        where = f"band_mask(T={T}, S={S}, window={window}, causal={causal})"
        got = _without_library(
            band_mask, T, S, window, causal, where=where,
            instead="compare each query's position with each key's, in NumPy",
        )  # fmt: skip
        got = _array(got, where)
        assert got.shape == (T, S), (
            f"{where}: expected shape (T, S) = {(T, S)}, one row per query and one column per "
            f"key; got {got.shape}"
        )
        assert np.isin(got, (0, 1)).all(), (
            f"{where}: a mask holds True/False (or 1/0); yours holds {np.unique(got)[:5].tolist()}"
        )
        got = got.astype(bool)
        if not np.array_equal(got, _band(T, S, window, causal)):
            raise AssertionError(f"{where}: {_mask_hint(got, T, S, window, causal)}")


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
