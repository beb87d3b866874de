"""Lesson 17's exercise checks (lessons/checks/lesson17.py) tell right from wrong, never crash on
a malformed answer, and agree with the library; the notebook ships what the lesson promises.

- check_17_1 (the sampling distribution): no stabilising shift (overflow at logits of ±1000 and
  NaN around −5000), τ multiplied instead of divided, τ ignored, top-k ignored, not
  renormalised, the k smallest kept, k − 1 kept, the softmax over the wrong axis, one shift for
  the whole array, log-probabilities fail; float64, float32, lists, a library tensor, a
  log-sum-exp form and argsort pass; the library's own ``temperature_softmax`` fails (the
  exercise is what it computes).
- check_17_1 also fails an answer that writes into the logits it was given (the shared guard
  of checks/_shared.py sees it: the check hands over its own array, not a copy).
- check_17_2 (windows of a stream of tokens): targets not shifted or shifted the wrong way,
  one window short or one past the end, the stride ignored, windows tiled, block_size + 1
  wide, inputs and targets swapped, the windows in another order, not a pair, a dict, floats
  that are not whole, a call into the library and a write into the stream fail; arrays, lists,
  a list of two, floats, int32, tensors, one (2, n, block) array, a loop and strided views pass.
  Its oracle is rasbt's GPTDatasetV1 loop.
- check_17_3 (a cached step's sliding-window mask): window + 1 keys (the window counted
  without the query), window - 1 keys, strict, the window ignored, the future read, the offset
  forgotten, the window from the first key, inverted, additive, transposed, square masks fail,
  and so does a call into the library's ``causal_mask``; bools, 0/1 ints, (1, 1, T, S), a
  tensor, ``tril & triu`` and a loop pass. Its oracle gives what the library's causal local
  attention gives at window - 1.
- Garbage answers (a string, None, a tensor or an array of the wrong shape, a ragged list, a
  function that raises, a non-function) fail with AssertionError and nothing else.
- The notebook: placeholders only, each check called once, and no code cell before the
  exercises computes what they ask (the library's temperature softmax is never called), and no
  markdown cell states the answers' formulas.
"""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest
from lesson_notebooks import (
    LESSONS,
    assert_ships_placeholders,
    code_before,
    code_cells,
    markdown_cells,
)

import minitransformer as mt
from minitransformer.nn.masks import causal_mask
from minitransformer.nn.sampling import temperature_softmax

NOTEBOOK = LESSONS / "17_the_substrate.ipynb"
checks = importlib.import_module("checks.lesson17")
s17 = importlib.import_module("solutions.lesson17")
CORRECT, NOT_ATTEMPTED = "correct", None  # checks._shared


def placeholder(*args, **kwargs):
    raise NotImplementedError("exercise: your code here")


# ------------------------------------------------------------------ 17.1: sampling_probs
def _softmax(z, axis=-1, shift=True):
    z = z - z.max(axis=axis, keepdims=True) if shift else z
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _probs(tau_of=lambda t: t, top=None, renormalise=True, axis=-1, shift="row"):
    """sampling_probs with one mistake (the defaults: right). top(z, k) -> kept (bool)."""
    top = top or (lambda z, k: z >= np.sort(z, axis=-1)[..., -k, None])

    def answer(logits, temperature, top_k=None):
        z = np.asarray(logits, dtype=np.float64) / tau_of(temperature)
        kept = top(z, top_k) if top_k is not None else np.ones(z.shape, bool)
        if shift == "row":
            z = z - z.max(axis=-1, keepdims=True)
        elif shift == "all":
            z = z - z.max()
        e = np.where(kept, np.exp(z), 0.0)
        if not renormalise:
            return e / np.exp(z).sum(axis=-1, keepdims=True)
        return e / e.sum(axis=axis, keepdims=True)

    return answer


