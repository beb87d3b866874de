"""Lesson 18 (scaling laws): its exercise checks pass the reference solutions and every valid
form of a right answer, print "not attempted yet" for the placeholders, fail wrong answers
with a hint, and meet garbage with an AssertionError (never another exception); the notebook
gives no exercise away before its cell.

- 18.1 (a power law by least squares in log space): a fit of the losses themselves, a flipped
  sign, ln a for a, the pair swapped fail;
- 18.2 (predict the largest size from the others): a fit that keeps the largest point, the
  measured loss itself, "the last point is the largest" on unsorted points fail;
- 18.3 (training compute 6·N·D with N counted exactly): 12·L·d² (the weights alone), the
  forward pass alone, LayerNorms or biases left out fail.
- Issue 28: the library's ``scaling.fit_power_law`` (18.1, 18.2) and a model built to count
  its parameters, as section 2's table does (18.3), fail with a hint: the exercises are what
  they compute.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
from minitransformer.tools import scaling

NOTEBOOK = LESSONS / "18_the_curve_kept_bending.ipynb"
s18 = importlib.import_module("solutions.lesson18")


def _placeholder(*args):
    raise NotImplementedError("exercise")


# ------------------------------------------------------------------ the three checks
CHECKS = {
    "18_1": (checks.check_18_1, s18.fit_power_law),
    "18_2": (checks.check_18_2, s18.predict_largest),
    "18_3": (checks.check_18_3, s18.training_compute),
}


@pytest.mark.parametrize("name", CHECKS)
def test_the_solution_passes(name, capsys):
    check, solution = CHECKS[name]
    assert check(solution) == checks.CORRECT
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHECKS)
def test_the_placeholder_is_not_attempted(name, capsys):
    check, _ = CHECKS[name]
    assert check(_placeholder) is checks.NOT_ATTEMPTED
    assert check(None) is checks.NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


GARBAGE = [
    lambda *a: None,
    lambda *a: "0.5",
    lambda *a: {"a": 1.0},
    lambda *a: [1.0, 2.0, 3.0],
    lambda *a: float("nan"),
    lambda *a: np.zeros((2, 2)),
    lambda *a: (1.0, "x"),
    lambda *a: [[1.0], 2.0],
]


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize("garbage", range(len(GARBAGE)))
def test_garbage_gets_an_assertion_with_a_hint(name, garbage):
    check, _ = CHECKS[name]
    message = _fails(check, GARBAGE[garbage])
    assert "return" in message or "Hint" in message


# ------------------------------------------------------------------ 18.1
def _polyfit(n, loss):
    slope, intercept = np.polyfit(np.log10(n), np.log10(loss), 1)
    return [10**intercept, -slope]  # base 10 and a list: as valid as (a, alpha)


def _lstsq(n, loss):
    A = np.stack([np.ones(len(n)), -np.log(n)], axis=1)
    (log_a, alpha), *_ = np.linalg.lstsq(A, np.log(loss), rcond=None)
    return np.array([np.exp(log_a), alpha], dtype=np.float32).astype(np.float64)


@pytest.mark.parametrize("answer", [_polyfit, _lstsq])
def test_18_1_accepts_every_valid_form(answer):
    assert checks.check_18_1(answer) == checks.CORRECT


def _linear_space(n, loss):  # a straight line through the losses, not their logs
    slope, intercept = np.polyfit(np.log(n), loss, 1)
    return intercept, -slope


WRONG_FITS = {
    "losses, not their logs": (_linear_space, "logarithms"),
    "the sign of alpha": (
        lambda n, loss: (s18.fit_power_law(n, loss)[0], -s18.fit_power_law(n, loss)[1]),
        "sign",
    ),  # fmt: skip
    "ln a for a": (
        lambda n, loss: (np.log(s18.fit_power_law(n, loss)[0]), s18.fit_power_law(n, loss)[1]),
        "intercept",
    ),  # fmt: skip
    "swapped": (lambda n, loss: s18.fit_power_law(n, loss)[::-1], "Hint"),
    "alpha alone": (lambda n, loss: s18.fit_power_law(n, loss)[1], "(a, alpha)"),
}


@pytest.mark.parametrize("name", WRONG_FITS)
def test_18_1_rejects_wrong_fits(name):
    answer, words = WRONG_FITS[name]
    assert words in _fails(checks.check_18_1, answer)


# ------------------------------------------------------------------ 18.3 (compute)
def _layer(d, d_ff, biases=True, norms=True):
    weights = 4 * d * d + 2 * d * d_ff
    return weights + (4 * d + d_ff + d if biases else 0) + (4 * d if norms else 0)


WRONG_COMPUTE = {
    "12·L·d²": (lambda d, L, d_ff, D: 6 * 12 * L * d * d * D, "biases and the LayerNorms"),
    "weights only": (lambda d, L, d_ff, D: 6 * L * _layer(d, d_ff, False, False) * D, "biases"),
    "forward only": (lambda d, L, d_ff, D: 2 * L * _layer(d, d_ff) * D, "backward"),
    "no LayerNorm": (lambda d, L, d_ff, D: 6 * L * _layer(d, d_ff, norms=False) * D, "LayerNorm"),
    "no biases": (lambda d, L, d_ff, D: 6 * L * _layer(d, d_ff, biases=False) * D, "bias"),
    "N·D, no 6": (lambda d, L, d_ff, D: L * _layer(d, d_ff) * D, "Hint"),
}


@pytest.mark.parametrize("name", WRONG_COMPUTE)
def test_18_3_rejects_wrong_counts(name):
    answer, words = WRONG_COMPUTE[name]
    assert words in _fails(checks.check_18_3, answer)


def test_18_3_accepts_numpy_and_float_answers():
    assert checks.check_18_3(lambda *a: np.int64(s18.training_compute(*a))) == checks.CORRECT
    assert checks.check_18_3(lambda *a: float(s18.training_compute(*a))) == checks.CORRECT


# ------------------------------------------------------------------ 18.2 (backtest)
def _keeps_the_largest(n, loss):
    a, alpha = s18.fit_power_law(n, loss)
    return a * max(n) ** -alpha


def _last_is_largest(n, loss):  # true only when the points come sorted
    a, alpha = s18.fit_power_law(n[:-1], loss[:-1])
    return a * n[-1] ** -alpha


WRONG_PREDICTIONS = {
    "fit keeps the largest": (_keeps_the_largest, "leave the largest size out"),
    "the measured loss": (lambda n, loss: loss[int(np.argmax(n))], "measured loss itself"),
    "last point is the largest": (_last_is_largest, "not sorted"),
}


@pytest.mark.parametrize("name", WRONG_PREDICTIONS)
def test_18_2_rejects_wrong_predictions(name):
    answer, words = WRONG_PREDICTIONS[name]
    assert words in _fails(checks.check_18_2, answer)


# ------------------------------------------------------------------ the notebook
def _first(cells: list[str], marker: str) -> int:
    found = [i for i, c in enumerate(cells) if marker in c]
    assert found, f"no code cell of lesson 18 contains {marker!r}"
    return found[0]


def test_no_cell_gives_an_exercise_away_before_it():
    """The library's fit, any least-squares call and the compute formula appear only after
    the exercise that asks for them."""
    cells = code_cells(NOTEBOOK)
    ex1, ex2, ex3 = (_first(cells, f"checks.check_18_{k}(") for k in (1, 2, 3))
    before_1 = "\n".join(cells[:ex1])
    for marker in ("scaling.fit_", "polyfit", "lstsq", "scaling.plot(", "local_exponents"):
        assert marker not in before_1, f"{marker!r} appears before exercise 1's check"
    assert "predict" not in "\n".join(cells[:ex2]).replace("predict_largest", "")
    assert "6 *" not in "\n".join(cells[:ex3]) and "6.0 *" not in "\n".join(cells[:ex3])


# ------------------------------------------------------------------ the library (issue 28)
def _library_fit(n, loss):
    law = scaling.fit_power_law(n, loss)
    return law.a, law.alpha


def _library_backtest(n, loss):
    n, loss = np.asarray(n), np.asarray(loss)
    keep = n < n.max()
    return float(scaling.fit_power_law(n[keep], loss[keep])(n.max()))


def _built_and_counted(d_model, layers, d_ff, tokens):  # section 2's table, adapted
    lm = mt.nn.TransformerLM(vocab=11, d_model=d_model, h=1, N=layers, d_ff=d_ff, max_len=8)
    return 6 * scaling.non_embedding_parameters(lm) * tokens


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (checks.check_18_1, _library_fit),
        (checks.check_18_2, _library_backtest),
        (checks.check_18_3, _built_and_counted),
    ],
    ids=["18_1", "18_2", "18_3"],
)
def test_the_library_does_not_answer_them(check, answer):
    assert "calls the library" in _fails(check, answer)
