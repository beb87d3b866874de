"""Lesson 20 (below n²): its exercise checks accept other valid forms of a right answer and
fail wrong answers with a hint; the notebook ships placeholders and gives no exercise away
before its cell; its diagram draws the patterns the library's ops read (the solutions and
placeholders: CASES_20 in test_lesson_exercises.py; garbage answers:
test_lesson_checks_robust.py).

- 20.1 (the dense band mask): the position offset ignored, a strict edge, the causal edge on
  the wrong side or missing, a transposed mask, values other than 0/1, and the library's
  causal mask fail, each with its own hint; a loop, 0/1 integers, a list and a Tensor pass;
- 20.2 (causal linear attention without a (T, T) array): the non-causal sums, j < i, no
  denominator, the whole sequence's denominator, the feature map applied again, the naive
  (T, T) form (refused by its memory), an answer that writes into its inputs, and a call into
  the library fail; the recurrence, a list, a Tensor and a float32 answer pass;
- 20.3 (the crossover length): ceil (wrong where the counts are equal), the real bound, w for
  2w + 1, d left in, the overhead forgotten fail; a search, a NumPy integer, an integral float
  pass.
"""

from __future__ import annotations

import importlib
import math

import matplotlib
import numpy as np
import pytest
from lesson_notebooks import LESSONS, assert_ships_placeholders, checks, code_before
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
from minitransformer.nn.masks import causal_mask

matplotlib.use("Agg")

NOTEBOOK = LESSONS / "20_below_n_squared.ipynb"
s20 = importlib.import_module("solutions.lesson20")
patterns = importlib.import_module("figures.sparse_patterns")


# ------------------------------------------------------------------ 20.1
def _loop_mask(T, S, window, causal):  # one cell at a time, in plain Python
    rows = []
    for i in range(T):
        p = i + S - T
        rows.append([abs(p - j) <= window and (j <= p or not causal) for j in range(S)])
    return rows


VALID_20_1 = {
    "a loop, as lists": _loop_mask,
    "0/1 integers": lambda T, S, w, c: s20.band_mask(T, S, w, c).astype(int),
    "0./1. floats": lambda T, S, w, c: s20.band_mask(T, S, w, c).astype(float),
    "a Tensor": lambda T, S, w, c: mt.tensor(s20.band_mask(T, S, w, c).astype(np.float32)),
}


@pytest.mark.parametrize("name", VALID_20_1)
def test_20_1_accepts_every_valid_form(name):
    assert checks.check_20_1(VALID_20_1[name]) == checks.CORRECT


def _no_offset(T, S, w, c):
    i, j = np.arange(T)[:, None], np.arange(S)[None, :]
    m = np.abs(i - j) <= w
    return m & (j <= i) if c else m


def _strict(T, S, w, c):
    p, j = np.arange(T)[:, None] + S - T, np.arange(S)[None, :]
    m = np.abs(p - j) < w
    return m & (j <= p) if c else m


def _future(T, S, w, c):
    p, j = np.arange(T)[:, None] + S - T, np.arange(S)[None, :]
    m = np.abs(p - j) <= w
    return m & (j >= p) if c else m


def _all_past(T, S, w, c):
    p, j = np.arange(T)[:, None] + S - T, np.arange(S)[None, :]
    return (j <= p) if c else np.abs(p - j) <= w


def _library_causal(T, S, w, c):
    band = s20.band_mask(T, S, w, False)
    if c:
        band = band & np.asarray(causal_mask(T, offset=S - T))[0, 0]
    return band


WRONG_20_1 = {
    "offset ignored": (_no_offset, "LAST T positions"),
    "strict edge": (_strict, "exactly `window`"),
    "causal ignored": (lambda T, S, w, c: s20.band_mask(T, S, w, False), "after its own"),
    "the future kept": (_future, "BEFORE the query"),
    "every past key": (_all_past, "lower edge"),
    # at T = S the transposed causal band is the future's band
    "transposed": (lambda T, S, w, c: s20.band_mask(T, T, w, c).T, "BEFORE the query"),
    "twos": (lambda T, S, w, c: 2 * s20.band_mask(T, S, w, c), "True/False"),
    "(S, T) shape": (
        lambda T, S, w, c: s20.band_mask(T, S, w, c) if T == S else np.zeros((S, T), bool),
        "(T, S)",
    ),
    "the library": (_library_causal, "calls the library"),
}


