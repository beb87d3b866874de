"""Lesson 07 (positional encoding), issue 28.

- 07.1 (the wavelengths): the text above no longer states λ_i = 2π/ω_i (nor the clocks'
  "a full turn every 2π·10000 positions", false for any finite d_model); 1/ω, ω, the exponent
  i/D and the reversed order each get their own hint.
- 07.3 (a test for permutation equivariance): the cell above prints the gap
  |f(x_π) − f(x)_π|, so "gap < 1e-6" was one step away and passed; the check now has a position
  signal of 1e-9 in float64, so only a tolerance that follows the dtype passes (the task asks
  for the rounding of x's dtype "and no more").
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, markdown_cells
from lesson_notebooks import hint_of as _fails

NOTEBOOK = LESSONS / "07_positional_encoding.ipynb"
s7 = importlib.import_module("solutions.lesson07")


def _omega(D):
    return 10000.0 ** (-2 * np.arange(D // 2) / D)


WAVELENGTH_WRONG = {
    "1/omega": (lambda D: 1 / _omega(D), "2π radians"),
    "omega": (lambda D: _omega(D), "how fast pair i turns"),
    "exponent i/D": (lambda D: 2 * np.pi * 10000.0 ** (np.arange(D // 2) / D), "exponent"),
    "reversed": (lambda D: (2 * np.pi / _omega(D))[::-1], "reversed"),
    "other": (lambda D: np.ones(D // 2), "a full turn"),
}


@pytest.mark.parametrize("name", WAVELENGTH_WRONG)
def test_07_1_each_mistake_has_its_hint(name):
    answer, hint = WAVELENGTH_WRONG[name]
    assert hint in _fails(checks.check_07_1, answer)


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


def test_no_text_before_the_exercises_gives_the_wavelength():
    text = "\n".join(markdown_cells(NOTEBOOK))
    before = text[: text.index("## Exercises")]
    for answer in (
        r"2\pi/\omega",
        r"\lambda_i =",
        r"2\pi\cdot 10000$ positions",
        "wavelengths from",
    ):
        assert answer not in before, answer
