"""Lesson 20 (below n²): its exercise checks accept other valid forms of a right answer and
fail wrong answers with a hint; the notebook ships placeholders and gives no exercise away
before its cell; its diagram draws the patterns the library's ops read (the solutions and
placeholders: CASES_20 in test_lesson_exercises.py; garbage answers:
test_lesson_checks_robust.py).

- 20.1 (the keys one query of strided attention reads, a sorted list): duplicates, an
  unsorted list, a set, a mask over the keys (bool or 0/1), a 2-D array, fractions, positions
  outside the sequence, offsets for positions, causal ignored / always applied / on the wrong
  side, columns counted from 0, the band or the columns missing, the columns on one side, a
  band one short, the query's own key left out, the last column cut, the diagram's helper and
  a library call fail, each with its own hint; a loop, NumPy arrays and integers, a tuple,
  floats, a Tensor and the band written |p - j| <= s pass;
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
import json
import math

import matplotlib
import numpy as np
import pytest
from lesson_notebooks import LESSONS, assert_ships_placeholders, checks, code_before, code_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt

matplotlib.use("Agg")

NOTEBOOK = LESSONS / "20_below_n_squared.ipynb"
s20 = importlib.import_module("solutions.lesson20")
patterns = importlib.import_module("figures.sparse_patterns")


# ------------------------------------------------------------------ 20.1
def _loop_keys(p, S, s, causal):  # one key at a time, in plain Python
    return [j for j in range(S) if (abs(p - j) < s or (p - j) % s == 0) and (j <= p or not causal)]


def _numpy_keys(p, S, s, causal):  # the band and the columns as arrays, np.int64 positions
    band = np.arange(max(0, p - s + 1), min(S, p + s))
    columns = np.arange(p % s, S, s)
    keys = np.union1d(band, columns)
    return keys[keys <= p] if causal else keys


VALID_20_1 = {
    "a loop, a list": _loop_keys,
    "a NumPy array": _numpy_keys,
    "a list of NumPy integers": lambda p, S, s, c: list(_numpy_keys(p, S, s, c)),
    "a tuple": lambda p, S, s, c: tuple(s20.strided_keys(p, S, s, c)),
    "floats": lambda p, S, s, c: [float(j) for j in s20.strided_keys(p, S, s, c)],
    "a Tensor": lambda p, S, s, c: mt.tensor(np.array(s20.strided_keys(p, S, s, c), np.float32)),
    "a band |p - j| <= s": lambda p, S, s, c: [  # p ± s are columns anyway
        j for j in range(S) if (abs(p - j) <= s or (p - j) % s == 0) and (j <= p or not c)
    ],
}


@pytest.mark.parametrize("name", VALID_20_1)
def test_20_1_accepts_every_valid_form(name):
    assert checks.check_20_1(VALID_20_1[name]) == checks.CORRECT


def _keys(p, S, s, causal, band=None, columns="both", anchor=None, future=False):
    """A slip of the strided key set (the check's own slips, written independently)."""
    band = s if band is None else band
    anchor = p if anchor is None else anchor
    keys = []
    for j in range(S):
        near = abs(p - j) < band and columns != "only"
        column = (anchor - j) % s == 0 and columns != "none"
        column = column and (j <= p or columns != "past")
        if (near or column) and (not causal or (j >= p if future else j <= p)):
            keys.append(j)
    return keys


def _out_of_range(p, S, s, c):  # the columns not cut to the sequence
    band = range(max(0, p - s + 1), min(S, p + s))
    columns = range(p - s * (S // s + 1), p + s * (S // s + 1) + 1, s)
    return sorted({j for j in (*band, *columns) if j <= p or not c})


def _last_column_cut(p, S, s, c):  # range(..., S - 1, s): the column at S - 1 lost
    keys = set(range(max(0, p - s + 1), min(S, p + s))) | set(range(p % s, S - 1, s))
    return sorted(j for j in keys if j <= p or not c)


def _mask(p, S, s, c):
    out = np.zeros(S, bool)
    out[s20.strided_keys(p, S, s, c)] = True
    return out


def _the_diagram(p, S, s, c):  # a row of the lesson's figure helper: not the learner's own
    return np.flatnonzero(patterns.reads("strided", S, s, c)[p]).tolist()


WRONG_20_1 = {
    "duplicates": (lambda p, S, s, c: [*s20.strided_keys(p, S, s, c), p], "more than once"),
    "unsorted": (lambda p, S, s, c: s20.strided_keys(p, S, s, c)[::-1], "not in order"),
    "a set": (lambda p, S, s, c: set(s20.strided_keys(p, S, s, c)), "a set has no order"),
    "a boolean mask": (_mask, "mask over the S keys"),
    "a 0/1 mask": (lambda p, S, s, c: _mask(p, S, s, c).astype(int), "mask over the S keys"),
    "a (1, n) array": (lambda p, S, s, c: np.array([s20.strided_keys(p, S, s, c)]), "flat list"),
    "half positions": (
        lambda p, S, s, c: [j + 0.5 for j in s20.strided_keys(p, S, s, c)],
        "whole numbers",
    ),
    "outside the sequence": (_out_of_range, "outside the sequence"),
    "offsets": (lambda p, S, s, c: [j - p for j in s20.strided_keys(p, S, s, c)], "offsets"),
    "causal ignored": (lambda p, S, s, c: _keys(p, S, s, False), "no key after"),
    "always causal": (lambda p, S, s, c: _keys(p, S, s, True), "after it too"),
    "the future kept": (lambda p, S, s, c: _keys(p, S, s, c, future=True), "BEFORE the query"),
    "columns from 0": (lambda p, S, s, c: _keys(p, S, s, c, anchor=0), "counted from the query"),
    "no columns": (lambda p, S, s, c: _keys(p, S, s, c, columns="none"), "only the band"),
    "no band": (lambda p, S, s, c: _keys(p, S, s, c, columns="only"), "only the columns"),
    "past columns only": (lambda p, S, s, c: _keys(p, S, s, c, columns="past"), "both ways"),
    "band one short": (lambda p, S, s, c: _keys(p, S, s, c, band=s - 1), "s - 1"),
    "its own key left out": (
        lambda p, S, s, c: [j for j in s20.strided_keys(p, S, s, c) if j != p],
        "its own",
    ),
    "the last column cut": (_last_column_cut, "look at the ends"),
    "the diagram's helper": (_the_diagram, "calls the library"),
    "the library": (
        lambda p, S, s, c: mt.functional.relu(mt.tensor(np.array(s20.strided_keys(p, S, s, c)))),
        "calls the library",
    ),
}


@pytest.mark.parametrize("name", WRONG_20_1)
def test_20_1_rejects_wrong_key_sets_with_their_hint(name):
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
        ["strided_keys", "causal_linear_attention", "crossover_length"],
    )  # fmt: skip


def _markdown_before(name: str) -> str:
    """The markdown cells above the code cell that defines ``def name(``, joined."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    at = next(i for i, c in enumerate(cells) if f"def {name}(" in "".join(c["source"]))
    return "\n".join("".join(c["source"]) for c in cells[:at] if c["cell_type"] == "markdown")


def test_no_cell_gives_an_exercise_away_before_it():
    """No strided key set (code or ranges in the text) before exercise 1, no running sum
    before exercise 2, no solved inequality before exercise 3."""
    before_1 = code_before(NOTEBOOK, "strided_keys")
    for giveaway in ("% s", "%s", "% stride", "strided_offsets", "strided_mask", "reads("):
        assert giveaway not in before_1, giveaway
    text_1 = _markdown_before("strided_keys")
    for giveaway in ("mod s", "p % s", "p − s + 1", "multiples of s on both sides", "±s"):
        assert giveaway not in text_1, giveaway
    before_2 = code_before(NOTEBOOK, "causal_linear_attention")
    assert "cumsum" not in before_2 and "np.outer" not in before_2 and "+=" not in before_2
    before_3 = code_before(NOTEBOOK, "crossover_length")
    assert "floor(" not in before_3 and "ceil(" not in before_3 and "overhead" not in before_3


def test_the_lesson_builds_the_strided_pattern_after_exercise_1():
    """The offsets, the dense mask and Child et al.'s two-hop reach come after the check."""
    cells = code_cells(NOTEBOOK)
    at = next(i for i, c in enumerate(cells) if "check_20_1(" in c)
    after = "\n".join(cells[at + 1 :])
    assert "def strided_offsets(" in after and "def strided_mask(" in after
    assert "every earlier position reached" in after


def _local(T, w, causal):
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = np.abs(i - j) <= w
    return allowed & (j <= i) if causal else allowed


# ------------------------------------------------------------------ the diagram
@pytest.mark.parametrize("causal", [False, True])
def test_the_diagram_draws_what_the_ops_read(causal):
    """The diagram's patterns are the masks the lesson's tests hold the library to (T = S)."""
    T = 16
    assert np.array_equal(patterns.reads("local", T, 2, causal), _local(T, 2, causal))
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    strided = (np.abs(i - j) < 4) | ((i - j) % 4 == 0)
    if causal:
        strided &= j <= i
    assert np.array_equal(patterns.reads("strided", T, 4, causal), strided)
    for p in range(T):  # each row is exercise 1's key set
        keys = np.flatnonzero(strided[p]).tolist()
        assert keys == s20.strided_keys(p, T, 4, causal)
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
