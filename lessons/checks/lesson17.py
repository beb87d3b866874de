"""Lesson 17 (the substrate: the decoder-only language model): the checks of its exercises.

- ``check_17_1``: Exercise 1 (the sampling distribution: temperature and top-k)
- ``check_17_2``: Exercise 2 (windows of a contiguous stream of tokens: inputs and targets)
- ``check_17_3``: Exercise 3 (a cached step's sliding-window mask)

The oracles: NumPy arithmetic written here (exercise 1: the float64 softmax of the logits
divided by τ over the top-k logits; exercise 2: slices of the stream at 0, stride, 2·stride,
...; exercise 3: query position - window < key j <= query position). An answer that calls into
the library fails: the exercises ask for NumPy and the lesson's arithmetic. The arrays a check
hands an answer are its own, not copies: an answer that writes into one is caught
(``_shared``). Answers may be lists, NumPy arrays of any float or int dtype, or library
tensors; a right answer in float32 passes. A wrong or malformed answer (a string, a
wrong shape, a function that raises) fails with an AssertionError and a hint, never with
another exception.

See the package docstring (``checks/__init__.py``, which re-exports these) for what a check
does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._shared import _exercise, _library_calls, _rng


def _callable(answer: Any, name: str) -> None:
    assert callable(answer), (
        f"pass your function {name} itself (got {type(answer).__name__}): write "
        f"`def {name}(...)` in the exercise cell and pass its name"
    )


def _call(fn: Callable, where: str, *args: Any) -> Any:
    """fn(*args); any exception but the placeholder's becomes an AssertionError naming it
    (its traceback stays attached), and so does a call into the library: each exercise asks
    for what one of the library's functions computes (_shared._library_calls)."""
    try:
        result, called = _library_calls(fn, *args)
    except NotImplementedError:
        raise
    except Exception as err:
        raise AssertionError(f"{where} raised {type(err).__name__}: {err}") from err
    assert not called, (
        f"{where} calls the library ({', '.join(sorted(called))}): this exercise asks you to "
        "write that computation yourself; hint: NumPy and the arithmetic of this lesson are "
        "all it needs"
    )
    return result


def _as_array(got: Any, where: str) -> np.ndarray:
    """A NumPy array of a list, a NumPy array or a library tensor (``.numpy()``)."""
    if hasattr(got, "numpy") and callable(got.numpy):
        try:
            got = got.numpy()
        except Exception as err:
            raise AssertionError(f"{where}: {type(got).__name__}.numpy() failed: {err}") from err
    if got is None or isinstance(got, str | bytes):
        raise AssertionError(f"{where} returned {got!r}: return an array")
    try:
        arr = np.asarray(got)
    except (TypeError, ValueError) as err:
        raise AssertionError(
            f"{where} returned {type(got).__name__}, which is not an array (rows of "
            f"unequal length?): {err}"
        ) from err
    assert arr.dtype.kind in "biuf", (
        f"{where} returned an array of {arr.dtype} ({type(got).__name__}): return numbers"
    )
    return arr


# ------------------------------------------------- exercise 1: the sampling distribution
def _reference_probs(logits: np.ndarray, temperature: float, top_k: int | None) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None:
        kth = np.sort(z, axis=-1)[..., -top_k, None]  # the k-th largest (no ties here)
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _plain_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _sampling_cases() -> list[tuple[str, np.ndarray, float, int | None]]:
    """(what, logits, τ, top_k): ordinary rows first, then the extremes."""
    rng = _rng(171)
    with_removed = rng.normal(size=(3, 10))
    with_removed[:, [1, 4, 7]] = -np.inf  # tokens an earlier top-k removed
    return [
        ("ordinary logits", rng.normal(size=7), 1.0, None),
        ("ordinary logits", rng.normal(size=(4, 12)) * 3, 0.5, None),
        ("ordinary logits", rng.normal(size=(2, 3, 16)), 2.0, None),
        ("ordinary logits", rng.normal(size=(5, 9)) * 2, 0.7, 3),
        ("ordinary logits", rng.normal(size=(5, 9)), 1.3, 1),
        ("ordinary logits", rng.normal(size=(2, 6)), 0.9, 6),  # k = V: every token kept
        ("logits of about ±1000", rng.normal(size=(3, 50)) * 1000, 1.0, None),
        ("logits of about -5000", rng.normal(size=(2, 20)) - 5000, 1.0, None),
        ("rows at +1000 and -1000", rng.normal(size=(2, 15)) + [[1000], [-1000]], 1.0, None),
        ("a temperature of 0.01", rng.normal(size=(2, 20)), 0.01, None),
        ("a temperature of 100", rng.normal(size=(2, 20)) * 1e-3, 100.0, None),
        ("logits of about ±1000", rng.normal(size=(3, 30)) * 1000, 0.5, 5),
        ("some logits -inf", with_removed, 0.8, None),
    ]