def _logsumexp_form(logits, temperature, top_k=None):
    z = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None:
        order = np.argsort(z, axis=-1)
        drop = order[..., :-top_k]
        np.put_along_axis(z, drop, -np.inf, axis=-1)
    m = z.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
    return np.exp(z - lse)


def _library_form(logits, temperature, top_k=None):
    z = np.asarray(logits, dtype=np.float64)
    if top_k is not None:
        kth = np.partition(z, -top_k, axis=-1)[..., -top_k, None]
        z = np.where(z >= kth, z, -np.inf)
    return temperature_softmax(z, temperature)


def _writes_into_logits(logits, temperature, top_k=None):
    """Right values, but the caller's logits divided in place (when they are an array)."""
    z = logits if isinstance(logits, np.ndarray) else np.asarray(logits, dtype=np.float64)
    z /= temperature
    return s17.sampling_probs(z, 1.0, top_k)


PROBS_WRONG = {
    "no shift: exp overflows": _probs(shift=None),
    "one shift for the whole array": _probs(shift="all"),
    "τ multiplied": _probs(tau_of=lambda t: 1 / t),
    "τ ignored": _probs(tau_of=lambda t: 1.0),
    "top-k ignored": lambda z, t, k=None: s17.sampling_probs(z, t),
    "top-k not renormalised": _probs(renormalise=False),
    "the k smallest kept": _probs(top=lambda z, k: z <= np.sort(z, axis=-1)[..., k - 1, None]),
    "k - 1 kept": _probs(top=lambda z, k: z > np.sort(z, axis=-1)[..., -k, None]),
    "softmax over the first axis": _probs(axis=0),
    "log-probabilities": lambda z, t, k=None: np.log(s17.sampling_probs(z, t, k) + 1e-300),
    "no top_k argument": lambda z, t: s17.sampling_probs(z, t),
    "the library's temperature_softmax": _library_form,
    "writes into the logits": _writes_into_logits,
}
PROBS_VALID = {
    "reference": s17.sampling_probs,
    "the mistake-free _probs": _probs(),
    "float32": lambda z, t, k=None: s17.sampling_probs(z, t, k).astype(np.float32),
    "float32 throughout": lambda z, t, k=None: s17.sampling_probs(
        np.asarray(z, np.float32), np.float32(t), k
    ).astype(np.float32),
    "a list": lambda z, t, k=None: s17.sampling_probs(z, t, k).tolist(),
    "a library tensor": lambda z, t, k=None: mt.tensor(s17.sampling_probs(z, t, k)),
    "log-sum-exp": _logsumexp_form,
}


# ------------------------------------------------------------------ 17.2: sliding_windows
def _windows(starts_of=None, width=0, shift=1, order=None):
    """sliding_windows with one mistake (the defaults: right). starts_of(L, b, s) -> starts."""
    starts_of = starts_of or (lambda L, b, s: range(0, L - b, s))

    def answer(tokens, block_size, stride):
        t = np.asarray(tokens)
        starts = list(starts_of(len(t), block_size, stride))
        if order is not None:
            starts = starts[::-1]
        b = block_size + width
        x = [t[s : s + b] for s in starts]
        y = [t[max(s + shift, 0) : max(s + shift, 0) + b] for s in starts]
        x = np.array(x, dtype=np.int64).reshape(-1, b)
        return x, np.array(y, dtype=np.int64).reshape(-1, b)

    return answer


def _padded_last(tokens, block_size, stride):
    """One window too many: the last one runs past the stream, padded with 0."""
    t = np.concatenate([np.asarray(tokens), np.zeros(block_size + 1, np.int64)])
    starts = range(0, len(tokens) - block_size + stride, stride)
    starts = [s for s in starts if s < len(tokens) - 1]
    inputs = np.array([t[s : s + block_size] for s in starts]).reshape(-1, block_size)
    targets = np.array([t[s + 1 : s + block_size + 1] for s in starts])
    return inputs, targets.reshape(-1, block_size)


