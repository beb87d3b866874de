"""Lesson 09 (training): its exercise checks reject the mistakes a learner makes, each with its
own hint, and accept every valid form of a right answer; the cells under the checks run with
the reference solutions; the lesson does not give the answers away.

- 09.1 (the step at which the schedule has decayed to frac × its peak): a 1/s decay, the
  warm-up branch, a stray d_model, s ∝ frac^-1/2 fail with different hints; a whole step,
  NumPy scalars, a Tensor, a form that solves the library's schedule pass;
- 09.2 (lim_{V→∞} floor − ε log V): nan or an error at ε = 0 points at 0·log 0; a missing
  term, a sign flip and base-2 logs get their own hints; float32 answers, a numerical limit
  at huge V and guarded NumPy forms pass;
- 09.3 (Adam's update when the first non-zero gradient comes at update t): a sign error, a
  missing ε, ε inside the root, update 1's formula and no bias correction get different
  hints; the library itself, an equivalent rearrangement and float32 pass.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks
from lesson_notebooks import hint_of as _hint

import minitransformer as mt
from minitransformer import optim
from minitransformer.train.evaluation import smoothed_loss_floor

NOTEBOOK = LESSONS / "09_training.ipynb"
s9 = importlib.import_module("solutions.lesson09")


def _passes(check, answer, capsys) -> None:
    assert check(answer) == checks.CORRECT
    assert "✓" in capsys.readouterr().out


# ------------------------------------------------------------------ 09.1
WRONG_1 = {
    "decays as 1/s": (lambda f, d, w: w / f, "not as 1/s"),
    "the warm-up branch": (lambda f, d, w: f * w, "before the peak"),
    "d_model kept": (lambda f, d, w: d**0.5 * w / f**2, "d_model^-0.5 multiplies"),
    "square root, not square": (lambda f, d, w: w / math.sqrt(f), "which power"),
    "a rate, not a step": (lambda f, d, w: f * (d * w) ** -0.5, "not a learning rate"),
    "nothing returned": (lambda f, d, w: None, "return numbers"),
    "raises": (lambda f, d, w: 1 / 0, "ZeroDivisionError"),
    "other": (lambda f, d, w: 2 * w / f**2, "solve for s"),
}


@pytest.mark.parametrize("name", WRONG_1)
def test_09_1_each_mistake_has_its_hint(name):
    answer, hint = WRONG_1[name]
    assert hint in _hint(checks.check_09_1, answer)


def _by_bisection(f, d, w):  # solve the library's schedule numerically: a valid answer
    peak = optim.NoamSchedule.rate(w, d, w)
    lo, hi = float(w), 1e12
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if optim.NoamSchedule.rate(mid, d, w) > f * peak else (lo, mid)
    return lo


VALID_1 = {
    "whole step (round)": lambda f, d, w: round(w / f**2),
    "whole step (ceil)": lambda f, d, w: math.ceil(w / f**2),
    "numpy": lambda f, d, w: np.float64(w) * np.power(f, -2.0),
    "float32": lambda f, d, w: np.float32(w / f**2),
    "0-d array": lambda f, d, w: np.asarray(w / f**2),
    "Tensor": lambda f, d, w: mt.tensor(np.array(w / f**2)),
    "d_model kept, cancelling": lambda f, d, w: ((d * w) ** -0.5 * f / d**-0.5) ** -2,
    "bisection on the schedule": _by_bisection,
}


@pytest.mark.parametrize("name", VALID_1)
def test_09_1_accepts_every_valid_form(name, capsys):
    _passes(checks.check_09_1, VALID_1[name], capsys)


# ------------------------------------------------------------------ 09.2
def _unguarded(e):  # the finite-V formula's habit: nan at eps = 0 and eps = 1
    return -(1 - e) * np.log(1 - e) - e * np.log(e)


WRONG_2 = {
    "nan at eps = 0": (_unguarded, "0·log 0 = 0"),
    "math.log(0) raises": (lambda e: -(1 - e) * math.log(1 - e) - e * math.log(e), "0·log 0 = 0"),
    "correct token left out": (lambda e: -e * math.log(e) if e else 0.0, "own term"),
    "the others' term left out": (
        lambda e: -(1 - e) * math.log(1 - e) if e < 1 else 0.0,
        "expand their term",
    ),
    "sign flipped": (lambda e: -s9.floor_offset(e), "check the signs"),
    "base 2": (lambda e: s9.floor_offset(e) / math.log(2), "natural logarithms"),
    "the floor at V = 14": (lambda e: smoothed_loss_floor(e, 14), "term by term"),
    "two numbers": (lambda e: [s9.floor_offset(e)] * 2, "one"),
    "a string": (lambda e: "0.325", "return numbers"),
}


@pytest.mark.parametrize("name", WRONG_2)
def test_09_2_each_mistake_has_its_hint(name):
    answer, hint = WRONG_2[name]
    assert hint in _hint(checks.check_09_2, answer)


def _numeric_limit(e):  # the library's floor at a huge vocabulary, minus eps log V
    V = 10**12
    return smoothed_loss_floor(e, V) - e * math.log(V)


def _numpy_guarded(e):
    x = np.array([1 - e, e])
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(-np.sum(np.where(x > 0, x * np.log(x), 0.0)))


VALID_2 = {
    "math with guards": s9.floor_offset,
    "numpy where": _numpy_guarded,
    "numerical limit at V = 10^12": _numeric_limit,
    "float32": lambda e: np.float32(s9.floor_offset(e)),
    "Tensor": lambda e: mt.tensor(np.array(s9.floor_offset(e))),
    "one-element list": lambda e: [s9.floor_offset(e)],
}


@pytest.mark.parametrize("name", VALID_2)
def test_09_2_accepts_every_valid_form(name, capsys):
    _passes(checks.check_09_2, VALID_2[name], capsys)


# ------------------------------------------------------------------ 09.3
def _rearranged(g, t, lr, betas, eps=1e-9):  # numerator and denominator times sqrt(1 - b2^t)
    b1, b2 = betas
    c2 = math.sqrt(1 - b2**t)
    return -lr * (1 - b1) * g * c2 / (1 - b1**t) / (math.sqrt(1 - b2) * np.abs(g) + eps * c2)


def _library(g, t, lr, betas, eps=1e-9):
    p = mt.nn.Parameter(np.zeros(np.shape(g)), dtype="float64")
    opt = optim.Adam([p], lr=lr, betas=betas, eps=eps)
    for _ in range(t - 1):
        p.grad = np.zeros(np.shape(g))
        opt.step()
    p.grad = np.array(g, dtype=np.float64)
    before = p.numpy().copy()
    opt.step()
    return mt.tensor(p.numpy() - before)


def _without(*, sign=1.0, eps_zero=False, eps_in_sqrt=False, t_one=False, uncorrected=False):
    """first_gradient_update with one mistake."""

    def answer(g, t, lr, betas, eps=1e-9):
        b1, b2 = betas
        t = 1 if t_one else t
        m, v = (1 - b1) * g, (1 - b2) * g * g
        if not uncorrected:
            m, v = m / (1 - b1**t), v / (1 - b2**t)
        e = 0.0 if eps_zero else eps
        return -sign * lr * m / (np.sqrt(v + e) if eps_in_sqrt else np.sqrt(v) + e)

    return answer


WRONG_3 = {
    "sign": (_without(sign=-1.0), "the sign"),
    "no eps": (_without(eps_zero=True), "right but for ε"),
    "eps inside the root": (_without(eps_in_sqrt=True), "after the square root"),
    "update 1's formula": (_without(t_one=True), "the step of update 1"),
    "no bias correction": (_without(uncorrected=True), "divide by their bias corrections"),
    "plain SGD": (lambda g, t, lr, b, eps=1e-9: -lr * g, "write m_t, v_t"),
    "one number": (lambda g, t, lr, b, eps=1e-9: -lr, "shape"),
    "raises": (lambda g, t, lr, b, eps=1e-9: g[10, 10], "IndexError"),
}


@pytest.mark.parametrize("name", WRONG_3)
def test_09_3_each_mistake_has_its_hint(name):
    answer, hint = WRONG_3[name]
    assert hint in _hint(checks.check_09_3, answer)


VALID_3 = {
    "reference": s9.first_gradient_update,
    "rearranged": _rearranged,
    "the library, as a Tensor": _library,
    "float32": lambda g, t, lr, b, eps=1e-9: s9.first_gradient_update(g, t, lr, b, eps).astype(
        np.float32
    ),
    "a list": lambda g, t, lr, b, eps=1e-9: s9.first_gradient_update(g, t, lr, b, eps).tolist(),
}


@pytest.mark.parametrize("name", VALID_3)
def test_09_3_accepts_every_valid_form(name, capsys):
    _passes(checks.check_09_3, VALID_3[name], capsys)


def test_hints_differ_per_mistake():
    """Different mistakes, different hints (the text after 'Hint:')."""
    for check, wrong in [
        (checks.check_09_1, WRONG_1),
        (checks.check_09_2, WRONG_2),
        (checks.check_09_3, WRONG_3),
    ]:
        hints = [_hint(check, a).partition("Hint:")[2] for a, _ in wrong.values()]
        given = [h for h in hints if h]
        assert len(set(given)) == len(given), given


# ------------------------------------------------------------------ the notebook
def _cells(kind: str) -> list[str]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def _after_check(name: str) -> str:
    code = _cells("code")
    i = next(k for k, c in enumerate(code) if f"checks.{name}(" in c)
    return code[i + 1]


@pytest.mark.parametrize(
    ("check", "answer", "expect"),
    [
        ("check_09_1", {"decay_step": s9.decay_step}, "at step 400,000 (after the end"),
        ("check_09_2", {"floor_offset": s9.floor_offset}, "V = 37,000"),
        ("check_09_3", {"first_gradient_update": s9.first_gradient_update}, "smallest at t ="),
    ],
)
def test_the_cell_under_each_check_runs_with_the_solution(check, answer, expect):
    """Each check cell stores its result; the cell under it uses a right answer (and does
    nothing for the placeholder, which the fast run of the notebook covers)."""
    ns = dict(checks=checks, np=np, math=math, smoothed_loss_floor=smoothed_loss_floor)
    ns.update(EPS_LS=0.1, task=SimpleNamespace(vocab_size=14), **answer)
    ns[f"ex{check[-1]}"] = checks.CORRECT
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(_after_check(check), ns)
    assert expect in out.getvalue(), out.getvalue()


def test_no_cell_before_the_exercises_gives_an_answer_away():
    """The exercise functions are defined only in their placeholder cells, and the text before
    the exercises states none of the three results."""
    code = _cells("code")
    for name in ("decay_step", "floor_offset", "first_gradient_update"):
        assert sum(f"def {name}(" in c for c in code) == 1
    text = "\n".join(_cells("markdown"))
    before = text[: text.index("## Exercises")]
    for answer in ("warmup / frac", "binary entropy", "1 - b1**t", "1 − β₁ᵗ"):
        assert answer not in before, answer
    # the task states the cases where 0·log 0 matters
    assert "ε = 0" in text and "0 \\cdot \\log 0 = 0" in text