def _probs_hint(got: np.ndarray, want: np.ndarray, logits: np.ndarray, tau: float,
                top_k: int | None, what: str) -> str:  # fmt: skip
    """What is wrong with ``got`` (finite, the right shape), in words."""
    if not np.all(np.isfinite(got)):
        return (
            f"your answer holds NaN or inf for {what}: exp overflows above about 709 (and "
            "exp(-inf - (-inf)) is NaN). The softmax of a row does not change when the same "
            "number is subtracted from every logit of that row (each row its own number): "
            "lesson 03 shows which number to pick"
        )
    if np.any(got < 0):
        return (
            "your answer has negative entries: return probabilities (not logits or "
            "log-probabilities)"
        )
    z = logits / tau
    if top_k is not None:
        kept = (got > 0).sum(axis=-1)
        if np.any(kept > top_k):
            return (
                f"with top_k = {top_k} your rows give probability to up to {kept.max()} "
                f"tokens: only the {top_k} with the largest logits may be drawn"
            )
        if np.any((got > 0) & (want == 0)):
            return f"you keep {top_k} tokens per row, but not the {top_k} largest logits"
    sums = got.sum(axis=-1)
    if not np.allclose(sums, 1.0, atol=1e-4):
        if top_k is not None and np.allclose(got, _plain_softmax(z) * (want > 0), atol=1e-6):
            return (
                f"your rows sum to {sums.min():.3f}..{sums.max():.3f}, not 1: the kept "
                "tokens' probabilities must be renormalised among themselves"
            )
        return (
            f"your rows sum to {sums.min():.4g}..{sums.max():.4g}, not 1: each row (the last "
            "axis, the vocabulary) must be one probability distribution"
        )
    if tau != 1.0 and top_k is None:
        z_times = np.asarray(logits, dtype=np.float64) * tau
        if np.allclose(got, _plain_softmax(z_times), atol=1e-6):
            return (
                f"at τ = {tau} your distribution is what τ = {1 / tau:g} should give: a "
                "temperature below 1 must sharpen the distribution (towards greedy), one "
                "above 1 flatten it"
            )
        if np.allclose(got, _plain_softmax(np.asarray(logits, dtype=np.float64)), atol=1e-6):
            return f"your answer does not change with the temperature (τ = {tau} here)"
    return (
        f"largest difference {np.abs(got - want).max():.3g} from the sampling distribution "
        f"for {what}, τ = {tau}, top_k = {top_k}"
    )