def _writes_into_tokens(tokens, block_size, stride):
    """Right windows, but the caller's stream sorted in place first."""
    tokens.sort()
    return s17.sliding_windows(tokens, block_size, stride)


def _library_windows(tokens, block_size, stride):
    """Through the library's batching, which the exercise asks not to call."""
    from minitransformer.data.batching import make_batch

    make_batch([([], [1, 2])])
    return s17.sliding_windows(tokens, block_size, stride)


WINDOWS_WRONG = {
    "targets not shifted": _windows(shift=0),
    "targets shifted the wrong way": _windows(shift=-1),
    "one window short": _windows(starts_of=lambda L, b, s: range(0, L - b - 1, s)),
    "a window past the end": _padded_last,
    "stride ignored (1)": _windows(starts_of=lambda L, b, s: range(0, L - b, 1)),
    "windows tiled (stride = block_size)": _windows(starts_of=lambda L, b, s: range(0, L - b, b)),
    "block_size + 1 wide": _windows(starts_of=lambda L, b, s: range(0, L - b - 1, s), width=1),
    "swapped": lambda t, b, s: s17.sliding_windows(t, b, s)[::-1],
    "reversed order": _windows(order="reversed"),
    "one array, not a pair": lambda t, b, s: np.stack(s17.sliding_windows(t, b, s), axis=-1),
    "inputs only": lambda t, b, s: s17.sliding_windows(t, b, s)[0],
    "a dict": lambda t, b, s: dict(zip("xy", s17.sliding_windows(t, b, s), strict=True)),
    "floats that are not whole": lambda t, b, s: tuple(
        a + 0.5 for a in s17.sliding_windows(t, b, s)
    ),
    "through the library": _library_windows,
    "writes into tokens": _writes_into_tokens,
}


def _strided_views(tokens, block_size, stride):
    """NumPy's sliding_window_view over block_size + 1 tokens, every stride-th one."""
    if len(tokens) <= block_size:  # no window fits (the view would refuse)
        return np.zeros((0, block_size), int), np.zeros((0, block_size), int)
    views = np.lib.stride_tricks.sliding_window_view(tokens, block_size + 1)[::stride]
    return views[:, :-1], views[:, 1:]


WINDOWS_VALID = {
    "reference": s17.sliding_windows,
    "the mistake-free _windows": _windows(),
    "lists": lambda t, b, s: tuple(a.tolist() for a in s17.sliding_windows(t, b, s)),
    "a list of two": lambda t, b, s: list(s17.sliding_windows(t, b, s)),
    "float arrays": lambda t, b, s: tuple(a.astype(float) for a in s17.sliding_windows(t, b, s)),
    "int32": lambda t, b, s: tuple(a.astype(np.int32) for a in s17.sliding_windows(t, b, s)),
    "library tensors": lambda t, b, s: tuple(
        mt.tensor(a.astype(np.float32)) for a in s17.sliding_windows(t, b, s)
    ),
    "one (2, n, block) array": lambda t, b, s: np.stack(s17.sliding_windows(t, b, s)),
    "a loop, empty lists when none fit": lambda t, b, s: (
        [list(t[i : i + b]) for i in range(0, len(t) - b, s)],
        [list(t[i + 1 : i + b + 1]) for i in range(0, len(t) - b, s)],
    ),
    "strided views": _strided_views,
}


# ------------------------------------------------------------------ 17.3: sliding_window_mask
def _kq(T, offset):
    return np.arange(offset + T)[None, :], offset + np.arange(T)[:, None]


def _band(T, o, back, ahead=0):
    k, q = _kq(T, o)
    return (k >= q - back) & (k <= q + ahead)


def _tril_form(T, o, w):
    ones = np.ones((T, o + T), bool)
    return np.tril(ones, k=o) & np.triu(ones, k=o - w + 1)


