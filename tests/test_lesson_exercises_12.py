"""Lesson 12, exercise 1 (the projections, counted: the first n at which self-attention with
its four projections needs at least as many multiply-adds as a recurrent layer with g gates):
the check rejects the mistakes a learner makes and accepts a right answer in any valid form
(int, NumPy integer, integral float, a search instead of a formula). The shared cases (the
solution, the placeholder, four wrong answers) are in tests/test_lesson_exercises.py."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
sys.path.insert(0, str(LESSONS))
checks = importlib.import_module("checks")
s12 = importlib.import_module("solutions.lesson12")


def _search(d, g):
    """A right answer by counting, as section 7 does: the four projections and the core
    against the gates' input and recurrent products, n = 1, 2, ... until attention costs as
    much."""
    n = 1
    while 2 * n * n * d + 4 * n * d * d < 2 * g * n * d * d:
        n += 1
    return n


def _search_products(d, g):
    """Another right one: (m, p) @ (p, q) products listed and counted as m·p·q."""

    def macs(products):
        return sum(m * p * q for m, p, q in products)

    n = 1
    while True:
        attention = [(n, d, d)] * 4 + [(n, d, n), (n, n, d)]  # projections, x xᵀ, a V
        recurrent = [(1, d, d)] * (2 * g * n)  # per position and gate: input and recurrent
        if macs(attention) >= macs(recurrent):
            return n
        n += 1


VALID = {
    "the solution": s12.attention_stops_cheaper,
    "a search": _search,
    "products counted": _search_products,
    "float": lambda d, g: float(max(1, (g - 2) * d)),
    "np.int64": lambda d, g: np.int64(max(1, (g - 2) * d)),
    "np.float32": lambda d, g: np.float32(max(1.0, (g - 2.0) * d)),
    "np.maximum": lambda d, g: np.maximum(1, d * (g - 2)),
    "ceil of a ratio": lambda d, g: max(1, math.ceil(d * (2 * g - 4) / 2)),
}

WRONG = {
    "projections left out (section 7's core)": lambda d, g: g * d,
    "the last cheaper n": lambda d, g: max(1, (g - 2) * d - 1),
    "no floor at n = 1": lambda d, g: (g - 2) * d,
    "strict: attention more expensive": lambda d, g: max(1, (g - 2) * d + 1),
    "three projections (W_o forgotten)": lambda d, g: max(1, math.ceil((g - 1.5) * d)),
    "one product per gate": lambda d, g: max(1, math.ceil((g / 2 - 2) * d)),
    "projections counted twice": lambda d, g: max(1, (g - 4) * d),
    "never cheaper, whatever g": lambda d, g: 1,
    "n = d, whatever g": lambda d, g: d,
    "not a whole number": lambda d, g: max(1, (g - 2) * d) + 0.5,
    "a bool": lambda d, g: True,
    "a string": lambda d, g: str(max(1, (g - 2) * d)),
    "None": lambda d, g: None,
    "the crossover in d units": lambda d, g: max(1, g - 2),
}


@pytest.mark.parametrize("name", VALID)
def test_valid_forms_pass(name, capsys):
    assert checks.check_12_1(VALID[name]) == checks.CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", WRONG)
def test_wrong_answers_fail(name):
    with pytest.raises(AssertionError):
        checks.check_12_1(WRONG[name])


def test_placeholder_is_not_attempted(capsys):
    def placeholder(d, g):
        raise NotImplementedError("exercise 1")

    assert checks.check_12_1(placeholder) is checks.NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (lambda d, g: g * d, "projections"),
        (lambda d, g: max(1, (g - 2) * d + 1), "equality"),
        (lambda d, g: (g - 2) * d, "at least 1"),
        (lambda d, g: max(1, math.ceil((g / 2 - 2) * d)), "still needs fewer"),
        (lambda d, g: 2.5, "whole number"),
    ],
)
def test_hints_point_where_to_look_without_the_formula(answer, says):
    with pytest.raises(AssertionError) as info:
        checks.check_12_1(answer)
    message = str(info.value)
    assert says in message
    assert "g - 2" not in message and "(g−2)" not in message and "n^2" not in message
