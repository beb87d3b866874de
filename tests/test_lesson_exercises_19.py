"""Lesson 19 (what the heads do): its exercise checks accept other valid forms of a right
answer and fail wrong answers with a hint; the notebook ships placeholders and gives no
exercise away before its cell (the solutions and placeholders: CASES_19 in
test_lesson_exercises.py; garbage answers: test_lesson_checks_robust.py).

- 19.1 (Voita et al.'s positional criterion, which replaced the entropy of attention rows
  of issue 46: lesson 06's exercise 3 asks that): the mean weight instead of the largest,
  padded rows counted, offset 0 taken for a neighbour, the threshold misused (>, 0.5, 90),
  the direction flipped, 0 for "not positional", the library, and writing into the weights
  fail, each with its own hint; loops, a per-sentence mean of the fraction, lists, floats,
  NumPy integers and Tensors pass;
- 19.2 (importance by central differences): a one-sided difference, the signed derivative,
  twice the derivative fail.
"""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest
from lesson_notebooks import (
    LESSONS,
    assert_ships_placeholders,
    checks,
    code_before,
    code_cells,
    markdown_cells,
)
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
from minitransformer.tools import heads

NOTEBOOK = LESSONS / "19_what_the_heads_do.ipynb"
s19 = importlib.import_module("solutions.lesson19")

# the solutions passing and the placeholders "not attempted": CASES_19 in
# test_lesson_exercises.py


# garbage answers (a string, a number, a raising function...): tests/test_lesson_checks_robust.py


# ------------------------------------------------------------------ 19.1
def _loops(weights, lengths):  # row by row, in plain Python
    hits = {-1: 0, 1: 0}
    rows = 0
    for sentence, n in zip(weights, lengths, strict=True):
        for t, row in enumerate(list(sentence)[: int(n)]):
            row = list(row)
            peak = row.index(max(row))
            rows += 1
            if peak - t in hits:
                hits[peak - t] += 1
    for offset, count in hits.items():
        if count >= 0.9 * rows:
            return offset
    return None


def _per_sentence(weights, lengths):  # each sentence's fraction, then their mean
    w, n = np.asarray(weights), np.asarray(lengths)
    for offset in (-1, 1):
        shares = [np.mean(w[b, :k].argmax(-1) == np.arange(k) + offset) for b, k in enumerate(n)]
        if np.mean(shares) >= 0.9:
            return offset
    return None


VALID_19_1 = {
    "loops": _loops,
    "per sentence": _per_sentence,
    "a float": lambda w, n: None if (o := s19.positional_offset(w, n)) is None else float(o),
    "a NumPy integer": lambda w, n: None if (o := s19.positional_offset(w, n)) is None
    else np.int64(o),
    "a Tensor": lambda w, n: None if (o := s19.positional_offset(w, n)) is None
    else mt.tensor(np.array([float(o)])),
}  # fmt: skip


@pytest.mark.parametrize("name", VALID_19_1)
def test_19_1_accepts_every_valid_form(name):
    assert checks.check_19_1(VALID_19_1[name]) == checks.CORRECT


def _slip(**flags):
    from checks.lesson19 import _verdict

    return lambda w, n: _verdict(np.asarray(w, dtype=float), n, **flags)


def _zero_for_no(w, n):
    o = s19.positional_offset(w, n)
    return 0 if o is None else o


def _writes_into_the_weights(w, n):
    if isinstance(w, np.ndarray):
        w[:, 0, 0] = 1.0  # "fix" the first row in place
    return s19.positional_offset(w, n)


def _library(w, n):
    w = np.asarray(w, dtype=float)
    stats = heads.head_stats(w[:, None], np.arange(w.shape[1])[None, :] < np.asarray(n)[:, None])
    return -1 if stats["prev"][0] >= 0.5 else None


