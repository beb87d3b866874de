"""Lesson 19 (what the heads do): its exercise checks accept other valid forms of a right
answer and fail wrong answers with a hint; the notebook ships placeholders and gives no
exercise away before its cell (the solutions and placeholders: CASES_19 in
test_lesson_exercises.py; garbage answers: test_lesson_checks_robust.py).

- 19.1 (the entropy of attention rows): log(0) left in (NaN), log base 2, no minus sign, a
  sum over every axis, and the library's ``heads.head_stats`` fail;
- 19.2 (importance by central differences): a one-sided difference, the signed derivative,
  twice the derivative fail.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, assert_ships_placeholders, checks, code_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
from minitransformer.tools import heads

NOTEBOOK = LESSONS / "19_what_the_heads_do.ipynb"
s19 = importlib.import_module("solutions.lesson19")

# the solutions passing and the placeholders "not attempted": CASES_19 in
# test_lesson_exercises.py


# garbage answers (a string, a number, a raising function...): tests/test_lesson_checks_robust.py


# ------------------------------------------------------------------ 19.1
def _per_row(p):  # one row at a time, in plain Python
    a = np.asarray(p, dtype=float)
    flat = a.reshape(-1, a.shape[-1])
    out = [-sum(x * np.log(x) for x in row if x > 0) for row in flat]
    return np.array(out).reshape(a.shape[:-1])


def _tensor(p):  # the answer as a library Tensor (no library call inside: built after)
    return s19.row_entropy(p).tolist()


@pytest.mark.parametrize(
    "answer", [_per_row, _tensor, lambda p: list(np.ravel(s19.row_entropy(p)))]
)
def test_19_1_accepts_every_valid_form(answer):
    assert checks.check_19_1(answer) == checks.CORRECT


def _nan_at_zero(p):
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -(p * np.log(p)).sum(-1)


WRONG_19_1 = {
    "log(0) left in": (_nan_at_zero, "NaN"),
    "bits": (lambda p: s19.row_entropy(p) / np.log(2), "nats"),
    "no minus": (lambda p: -s19.row_entropy(p), "never negative"),
    "every axis": (lambda p: np.full(np.shape(p)[:-1], s19.row_entropy(p).sum()), "last axis"),
    "the library": (
        lambda p: heads.head_stats(np.asarray(p, dtype=float).reshape(1, 1, -1, np.shape(p)[-1]))[
            "entropy"
        ],
        "calls the library",
    ),
}


@pytest.mark.parametrize("name", WRONG_19_1)
def test_19_1_rejects_wrong_entropies(name):
    answer, words = WRONG_19_1[name]
    assert words in _fails(checks.check_19_1, answer)


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
                              ["row_entropy", "importance_by_differences"])  # fmt: skip


def _first(cells, marker):
    return next(i for i, c in enumerate(cells) if marker in c)


def test_no_cell_gives_an_exercise_away_before_it():
    """No logarithm of weights before exercise 1, no finite difference before exercise 2."""
    cells = code_cells(NOTEBOOK)
    ex1, ex2 = (
        _first(cells, f"def {name}(") for name in ("row_entropy", "importance_by_differences")
    )
    before_1 = "\n".join(cells[:ex1])
    assert "np.log" not in before_1 and "heads.head_stats(" not in before_1
    before_2 = "\n".join(cells[:ex2])
    assert "eps" not in before_2 and "2 *" not in before_2
