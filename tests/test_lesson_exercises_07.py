"""Lesson 07 (positional encoding), issue 28.

- 07.1 (issue 46): the wavelengths λ_i = 2π/ω_i were one step from the clocks of "The idea in
  plain words"; the exercise now asks for what exercise 2 needs, the fastest pair whose turn
  over the offsets of a given length can be read back ((length − 1)·ω_i < π), or None. The
  slowest pair, a full turn 2π, the length for the largest offset, the exponent i/D, a column
  index, the pair before and a number where None is due each get their own hint; NumPy
  integers, floats and closed forms pass (tests/test_lesson_exercises_alternatives.py).
- 07.3 (a test for permutation equivariance): the cell above prints the gap
  |f(x_π) − f(x)_π|, so "gap < 1e-6" was one step away and passed; the check now has a position
  signal of 1e-9 in float64, so only a tolerance that follows the dtype passes (the task asks
  for the rounding of x's dtype "and no more"). Issue 46: the text says that the gap is the
  cell's and only the tolerance is new.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_before, markdown_cells
from lesson_notebooks import hint_of as _fails

NOTEBOOK = LESSONS / "07_positional_encoding.ipynb"
s7 = importlib.import_module("solutions.lesson07")


def _first_pair(D, largest, turn=np.pi, exponent=2):
    """The first pair whose angle turns by less than ``turn`` over ``largest`` positions."""
    return next((i for i in range(D // 2) if largest * 10000.0 ** (-exponent * i / D) < turn), None)


def _or_minus_one(pair):
    return -1 if pair is None else pair


SAFE_PAIR_WRONG = {
    "the slowest pair": (lambda D, L: D // 2 - 1, "the slowest pair never wraps"),
    "a full turn": (lambda D, L: _first_pair(D, L - 1, turn=2 * np.pi), "half a circle"),
    "length, not length - 1": (lambda D, L: _first_pair(D, L), "at most"),
    "exponent i/D": (lambda D, L: _first_pair(D, L - 1, exponent=1), "check the exponent"),
    "a column index": (lambda D, L: 2 * s7.fastest_safe_pair(D, L), "not a column"),
    "-1 for none": (lambda D, L: _or_minus_one(s7.fastest_safe_pair(D, L)), "return None"),
    "None for all": (lambda D, L: None, "a pair exists"),
    "a string": (lambda D, L: "21", "a whole number"),
}


@pytest.mark.parametrize("name", SAFE_PAIR_WRONG)
def test_07_1_each_mistake_has_its_hint(name):
    answer, hint = SAFE_PAIR_WRONG[name]
    assert hint in _fails(checks.check_07_1, answer)


def test_07_1_the_pair_reads_every_offset_back():
    """The solution's pair, at D = 64 and length 1000, reads back every offset of exercise 2's
    check (positions 0..999); the pair before it does not."""
    table = checks.lesson07.mt.nn.sinusoid_table(1000, 64)
    i = s7.fastest_safe_pair(64, 1000)

    def offsets(pair):
        omega = 10000.0 ** (-2 * pair / 64)
        angle = np.arctan2(table[:, 2 * pair], table[:, 2 * pair + 1])
        got = np.round((angle[None, :] - angle[:, None]) / omega)  # [p, q]: q - p
        return np.array_equal(got, np.subtract.outer(np.arange(1000), np.arange(1000)).T)

    assert offsets(i) and not offsets(i - 1)


def _gap_below(tol):  # the cell's gap with a fixed threshold
    return lambda f, x, p: bool(np.abs(f(x[:, p]) - f(x)[:, p]).max() < tol)


@pytest.mark.parametrize("tol", [1e-6, 1e-8])
def test_07_3_a_fixed_tolerance_fails_on_float64(tol):
    assert "far above the rounding of float64" in _fails(checks.check_07_3, _gap_below(tol))


def test_07_3_a_float64_tolerance_fails_on_float32():
    assert "float32 keeps about 7 digits" in _fails(checks.check_07_3, _gap_below(1e-13))


def test_07_3_a_tolerance_by_dtype_passes():
    def by_dtype(f, x, p):
        a, b = f(x[:, p]), f(x)[:, p]
        tol = 100 * np.finfo(np.asarray(a).dtype).eps * max(1.0, float(np.abs(b).max()))
        return bool(np.abs(a - b).max() <= tol)

    assert checks.check_07_3(by_dtype) == checks.CORRECT


def test_nothing_above_exercise_1_gives_the_safe_pair():
    text = "\n".join(markdown_cells(NOTEBOOK))
    before = text[: text.index("### Exercise 1")]
    for answer in (r"< \pi", "half a turn", "half a circle", "fastest pair", "wrap"):
        assert answer not in before, answer
    code = code_before(NOTEBOOK, "fastest_safe_pair")
    for answer in ("np.pi", "math.pi", "arctan2"):
        assert answer not in code, answer


def test_07_3_says_that_only_the_tolerance_is_new():
    text = "\n".join(markdown_cells(NOTEBOOK))
    exercise = text[text.index("### Exercise 3") :]
    assert "only the decision, the tolerance" in exercise