@_exercise("Exercise 1 (the sampling distribution)")
def check_17_1(sampling_probs: Callable) -> None:
    _callable(sampling_probs, "sampling_probs")
    for what, logits, tau, top_k in _sampling_cases():
        shape = tuple(logits.shape)
        where = f"sampling_probs(logits {shape}, {tau}, top_k={top_k})"
        want = _reference_probs(logits, tau, top_k)  # before the answer runs
        original = logits.copy()  # the check's; the answer gets `logits` itself
        args = (logits, tau) if top_k is None else (logits, tau, top_k)
        got = _as_array(_call(sampling_probs, where, *args), where)
        assert got.shape == shape, (
            f"{where}: shape {got.shape}, expected the logits' shape {shape} (one "
            "probability per token, for every row)"
        )
        got64 = got.astype(np.float64)
        low = got.dtype.kind == "f" and np.finfo(got.dtype).eps > 1e-10  # float32 or less
        if low:  # float32 carries ~7 digits, and logits near -5000 lose ~4 when rounded to it
            rounded = _reference_probs(original.astype(got.dtype), tau, top_k)
            oracles, rtol, atol = (want, rounded), 1e-3, 1e-7
        else:
            oracles, rtol, atol = (want,), 1e-8, 1e-12
        finite = bool(np.all(np.isfinite(got64)))
        if finite and any(np.allclose(got64, o, rtol=rtol, atol=atol) for o in oracles):
            continue
        hint = _probs_hint(got64, want, original, tau, top_k, what)
        raise AssertionError(f"{where} is not the sampling distribution; hint: {hint}")


# ------------------------------------- exercise 2: windows of a contiguous stream of tokens
WINDOW_CASES = (  # (stream length, block_size, stride)
    (20, 4, 4),
    (20, 4, 2),
    (21, 4, 4),  # the last window's last target is the stream's last token
    (17, 5, 3),
    (9, 8, 1),  # exactly one window
    (30, 5, 7),  # a stride above block_size: tokens between windows go unused
    (40, 6, 1),
    (8, 8, 3),  # too short for one window: none
)


def _stream(length: int) -> np.ndarray:
    """``length`` distinct token ids (int64) in no order: a shift shows in every value."""
    return _rng(172).permutation(1000)[:length].astype(np.int64) + 3


def _starts(length: int, block_size: int, stride: int) -> list[int]:
    """The windows' first positions: every stride-th one whose last target exists."""
    return list(range(0, length - block_size, stride))