MASK_WRONG = {
    "window + 1 keys (without itself)": lambda T, o, w: _band(T, o, w),
    "window - 1 keys": lambda T, o, w: _band(T, o, w - 2),
    "strict: not itself": lambda T, o, w: _band(T, o, w, -1),
    "window ignored (plain causal)": lambda T, o, w: np.tril(np.ones((T, o + T), bool), k=o),
    "reads the future (symmetric band)": lambda T, o, w: _band(T, o, w - 1, w - 1),
    "offset forgotten": lambda T, o, w: (
        s17.sliding_window_mask(T, 0, w)[:, : o + T]
        if o == 0
        else np.pad(s17.sliding_window_mask(T, 0, w), ((0, 0), (0, o)))
    ),
    "the window from the first key": lambda T, o, w: (
        (_kq(T, o)[0] < w) & (_kq(T, o)[0] <= _kq(T, o)[1])
    ),
    "inverted": lambda T, o, w: ~s17.sliding_window_mask(T, o, w),
    "additive 0 / -inf": lambda T, o, w: np.where(s17.sliding_window_mask(T, o, w), 0.0, -np.inf),
    "transposed": lambda T, o, w: s17.sliding_window_mask(T, o, w).T,
    "square (T, T)": lambda T, o, w: s17.sliding_window_mask(T, 0, w),
    "0 / 2 values": lambda T, o, w: 2 * s17.sliding_window_mask(T, o, w).astype(int),
    "the library's causal_mask": lambda T, o, w: (
        causal_mask(T, offset=o)[0, 0] & s17.sliding_window_mask(T, o, w)
    ),
}
MASK_VALID = {
    "reference": s17.sliding_window_mask,
    "0/1 ints": lambda T, o, w: s17.sliding_window_mask(T, o, w).astype(np.int64),
    "(1, 1, T, S)": lambda T, o, w: s17.sliding_window_mask(T, o, w)[None, None],
    "a float tensor": lambda T, o, w: mt.tensor(
        s17.sliding_window_mask(T, o, w).astype(np.float32)
    ),
    "tril and triu": _tril_form,
    "a list": lambda T, o, w: s17.sliding_window_mask(T, o, w).tolist(),
    "a loop": lambda T, o, w: [[o + i - w < j <= o + i for j in range(o + T)] for i in range(T)],
}


# ------------------------------------------------------------------ every check
CHECKS = {
    "17_1": checks.check_17_1,
    "17_2": checks.check_17_2,
    "17_3": checks.check_17_3,
}
WRONG = {"17_1": PROBS_WRONG, "17_2": WINDOWS_WRONG, "17_3": MASK_WRONG}
VALID = {"17_1": PROBS_VALID, "17_2": WINDOWS_VALID, "17_3": MASK_VALID}
SOLUTIONS = {
    "17_1": s17.sampling_probs,
    "17_2": s17.sliding_windows,
    "17_3": s17.sliding_window_mask,
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow of a wrong answer
@pytest.mark.parametrize(("name", "case"), [(n, c) for n in WRONG for c in WRONG[n]])
def test_catches(name, case):
    with pytest.raises(AssertionError):
        CHECKS[name](WRONG[name][case])


@pytest.mark.parametrize(("name", "case"), [(n, c) for n in VALID for c in VALID[n]])
def test_accepts(name, case, capsys):
    assert CHECKS[name](VALID[name][case]) == CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHECKS)
def test_placeholder_is_not_attempted(name, capsys):
    assert CHECKS[name](placeholder) is NOT_ATTEMPTED
    assert CHECKS[name](None) is NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