WRONG_19_1 = {
    "the mean weight": (_slip(largest=False), "LARGEST weight"),
    "padded rows counted": (_slip(real=False), "rows of real tokens"),
    "offset 0 as a neighbour": (_slip(with_same=True), "no neighbour"),
    "> for >=": (_slip(strict=True), "exactly 0.9 counts"),
    "a majority": (_slip(threshold=0.5), "not a majority"),
    "90 for 0.9": (_slip(threshold=90), "0.9 (not 90)"),
    "the direction flipped": (_slip(sign=-1), "direction flipped"),
    "0 for not positional": (_zero_for_no, "None, not 0"),
    "never positional": (lambda w, n: None, "0.9 (not 90)"),
    "the library": (_library, "calls the library"),
    "writes into the weights": (_writes_into_the_weights, "weights"),
}


@pytest.mark.parametrize("name", WRONG_19_1)
def test_19_1_rejects_each_slip_with_its_hint(name):
    answer, words = WRONG_19_1[name]
    assert words in _fails(checks.check_19_1, answer)


def test_19_1_each_slip_gives_other_verdicts_than_every_other():
    """The check names a slip by its verdicts on the check's heads: no two slips (nor a
    slip and the right answer) may give the same list."""
    from checks.lesson19 import _SLIPS, _cases, _verdict

    cases = _cases()
    lists = [tuple(_verdict(w, n, **flags) for _, w, n, _ in cases) for flags, _ in _SLIPS]
    assert len(set(lists)) == len(lists)
    assert tuple(v for *_, v in cases) not in lists
    for _, w, n, _ in cases:  # real rows sum to 1, padded keys get nothing
        rows = np.arange(w.shape[1])[None, :] < n[:, None]
        np.testing.assert_allclose(w.sum(-1)[rows], 1.0)
        for b, k in enumerate(n):
            assert not w[b, :, k:].any()


# ------------------------------------------------------------------ 19.2
def _one_sided(loss_at, n, eps):
    base = loss_at(np.ones(n))
    out = []
    for h in range(n):
        up = np.ones(n)
        up[h] += eps
        out.append(abs(loss_at(up) - base) / eps)
    return out


def _signed(loss_at, n, eps):
    return [
        (loss_at(np.ones(n) + eps * np.eye(n)[h]) - loss_at(np.ones(n) - eps * np.eye(n)[h]))
        / (2 * eps)
        for h in range(n)
    ]


WRONG_19_2 = {
    "one-sided": (_one_sided, "both ways"),
    "signed": (_signed, "negative"),
    "twice": (lambda f, n, e: 2 * s19.importance_by_differences(f, n, e), "2·eps apart"),
}


@pytest.mark.parametrize("name", WRONG_19_2)
def test_19_2_rejects_wrong_scores(name):
    answer, words = WRONG_19_2[name]
    assert words in _fails(checks.check_19_2, answer)


def test_19_2_accepts_a_list_and_a_tensor():
    listed = lambda f, n, e: list(s19.importance_by_differences(f, n, e))  # noqa: E731
    tensor = lambda f, n, e: mt.Tensor(s19.importance_by_differences(f, n, e))  # noqa: E731
    assert checks.check_19_2(listed) == checks.check_19_2(tensor) == checks.CORRECT


# ------------------------------------------------------------------ the notebook
def test_ships_placeholders_and_calls_each_check_once():
    assert_ships_placeholders(NOTEBOOK, 19, ["19_1", "19_2"],
                              ["positional_offset", "importance_by_differences"])  # fmt: skip


def test_no_cell_gives_an_exercise_away_before_it():
    """Nothing above exercise 1 takes an argmax of the weights or states Voita's rule with
    its threshold; no finite difference before exercise 2. The lesson's own computation of
    the criterion comes after exercise 1."""
    before_1 = code_before(NOTEBOOK, "positional_offset")
    for giveaway in ("argmax", "0.9", "VOITA", "t - 1", "t + 1"):
        assert giveaway not in before_1, giveaway
    text = "\n".join(markdown_cells(NOTEBOOK))
    exercise = text.index("Exercise 1")
    assert "argmax" not in text[:exercise]
    cells = code_cells(NOTEBOOK)
    after = "\n".join(cells[cells.index(next(c for c in cells if "check_19_1(" in c)) :])
    assert "argmax(" in after  # the lesson computes the criterion itself, after
    before_2 = code_before(NOTEBOOK, "importance_by_differences")
    assert not re.search(r"\beps\b", before_2) and "2 *" not in before_2  # ("steps" is fine)