@pytest.mark.parametrize("name", WRONG_20_1)
def test_20_1_rejects_wrong_masks_with_their_hint(name):
    answer, words = WRONG_20_1[name]
    assert words in _fails(checks.check_20_1, answer)


# ------------------------------------------------------------------ 20.2
def _recurrent(fq, fk, v):
    C, z, out = np.zeros((fk.shape[1], v.shape[1])), np.zeros(fk.shape[1]), []
    for t in range(len(fq)):
        C = C + np.outer(fk[t], v[t])
        z = z + fk[t]
        out.append(fq[t] @ C / (fq[t] @ z))
    return out  # a list of rows


VALID_20_2 = {
    "the recurrence, a list": _recurrent,
    "a Tensor": lambda fq, fk, v: mt.tensor(s20.causal_linear_attention(fq, fk, v)),
    "float32 out": lambda fq, fk, v: s20.causal_linear_attention(fq, fk, v).astype(np.float32),
}


@pytest.mark.parametrize("name", VALID_20_2)
def test_20_2_accepts_every_valid_form(name):
    assert checks.check_20_2(VALID_20_2[name]) == checks.CORRECT


def _tril(fq, fk, v, k=0):
    A = np.tril(fq @ fk.T, k=k)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (A @ v) / A.sum(axis=1, keepdims=True)


def _in_place(fq, fk, v):
    np.cumsum(fk, axis=0, out=fk)  # the running z, written over the caller's fk
    steps = np.diff(fk, axis=0, prepend=0.0)
    C = np.cumsum(steps[:, :, None] * v[:, None, :], axis=0)
    return np.einsum("td,tde->te", fq, C) / np.einsum("td,td->t", fq, fk)[:, None]


def _phi(x):
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _library(fq, fk, v):  # the library's op (on the features: a wrong answer anyway)
    from minitransformer.ops.linear_attention import linear_attention

    return linear_attention(mt.tensor(fq), mt.tensor(fk), mt.tensor(v), causal=True).numpy()


WRONG_20_2 = {
    "non-causal": (lambda fq, fk, v: _tril(fq, fk, v, k=fq.shape[0]), "every key"),
    "j < i": (lambda fq, fk, v: _tril(fq, fk, v, k=-1), "own key"),
    "no denominator": (lambda fq, fk, v: np.tril(fq @ fk.T) @ v, "AVERAGE"),
    "whole denominator": (
        lambda fq, fk, v: (np.tril(fq @ fk.T) @ v) / (fq @ fk.sum(0))[:, None],
        "denominator, like the numerator",
    ),
    "phi again": (
        lambda fq, fk, v: s20.causal_linear_attention(_phi(fq), _phi(fk), v),
        "already the features",
    ),
    "through (T, T)": (_tril, "allocated"),
    "writes into fk": (_in_place, "changed its input fk"),
    "the library": (_library, "calls the library"),
}


@pytest.mark.parametrize("name", WRONG_20_2)
def test_20_2_rejects_wrong_answers_with_their_hint(name):
    answer, words = WRONG_20_2[name]
    assert words in _fails(checks.check_20_2, answer)


# ------------------------------------------------------------------ 20.3
def _search(d, window, overhead):
    T = 1
    while not overhead * 2 * T * (2 * window + 1) * d < 2 * T * T * d:
        T += 1
    return T


VALID_20_3 = {
    "a search": _search,
    "a NumPy integer": lambda d, w, o: np.int64(s20.crossover_length(d, w, o)),
    "an integral float": lambda d, w, o: float(s20.crossover_length(d, w, o)),
    "a Tensor": lambda d, w, o: mt.tensor(np.array([s20.crossover_length(d, w, o)])),
}