HINTED = {  # a plausible mistake per exercise, and a word its hint must contain
    ("17_1", "no shift: exp overflows"): "overflows",
    ("17_1", "τ multiplied"): "sharpen",
    ("17_1", "τ ignored"): "does not change with the temperature",
    ("17_1", "top-k ignored"): "largest logits may be drawn",
    ("17_1", "top-k not renormalised"): "renormalised",
    ("17_1", "the k smallest kept"): "not the 3 largest",
    ("17_1", "softmax over the first axis"): "sum to",
    ("17_1", "log-probabilities"): "probabilities",
    ("17_2", "targets not shifted"): "shifted by one",
    ("17_2", "targets shifted the wrong way"): "wrong way",
    ("17_2", "one window short"): "one window early",
    ("17_2", "a window past the end"): "one window too many",
    ("17_2", "stride ignored (1)"): "not 1",
    ("17_2", "windows tiled (stride = block_size)"): "block_size = ",
    ("17_2", "block_size + 1 wide"): "block_size + 1",
    ("17_2", "swapped"): "swapped",
    ("17_2", "reversed order"): "order of their start",
    ("17_2", "a dict"): "(inputs, targets)",
    ("17_2", "floats that are not whole"): "not whole",
    ("17_3", "window + 1 keys (without itself)"): "counts the query's own key",
    ("17_3", "window - 1 keys"): "window - 1",
    ("17_3", "strict: not itself"): "itself",
    ("17_3", "window ignored (plain causal)"): "window is ignored",
    ("17_3", "reads the future (symmetric band)"): "the future",
    ("17_3", "offset forgotten"): "offset + i",
    ("17_3", "the window from the first key"): "slides with the query",
    ("17_3", "inverted"): "convention",
    ("17_3", "additive 0 / -inf"): "booleans",
    ("17_3", "square (T, T)"): "columns",
    ("17_1", "the library's temperature_softmax"): "calls the library",
    ("17_2", "through the library"): "calls the library",
    ("17_1", "writes into the logits"): "in place",
    ("17_2", "writes into tokens"): "in place",
    ("17_3", "the library's causal_mask"): "calls the library",
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(("name", "case"), list(HINTED))
def test_the_hint_names_the_mistake(name, case):
    with pytest.raises(AssertionError, match="hint|return") as err:
        CHECKS[name](WRONG[name][case])
    assert HINTED[name, case] in str(err.value), str(err.value)


def _raises(*args, **kwargs):
    raise TypeError("the learner's own bug")


GARBAGE = {
    "a string": lambda *a: "garbage",
    "None": lambda *a: None,
    "a dict": lambda *a: {"p": 1},
    "a one-number tensor": lambda *a: mt.tensor([0.5]),
    "a wrong-shape array": lambda *a: np.zeros((2, 3, 4, 5)),
    "a ragged list": lambda *a: [[1.0], [1.0, 2.0]],
    "an object array": lambda *a: np.array([object()]),
    "NaN": lambda *a: float("nan"),
    "a function that raises": _raises,
}


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_answers_fail_with_assertion_error_only(name, garbage):
    with pytest.raises(AssertionError):
        CHECKS[name](GARBAGE[garbage])


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize("not_a_function", ["sampling_probs", np.ones(3), 42])
def test_a_non_function_fails_with_assertion_error(name, not_a_function):
    with pytest.raises(AssertionError, match="pass your function"):
        CHECKS[name](not_a_function)


# ------------------------------------------------------------------ the oracles
@pytest.mark.parametrize(("length", "block_size", "stride"), checks.WINDOW_CASES)
def test_17_2_oracle_is_the_dataset_loop(length, block_size, stride):
    """The check's windows are those of rasbt's GPTDatasetV1 loop (starts range(0, L - b, s),
    targets the inputs shifted by one), and each fits whole in the stream."""
    tokens = checks._stream(length)
    x, y = checks._reference_windows(tokens, block_size, stride)
    starts = range(0, len(tokens) - block_size, stride)
    assert len(x) == len(starts) == len(y)
    for row, i in enumerate(starts):
        assert x[row].tolist() == tokens[i : i + block_size].tolist()
        assert y[row].tolist() == tokens[i + 1 : i + block_size + 1].tolist()
        assert i + block_size + 1 <= length


@pytest.mark.parametrize(("T", "offset", "window"), checks.MASK_CASES)
def test_17_3_oracle_is_the_library_local_attention(T, offset, window):
    """The check's mask, used as a dense mask in plain attention, gives what the library's
    causal local attention gives with its window w = window - 1 (keys before the query, plus
    the query): the two conventions, one band."""
    rng = np.random.default_rng(T * 100 + offset * 10 + window)
    S = offset + T
    q, k, v = rng.normal(size=(1, T, 8)), rng.normal(size=(1, S, 8)), rng.normal(size=(1, S, 8))
    mask = checks._reference_mask(T, offset, window)
    scores = np.where(mask, q @ k.transpose(0, 2, 1) / np.sqrt(8), -np.inf)
    dense = _softmax(scores) @ v
    local = mt.functional.local_attention(
        mt.tensor(q), mt.tensor(k), mt.tensor(v), window=max(window - 1, 1), causal=True
    ).numpy()
    if window == 1:  # the library's smallest window reads one key before: compare with that
        dense = _softmax(np.where(_band(T, offset, 1), q @ k.transpose(0, 2, 1) / np.sqrt(8),
                                  -np.inf)) @ v  # fmt: skip
    assert np.allclose(local, dense, atol=1e-10)
    if window >= S:
        assert np.array_equal(mask, causal_mask(T, offset=offset)[0, 0])


def test_17_1_oracle_is_the_library_sampler():
    """Without top-k the check's distribution is the library's temperature_softmax, and with
    it the library's sampler draws from it (frequencies within sampling noise)."""
    from minitransformer.nn.sampling import next_tokens

    for _, logits, tau, top_k in checks._sampling_cases():
        if top_k is None:
            want = temperature_softmax(logits, tau)
            assert np.allclose(checks._reference_probs(logits, tau, None), want, atol=1e-12)
    z = np.random.default_rng(0).normal(size=12) * 2
    p = checks._reference_probs(z, 0.7, 4)
    draws = next_tokens(np.tile(z, (40_000, 1)), 0.7, 4, np.random.default_rng(1))
    freq = np.bincount(draws, minlength=12) / len(draws)
    assert np.abs(freq - p).max() < 0.01 and set(np.flatnonzero(freq)) == set(np.flatnonzero(p))


# ------------------------------------------------------------------ the notebook
def test_notebook_ships_placeholders_and_calls_every_check():
    assert_ships_placeholders(
        NOTEBOOK, 17, CHECKS, ("sampling_probs", "sliding_windows", "sliding_window_mask")
    )


def test_no_cell_before_the_exercises_answers_them():
    """The lesson never calls the library's temperature softmax (exercise 1's answer); before
    each exercise no code cell divides logits by a temperature (1), cuts a stream into
    shifted windows (2), or builds a windowed or offset mask (3)."""
    assert "temperature_softmax" not in "\n".join(code_cells(NOTEBOOK))
    before = {name: code_before(NOTEBOOK, name) for name in SOLUTIONS_NAMES}
    for answer in ("/ temperature", "/ tau"):
        assert answer not in before["sampling_probs"], answer
    for answer in ("sliding_window_view", "- block_size", "block_size + 1", "stride"):
        assert answer not in before["sliding_windows"], answer
    for answer in ("triu(", "tril(", "- window", "> queries", "offset=o"):
        assert answer not in before["sliding_window_mask"], answer
    offset_masks = re.findall(r"causal_mask\([^)]*,[^)]*\)", before["sliding_window_mask"])
    assert not offset_masks, f"a cell before the exercises builds {offset_masks}"


def test_the_text_above_the_exercises_does_not_give_them_away():
    """No markdown cell before exercise 3 writes the window's inequality, and none before
    exercise 2 the windows' starts."""
    text = "\n".join(markdown_cells(NOTEBOOK))
    above = text[: text.index("**2. Windows of a stream of tokens.**")]
    assert "range(0" not in above and "len(tokens) - block_size" not in text
    assert "p - window <" not in text and "j > p - window" not in text


SOLUTIONS_NAMES = ("sampling_probs", "sliding_windows", "sliding_window_mask")
