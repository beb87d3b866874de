"""Lesson 17's exercise checks (lessons/checks/lesson17.py) tell right from wrong, never crash on
a malformed answer, and agree with the library; the notebook ships what the lesson promises.

- check_17_1 (the sampling distribution): no stabilising shift (overflow at logits of ±1000 and
  NaN around −5000), τ multiplied instead of divided, τ ignored, top-k ignored, not
  renormalised, the k smallest kept, k − 1 kept, the softmax over the wrong axis, one shift for
  the whole array, log-probabilities fail; float64, float32, lists, a library tensor, a
  log-sum-exp form and argsort pass; the library's own ``temperature_softmax`` fails (the
  exercise is what it computes).
- check_17_2 (the parameters saved by dropping the encoder): the cross-attention or its
  LayerNorm forgotten, no biases, three projections per attention, a part that does not grow
  with N, swapped arguments, a half and a string fail, and so does a count through the
  library's configs (the task says: without building a config); ints, NumPy integers and
  integral floats pass. Its oracle agrees with built models.
- check_17_3 (a cached step's causal mask): strict, offset ignored, square, inverted, additive,
  all-True, transposed masks fail; bools, 0/1 ints, (1, 1, T, S), a tensor,
  ``np.tril(..., k=offset)`` pass; the library's ``causal_mask`` fails.
- Garbage answers (a string, None, a tensor or an array of the wrong shape, a ragged list, a
  function that raises, a non-function) fail with AssertionError and nothing else.
- The notebook: placeholders only, each check called once, and no code cell before the
  exercises computes what they ask (the library's temperature softmax is never called).
"""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest
from lesson_notebooks import LESSONS, assert_ships_placeholders, code_cells

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


# ------------------------------------------------------------------ 17.2: params_saved
def _saved(D, F, N, attention=4, biases=True, ffn_bias=True, enc_norms=2, cross=True,
           cross_norm=True, once=0):  # fmt: skip
    """A count with one mistake (the defaults: the right count)."""
    b = 1 if biases else 0
    att = attention * (D * D + b * D)
    ffn = 2 * D * F + (b * (F + D) if ffn_bias else 0)
    encoder_layer = att + ffn + enc_norms * 2 * D
    cross_sublayer = (att + (2 * D if cross_norm else 0)) if cross else 0
    return N * (encoder_layer + cross_sublayer) + once * D


SAVED_WRONG = {
    "no cross-attention": lambda D, F, N: _saved(D, F, N, cross=False),
    "cross-attention without its LayerNorm": lambda D, F, N: _saved(D, F, N, cross_norm=False),
    "no biases": lambda D, F, N: _saved(D, F, N, biases=False),
    "no feed-forward biases": lambda D, F, N: _saved(D, F, N, ffn_bias=False),
    "one LayerNorm per encoder layer": lambda D, F, N: _saved(D, F, N, enc_norms=1),
    "three projections per attention": lambda D, F, N: _saved(D, F, N, attention=3),
    "a final LayerNorm (pre-LN's)": lambda D, F, N: _saved(D, F, N, once=2),
    "swapped d_model and d_ff": lambda D, F, N: _saved(F, D, N),
    "the decoder's layers": lambda D, F, N: N * (8 * D * D + 2 * D * F + F + 15 * D) // 2,
    "not a whole number": lambda D, F, N: _saved(D, F, N) + 0.5,
    "a string": lambda D, F, N: str(_saved(D, F, N)),
    "a list": lambda D, F, N: [_saved(D, F, N)],
    "a library tensor": lambda D, F, N: mt.tensor(float(_saved(D, F, N))),
    "None": lambda D, F, N: None,
    "a bool": lambda D, F, N: True,
    "through the library's configs": checks.parameters_saved,
}
SAVED_VALID = {
    "reference": s17.params_saved,
    "the mistake-free _saved": _saved,
    "a NumPy integer": lambda D, F, N: np.int64(_saved(D, F, N)),
    "an integral float": lambda D, F, N: float(_saved(D, F, N)),
    "a 0-d array": lambda D, F, N: np.array(_saved(D, F, N)),
}


# ------------------------------------------------------------------ 17.3: cached_causal_mask
def _keys_queries(T, offset):
    return np.arange(offset + T)[None, :], offset + np.arange(T)[:, None]