@pytest.mark.parametrize("name", VALID_20_3)
def test_20_3_accepts_every_valid_form(name):
    assert checks.check_20_3(VALID_20_3[name]) == checks.CORRECT


WRONG_20_3 = {
    "ceil": (lambda d, w, o: math.ceil(o * (2 * w + 1)), "equal is not faster"),
    "the real bound": (lambda d, w, o: o * (2 * w + 1) + 0.5, "whole number"),
    "w for 2w + 1": (lambda d, w, o: math.floor(o * w) + 1, "how many keys"),
    "d left in": (lambda d, w, o: math.floor(o * (2 * w + 1) * d) + 1, "does d"),
    "no overhead": (lambda d, w, o: 2 * w + 2, "overhead multiplies"),
    "overhead divides": (lambda d, w, o: math.floor((2 * w + 1) / o) + 1, "not divide"),
    "twice": (lambda d, w, o: 2 * s20.crossover_length(d, w, o), "already faster"),
    "half": (lambda d, w, o: max(1, s20.crossover_length(d, w, o) // 2), "not below"),
}


@pytest.mark.parametrize("name", WRONG_20_3)
def test_20_3_rejects_wrong_lengths_with_their_hint(name):
    answer, words = WRONG_20_3[name]
    assert words in _fails(checks.check_20_3, answer)


# ------------------------------------------------------------------ the notebook
def test_ships_placeholders_and_calls_each_check_once():
    assert_ships_placeholders(
        NOTEBOOK, 20, ["20_1", "20_2", "20_3"],
        ["band_mask", "causal_linear_attention", "crossover_length"],
    )  # fmt: skip


def test_no_cell_gives_an_exercise_away_before_it():
    """No position comparison before exercise 1, no running sum before exercise 2, no solved
    inequality before exercise 3."""
    before_1 = code_before(NOTEBOOK, "band_mask")
    assert "S - T" not in before_1 and "<= window" not in before_1 and "np.abs(" not in before_1
    before_2 = code_before(NOTEBOOK, "causal_linear_attention")
    assert "cumsum" not in before_2 and "np.outer" not in before_2 and "+=" not in before_2
    before_3 = code_before(NOTEBOOK, "crossover_length")
    assert "floor(" not in before_3 and "ceil(" not in before_3 and "overhead" not in before_3


# ------------------------------------------------------------------ the diagram
@pytest.mark.parametrize("causal", [False, True])
def test_the_diagram_draws_what_the_ops_read(causal):
    """The diagram's patterns are the masks the lesson's tests hold the library to (T = S)."""
    T = 16
    assert np.array_equal(patterns.reads("local", T, 2, causal), s20.band_mask(T, T, 2, causal))
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    strided = (np.abs(i - j) < 4) | ((i - j) % 4 == 0)
    if causal:
        strided &= j <= i
    assert np.array_equal(patterns.reads("strided", T, 4, causal), strided)
    assert patterns.reads("linear", T, 1, causal).sum() == (T * (T + 1) // 2 if causal else T * T)


def test_the_diagram_draws_two_rows_of_four_panels():
    fig = patterns.patterns_figure(T=12, window=2, stride=3, query=5)
    assert len(fig.axes) == 8
    titles = " ".join(ax.get_title() for ax in fig.axes)
    assert "query 5 reads 5 of 12 keys" in titles  # local, non-causal: 2w + 1
    with pytest.raises(ValueError, match="query"):
        patterns.patterns_figure(T=12, query=12)


def test_the_diagram_saves_a_png_headless(tmp_path):
    """Drawn on its own Agg canvas: a non-blank PNG, and no pyplot figure left behind."""
    import matplotlib.image
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    fig = patterns.patterns_figure()
    path = tmp_path / "patterns.png"
    fig.savefig(path, dpi=40, bbox_inches="tight")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.ptp(matplotlib.image.imread(path)) > 0  # not blank
    assert plt.get_fignums() == before