def _reference_windows(tokens: np.ndarray, block_size: int,
                       stride: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    rows = [tokens[s : s + block_size + 1] for s in _starts(len(tokens), block_size, stride)]
    both = np.array(rows, dtype=np.int64).reshape(-1, block_size + 1)
    return both[:, :-1], both[:, 1:]  # inputs, and the targets: the same shifted by one


def _as_pair(got: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) as two integer arrays, from a tuple or list of two arrays, lists or
    tensors, or one array whose first axis has length 2."""
    if hasattr(got, "numpy") and callable(got.numpy) or isinstance(got, np.ndarray):
        got = _as_array(got, where)
    ok = isinstance(got, tuple | list | np.ndarray) and len(got) == 2
    assert ok, f"{where} returned {type(got).__name__}: return two arrays, (inputs, targets)"
    pair = []
    for name, part in zip(("inputs", "targets"), got, strict=True):
        arr = _as_array(part, f"{where}'s {name}")
        if arr.size and arr.dtype.kind == "f":
            assert np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)), (
                f"{where}'s {name} holds numbers that are not whole: return token ids"
            )
        pair.append(arr.astype(np.int64))
    return pair[0], pair[1]


def _windows_hint(x: np.ndarray, y: np.ndarray, tokens: np.ndarray, block_size: int,
                  stride: int) -> str:  # fmt: skip
    """What is wrong with (x, y), in words."""
    want_x, want_y = _reference_windows(tokens, block_size, stride)
    L, n = len(tokens), len(want_x)
    if x.ndim != 2 or y.ndim != 2 or x.shape != y.shape:
        return (
            f"inputs {x.shape} and targets {y.shape}: both are (number of windows, "
            f"block_size) = {want_x.shape}, one window a row"
        )
    if x.shape[1] == block_size + 1:
        return (
            f"your rows hold block_size + 1 = {block_size + 1} tokens: a window reads "
            "block_size + 1 tokens of the stream, but its inputs are the first block_size of "
            "them and its targets the last block_size"
        )
    if x.shape[1] != block_size:
        return f"your rows hold {x.shape[1]} tokens: each window holds block_size = {block_size}"
    rows = x.shape[0]
    if rows == n - 1:
        return (
            "you stop one window early: a window fits as long as its last target exists, "
            "start + block_size + 1 <= len(tokens) — the last window may end on the stream's "
            "last token"
        )
    if rows == n + 1:
        return (
            "one window too many: the last window's last target lies past the end of the "
            "stream (padded, or cut short); a window fits only when start + block_size + 1 "
            "<= len(tokens)"
        )
    if stride != 1 and rows == len(_starts(L, block_size, 1)):
        return f"consecutive windows start stride = {stride} tokens apart, not 1"
    if stride != block_size and rows == len(_starts(L, block_size, block_size)):
        return (
            f"your windows start block_size = {block_size} tokens apart: they must start "
            f"stride = {stride} apart (windows overlap when stride < block_size)"
        )
    if rows != n:
        return f"{rows} windows, where {n} fit; windows start at 0, stride, 2·stride, ..."
    if n == 0:
        return "no window fits in this stream"
    if np.array_equal(x, want_y) and np.array_equal(y, want_x):
        return "inputs and targets are swapped: return (inputs, targets)"
    if np.array_equal(y, x):
        return (
            "your targets equal your inputs: the target at each position is the token that "
            "follows it in the stream, so the targets are the inputs shifted by one"
        )
    if np.array_equal(x, want_x):
        if np.array_equal(y[:, :-1], x[:, 1:]) and not np.array_equal(y[:, -1], want_y[:, -1]):
            return "each target row's last token is the token after the window's last input"
        later = slice(1, None) if len(x) > 1 else slice(None)  # window 0 has nothing before
        if np.array_equal(y[later, 1:], x[later, :-1]):
            return "your targets are shifted the wrong way: each target comes after its input"
        return "the inputs are right; the targets are the same window moved one token on"
    if sorted(map(tuple, x.tolist())) == sorted(map(tuple, want_x.tolist())):
        return "the right windows in another order: return them in the order of their start"
    first = int(np.argmax(np.any(x != want_x, axis=1)))
    return (
        f"inputs row {first} is {x[first].tolist()}; row i starts at token i·stride of the stream"
    )


@_exercise("Exercise 2 (windows of a stream of tokens)")
def check_17_2(sliding_windows: Callable) -> None:
    _callable(sliding_windows, "sliding_windows")
    for length, block_size, stride in WINDOW_CASES:
        tokens = _stream(length)
        want_x, want_y = _reference_windows(tokens, block_size, stride)  # before the answer runs
        where = f"sliding_windows(tokens of {length}, block_size={block_size}, stride={stride})"
        x, y = _as_pair(_call(sliding_windows, where, tokens, block_size, stride), where)
        if len(want_x) == 0 and x.size == 0 and y.size == 0:
            continue  # no window: any empty arrays will do
        if np.array_equal(x, want_x) and np.array_equal(y, want_y):
            continue
        hint = _windows_hint(x, y, _stream(length), block_size, stride)
        raise AssertionError(f"{where} is wrong; hint: {hint}")


# ---------------------------------------- exercise 3: a cached step's sliding-window mask
MASK_CASES = (  # (T, offset, window)
    (4, 0, 2),
    (3, 4, 2),
    (1, 5, 3),
    (6, 2, 3),
    (2, 9, 4),
    (5, 1, 1),
    (1, 7, 7),  # the query at 7 reads keys 1..7: key 0 is exactly one too far back
    (4, 3, 10),  # a window longer than the sequence: every key so far
    (1, 0, 1),
    (7, 0, 4),
)


def _reference_mask(T: int, offset: int, window: int) -> np.ndarray:
    keys = np.arange(offset + T)[None, :]  # (1, S)
    queries = offset + np.arange(T)[:, None]  # (T, 1): the new positions
    return (keys <= queries) & (keys > queries - window)  # (T, offset + T)


def _as_mask(got: Any, where: str, T: int, S: int) -> np.ndarray:
    """A (T, S) bool array of a bool or 0/1 answer, with leading axes of size 1 allowed."""
    arr = _as_array(got, where)
    while arr.ndim > 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.dtype.kind != "b":
        finite = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
        assert finite.size == arr.size and np.all((arr == 0) | (arr == 1)), (
            f"{where} returned {arr.dtype} values other than 0 and 1 (an additive mask of 0 "
            "and -inf?): return booleans, True where the query may attend to the key (the "
            "library's convention, nn/masks.py)"
        )
        arr = arr == 1
    if arr.shape == (T, S):
        return arr
    if arr.shape == (T, T):
        hint = (
            f"a cached step's {T} new queries are scored against every key so far, the "
            f"{S - T} cached ones and the new ones: {S} columns (those outside the window "
            "False)"
        )
    elif arr.shape == (S, S):
        hint = f"only the {T} new positions ask (rows); all {S} positions answer (columns)"
    elif arr.shape == (S, T):
        hint = "rows are the queries (the new positions), columns the keys"
    else:
        hint = "rows: the new positions (queries); columns: every position so far (keys)"
    raise AssertionError(
        f"{where}: shape {arr.shape}, expected (T, offset + T) = {(T, S)}; hint: {hint}"
    )


def _band(T: int, offset: int, lowest: int, highest: int) -> np.ndarray:
    """Query at p = offset + i reads key j when p - lowest <= j <= p + highest."""
    keys, queries = np.arange(offset + T)[None, :], offset + np.arange(T)[:, None]
    return (keys >= queries - lowest) & (keys <= queries + highest)


def _mask_hint(got: np.ndarray, T: int, offset: int, window: int) -> str:
    want = _reference_mask(T, offset, window)
    keys, queries = np.arange(offset + T)[None, :], offset + np.arange(T)[:, None]
    if np.array_equal(got, ~want):
        return "True must mean may attend (the library's convention, nn/masks.py), not hidden"
    if np.array_equal(got, _band(T, offset, window, 0)):
        return (
            f"your query reads window + 1 = {window + 1} keys: the window counts the query's "
            "own key, so the query at p reads p - window + 1 ... p (the library's local "
            "attention counts its w keys before the query, plus the query: not this "
            "exercise's convention)"
        )
    if window > 1 and np.array_equal(got, _band(T, offset, window - 2, 0)):
        return (
            f"your query reads window - 1 = {window - 1} keys: the window is the query's own "
            "key and the window - 1 keys before it"
        )
    if np.array_equal(got, _band(T, offset, window, -1)) or np.array_equal(
        got, _band(T, offset, window - 1, -1)
    ):
        return "a query may attend to itself (its own key), and the window counts it"
    if np.array_equal(got, keys <= queries):
        return f"the window is ignored: a query reads only the last window = {window} keys"
    if np.any(got & (keys > queries)):
        return "your mask lets a query read a key after its own position: the future"
    unshifted = np.arange(T)[:, None]  # the queries placed at 0 .. T - 1, offset forgotten
    if np.array_equal(got, (keys <= unshifted) & (keys > unshifted - window)) or np.array_equal(
        got, (keys <= unshifted) & (keys >= unshifted - window)
    ):
        return (
            f"new query i is the token at position offset + i = {offset} + i: count the "
            "window back from there"
        )
    if np.array_equal(got, (keys < window) & (keys <= queries)):
        return "the window slides with the query: it ends at the query, not at the first key"
    row = int(np.argmax(np.any(got != want, axis=1)))
    return (
        f"row {row} (the token at position {offset + row}) allows keys "
        f"{np.flatnonzero(got[row]).tolist()}: which are the last {window} positions up to it?"
    )


@_exercise("Exercise 3 (a cached step's sliding-window mask)")
def check_17_3(sliding_window_mask: Callable) -> None:
    _callable(sliding_window_mask, "sliding_window_mask")
    for T, offset, window in MASK_CASES:
        where = f"sliding_window_mask(T={T}, offset={offset}, window={window})"
        got = _call(sliding_window_mask, where, T, offset, window)
        got = _as_mask(got, where, T, offset + T)
        if not np.array_equal(got, _reference_mask(T, offset, window)):
            hint = _mask_hint(got, T, offset, window)
            raise AssertionError(f"{where} is wrong; hint: {hint}")