MASK_WRONG = {
    "strict: not itself": lambda T, o: np.less(*_keys_queries(T, o)),
    "offset ignored": lambda T, o: np.tril(np.ones((T, o + T), bool)),
    "square (T, T)": lambda T, o: np.tril(np.ones((T, T), bool)),
    "square (S, S)": lambda T, o: np.tril(np.ones((o + T, o + T), bool)),
    "inverted": lambda T, o: ~s17.cached_causal_mask(T, o),
    "additive 0 / -inf": lambda T, o: np.where(s17.cached_causal_mask(T, o), 0.0, -np.inf),
    "all True": lambda T, o: np.ones((T, o + T), bool),
    "the future side": lambda T, o: np.greater_equal(*_keys_queries(T, o)),
    "transposed": lambda T, o: s17.cached_causal_mask(T, o).T,
    "0 / 2 values": lambda T, o: 2 * s17.cached_causal_mask(T, o).astype(int),
    "the library's causal_mask": lambda T, o: causal_mask(T, offset=o),
}
MASK_VALID = {
    "reference": s17.cached_causal_mask,
    "0/1 ints": lambda T, o: s17.cached_causal_mask(T, o).astype(np.int64),
    "(1, 1, T, S)": lambda T, o: s17.cached_causal_mask(T, o)[None, None],
    "a float tensor": lambda T, o: mt.tensor(s17.cached_causal_mask(T, o).astype(np.float32)),
    "np.tril with k": lambda T, o: np.tril(np.ones((T, o + T), bool), k=o),
    "a list": lambda T, o: s17.cached_causal_mask(T, o).tolist(),
}


# ------------------------------------------------------------------ every check
CHECKS = {
    "17_1": checks.check_17_1,
    "17_2": checks.check_17_2,
    "17_3": checks.check_17_3,
}
WRONG = {"17_1": PROBS_WRONG, "17_2": SAVED_WRONG, "17_3": MASK_WRONG}
VALID = {"17_1": PROBS_VALID, "17_2": SAVED_VALID, "17_3": MASK_VALID}
SOLUTIONS = {"17_1": s17.sampling_probs, "17_2": s17.params_saved, "17_3": s17.cached_causal_mask}


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
    ("17_2", "no cross-attention"): "N·d_model² term",
    ("17_2", "cross-attention without its LayerNorm"): "N·d_model term",
    ("17_2", "no feed-forward biases"): "N·d_ff term",
    ("17_2", "a final LayerNorm (pre-LN's)"): "does not grow with N",
    ("17_3", "strict: not itself"): "itself",
    ("17_3", "offset ignored"): "cached key",
    ("17_3", "square (T, T)"): "columns",
    ("17_3", "inverted"): "convention",
    ("17_3", "additive 0 / -inf"): "booleans",
    ("17_3", "the future side"): "other side",
    ("17_1", "the library's temperature_softmax"): "calls the library",
    ("17_2", "through the library's configs"): "calls the library",
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
@pytest.mark.parametrize(("D", "F", "N"), [(64, 256, 2), (16, 40, 3), (24, 8, 1)])
def test_17_2_oracle_counts_built_models(D, F, N):
    """The check's oracle (two configs' num_parameters) is what the built models hold."""
    sizes = dict(d_model=D, h=4, N=N, d_ff=F)
    both = mt.nn.Transformer(mt.TransformerConfig(src_vocab=50, tgt_vocab=50, **sizes))
    lm = mt.nn.TransformerLM(vocab=50, **sizes)
    assert both.num_parameters() - lm.num_parameters() == checks.parameters_saved(D, F, N)


@pytest.mark.parametrize(("T", "offset"), checks.MASK_CASES)
def test_17_3_oracle_is_the_library_mask(T, offset):
    assert np.array_equal(checks._reference_mask(T, offset), causal_mask(T, offset=offset)[0, 0])


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
        NOTEBOOK, 17, CHECKS, ("sampling_probs", "params_saved", "cached_causal_mask")
    )


def test_no_cell_before_the_exercises_answers_them():
    """The lesson never calls the library's temperature softmax (exercise 1's answer), and
    before the first exercise cell no code cell divides logits by a temperature, sums the
    encoder's weights in closed form (exercise 2: section 1 counts arrays) or builds a mask
    with an offset (exercise 3)."""
    cells = code_cells(NOTEBOOK)
    first = next(i for i, c in enumerate(cells) if "def sampling_probs(" in c)
    before = "\n".join(cells[:first])
    assert "temperature_softmax" not in "\n".join(cells)
    for answer in ("/ temperature", "/ tau", "d_model * d_model", "D * D"):
        assert answer not in before, f"a cell before the exercises contains {answer!r}"
    offset_masks = re.findall(r"causal_mask\([^)]*,[^)]*\)", before)  # with an offset argument
    assert not offset_masks, f"a cell before the exercises builds {offset_masks}"
