"""Lesson 18 (scaling laws): its exercise checks pass the reference solutions and every valid
form of a right answer, print "not attempted yet" for the placeholders, fail wrong answers
with a hint, and meet garbage with an AssertionError (never another exception); the notebook
gives no exercise away before its cell.

- 18.1 (a power law by the normal equations): np.polyfit, np.linalg.lstsq, np.linalg.pinv,
  NumPy's Polynomial.fit and SciPy's linregress fail (a one-call fit, issue 46); a fit of the
  losses themselves, a flipped sign, ln a for a, the pair swapped, cov and var divided by
  different counts, the regression of ln n on ln L fail; np.cov with matching counts, the
  2×2 normal equations by np.linalg.solve, plain Python sums, base-10 logarithms pass.
- 18.2 (the compute-optimal size, issue 46 item 6): the vertex of the parabola in ln N through
  the lowest point and its neighbours. The measured best size, ln N for N, a parabola in N,
  the evenly spaced formula, a least-squares parabola through all points and np.polyfit fail;
  log10, np.linalg.solve and plain Python pass.
- 18.3 (attention's FLOPs in a causal, padded batch; review rows 12-13): the padded batch's
  count, every query reading its whole sequence, t − 1 keys, the forward alone, one product,
  n_ctx = the mean or the longest length, the layers left out fail; floats, NumPy integers and
  loops pass.
- Issue 28: the library's ``scaling.fit_power_law`` (18.1) fails with a hint.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_before, code_cells, markdown_cells
from lesson_notebooks import hint_of as _fails

from minitransformer.tools import scaling

NOTEBOOK = LESSONS / "18_the_curve_kept_bending.ipynb"
s18 = importlib.import_module("solutions.lesson18")


def _placeholder(*args):
    raise NotImplementedError("exercise")


# ------------------------------------------------------------------ the three checks
CHECKS = {
    "18_1": (checks.check_18_1, s18.fit_power_law),
    "18_2": (checks.check_18_2, s18.optimal_size),
    "18_3": (checks.check_18_3, s18.attention_flops),
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
def _logs(n, loss):
    return np.log(np.asarray(n, float)), np.log(np.asarray(loss, float))


def _by_cov(n, loss):  # np.cov for both: the same count n − 1
    u, v = _logs(n, loss)
    c = np.cov(u, v)
    slope = c[0, 1] / c[0, 0]
    return np.exp(v.mean() - slope * u.mean()), -slope


def _by_solve(n, loss):  # the 2×2 normal equations AᵀA β = Aᵀv, solved
    u, v = _logs(n, loss)
    A = np.stack([np.ones_like(u), u], axis=1)
    c, slope = np.linalg.solve(A.T @ A, A.T @ v)
    return [float(np.exp(c)), float(-slope)]


def _by_sums(n, loss):  # plain Python, base 10
    u, v = [math.log10(x) for x in n], [math.log10(y) for y in loss]
    k = len(u)
    su, sv = sum(u), sum(v)
    suu, suv = sum(x * x for x in u), sum(x * y for x, y in zip(u, v, strict=True))
    slope = (k * suv - su * sv) / (k * suu - su * su)
    return 10 ** ((sv - slope * su) / k), -slope


@pytest.mark.parametrize("answer", [_by_cov, _by_solve, _by_sums])
def test_18_1_accepts_every_valid_form(answer):
    assert checks.check_18_1(answer) == checks.CORRECT


def _polyfit(n, loss):
    slope, intercept = np.polyfit(np.log(n), np.log(loss), 1)
    return np.exp(intercept), -slope


def _lstsq(n, loss):
    u, v = _logs(n, loss)
    A = np.stack([np.ones(len(u)), -u], axis=1)
    (log_a, alpha), *_ = np.linalg.lstsq(A, v, rcond=None)
    return np.exp(log_a), alpha


def _pinv(n, loss):
    u, v = _logs(n, loss)
    log_a, alpha = np.linalg.pinv(np.stack([np.ones(len(u)), -u], axis=1)) @ v
    return np.exp(log_a), alpha


def _polynomial(n, loss):
    c0, c1 = np.polynomial.Polynomial.fit(*_logs(n, loss), 1).convert().coef
    return np.exp(c0), -c1


def _linregress(n, loss):  # SciPy is not a dependency: the test skips this one without it
    stats = pytest.importorskip("scipy.stats")
    r = stats.linregress(*_logs(n, loss))
    return np.exp(r.intercept), -r.slope


@pytest.mark.parametrize("answer", [_polyfit, _lstsq, _pinv, _polynomial, _linregress])
def test_18_1_refuses_a_one_call_fit(answer):
    message = _fails(checks.check_18_1, answer)
    assert "fitting routine" in message and "cov(u, v) / var(u)" in message


def _linear_space(n, loss):  # a straight line through the losses, not their logs
    u, v = np.log(np.asarray(n, float)), np.asarray(loss, float)
    du = u - u.mean()
    slope = du @ (v - v.mean()) / (du @ du)
    return v.mean() - slope * u.mean(), -slope


def _mixed_counts(n, loss):  # np.cov (÷ k − 1) over np.var (÷ k)
    u, v = _logs(n, loss)
    slope = np.cov(u, v)[0, 1] / np.var(u)
    return np.exp(v.mean() - slope * u.mean()), -slope


def _x_on_y(n, loss):  # the variance of ln L in the denominator
    u, v = _logs(n, loss)
    slope = np.mean((u - u.mean()) * (v - v.mean())) / np.var(v)
    return np.exp(v.mean() - slope * u.mean()), -slope


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
    "cov and var by different counts": (_mixed_counts, "different counts"),
    "ln n on ln L": (_x_on_y, "variance of ln n"),
}


@pytest.mark.parametrize("name", WRONG_FITS)
def test_18_1_rejects_wrong_fits(name):
    answer, words = WRONG_FITS[name]
    assert words in _fails(checks.check_18_1, answer)


# ------------------------------------------------------------------ 18.2 (the vertex)
def _three(n, loss, log=np.log):
    x, y = log(np.asarray(n, float)), np.asarray(loss, float)
    i = int(np.argmin(y))
    return x[i - 1 : i + 2], y[i - 1 : i + 2]


def _by_solve_log10(n, loss):  # base 10, the 3×3 system solved
    x, y = _three(n, loss, np.log10)
    c0, c1, c2 = np.linalg.solve(np.stack([np.ones(3), x, x * x], axis=1), y)
    return 10 ** (-c1 / (2 * c2))


def _by_differences(n, loss):  # plain Python: divided differences
    (x1, x2, x3), (y1, y2, y3) = (list(map(float, a)) for a in _three(n, loss))
    s12, s23 = (y2 - y1) / (x2 - x1), (y3 - y2) / (x3 - x2)
    c2 = (s23 - s12) / (x3 - x1)
    c1 = s12 - c2 * (x1 + x2)
    return math.exp(-c1 / (2 * c2))


@pytest.mark.parametrize("answer", [_by_solve_log10, _by_differences])
def test_18_2_accepts_every_valid_form(answer):
    assert checks.check_18_2(answer) == checks.CORRECT


def _in_n(n, loss):
    x, y = _three(n, loss, lambda a: a)
    c0, c1, c2 = np.linalg.solve(np.stack([np.ones(3), x, x * x], axis=1), y)
    return -c1 / (2 * c2)


def _evenly(n, loss):
    (x1, x2, x3), (y1, y2, y3) = _three(n, loss)
    return math.exp(x2 + (x3 - x2) / 2 * (y1 - y3) / (y1 - 2 * y2 + y3))


def _all_points(n, loss):
    x, y = np.log(np.asarray(n, float)), np.asarray(loss, float)
    X = np.stack([np.ones_like(x), x, x * x], axis=1)
    c0, c1, c2 = np.linalg.solve(X.T @ X, X.T @ y)
    return math.exp(-c1 / (2 * c2))


def _polyfit_vertex(n, loss):
    c2, c1, _ = np.polyfit(*_three(n, loss), 2)
    return math.exp(-c1 / (2 * c2))


WRONG_VERTICES = {
    "the measured best size": (lambda n, loss: n[int(np.argmin(loss))], "lowest loss"),
    "ln N": (lambda n, loss: math.log(s18.optimal_size(n, loss)), "return the size N itself"),
    "a parabola in N": (_in_n, "parabola is in N itself"),
    "evenly spaced": (_evenly, "not evenly spaced"),
    "all points": (_all_points, "through all the points"),
    "np.polyfit": (_polyfit_vertex, "fitting routine"),
}


@pytest.mark.parametrize("name", WRONG_VERTICES)
def test_18_2_rejects_wrong_vertices(name):
    answer, words = WRONG_VERTICES[name]
    assert words in _fails(checks.check_18_2, answer)


# ------------------------------------------------------------------ 18.3 (attention FLOPs)
def _loops(lengths, layers, d):  # every query, every key: 4·d forward, ×3 training
    return sum(12 * d for _ in range(layers) for n in lengths for t in range(int(n)) for _ in
               range(t + 1))  # fmt: skip


@pytest.mark.parametrize(
    "answer",
    [
        _loops,
        lambda L, layers, d: float(s18.attention_flops(L, layers, d)),
        lambda L, layers, d: np.int64(s18.attention_flops(L, layers, d)),
        lambda L, layers, d: np.array([s18.attention_flops(L, layers, d)]),
        lambda L, layers, d: 6 * layers * d * float(np.sum(np.asarray(L) * (np.asarray(L) + 1))),
    ],
    ids=["loops", "float", "np.int64", "one-element array", "vectorised"],
)
def test_18_3_accepts_every_valid_form(answer):
    assert checks.check_18_3(answer) == checks.CORRECT


def _sq(lengths):
    return sum(int(n) ** 2 for n in lengths)


def _tri(lengths):  # Σ L(L+1)
    return sum(int(n) * (int(n) + 1) for n in lengths)


WRONG_FLOPS = {
    "padded, every query reads T_max": (
        lambda L, nl, d: 12 * nl * d * len(L) * max(L) ** 2, "read the padding"),
    "padded and causal": (
        lambda L, nl, d: 6 * nl * d * len(L) * max(L) * (max(L) + 1), "no query"),
    "not causal": (lambda L, nl, d: 12 * nl * d * _sq(L), "causal"),
    "t − 1 keys": (lambda L, nl, d: 6 * nl * d * sum(int(n) * (int(n) - 1) for n in L), "own"),
    "forward only": (lambda L, nl, d: 2 * nl * d * _tri(L), "backward"),
    "one product": (lambda L, nl, d: 3 * nl * d * _tri(L), "two products"),
    "n_ctx = the mean length": (lambda L, nl, d: 6 * nl * d * sum(L) * np.mean(L), "mean length"),
    "n_ctx = the longest": (lambda L, nl, d: 6 * nl * d * sum(L) * max(L), "longest"),
    "layers left out": (lambda L, nl, d: 6 * d * _tri(L), "multiply by the layers"),
}  # fmt: skip


@pytest.mark.parametrize("name", WRONG_FLOPS)
def test_18_3_rejects_wrong_counts(name):
    answer, words = WRONG_FLOPS[name]
    assert words in _fails(checks.check_18_3, answer)


# ------------------------------------------------------------------ the notebook
def test_no_cell_gives_an_exercise_away_before_it():
    """The library's fit, any least-squares call, the parabola's vertex and attention's FLOPs
    appear only after the exercise that asks for them (code and text)."""
    before_1 = code_before(NOTEBOOK, "fit_power_law")
    for marker in ("scaling.fit_", "polyfit", "lstsq", "scaling.plot(", "local_exponents",
                   "np.cov", "np.var"):  # fmt: skip
        assert marker not in before_1, f"{marker!r} appears before exercise 1"
    before_2 = code_before(NOTEBOOK, "optimal_size")
    for marker in ("polyfit", "vertex", "argmin", "isoflop"):
        assert marker not in before_2, f"{marker!r} appears before exercise 2"
    before_3 = code_before(NOTEBOOK, "attention_flops")
    for marker in ("+ 1)", "keys_read", "n_ctx"):
        assert marker not in before_3, f"{marker!r} appears before exercise 3"
    text = markdown_cells(NOTEBOOK)
    cells = code_cells(NOTEBOOK)
    assert cells.index(next(c for c in cells if "def optimal_size(" in c)) < cells.index(
        next(c for c in cells if "BUDGETS.items()" in c and "run_size(" in c)
    ), "the lesson's IsoFLOP study must run after exercise 2"
    ex3 = next(i for i, t in enumerate(text) if "Exercise 3" in t)
    assert not any("L(L+1)" in t or "L(L + 1)" in t for t in text[: ex3 + 1])


def test_the_size_sweep_has_two_layers_or_more():
    """Kaplan et al. leave models of fewer than two layers out of their trend (review row 10)."""
    source = "\n".join(code_cells(NOTEBOOK))
    assert "scaling.Size(" in source
    assert "layers=1" not in source and ", 1)" not in source.split("SWEEP_SIZES")[1][:400]


# ------------------------------------------------------------------ the library (issue 28)
def _library_fit(n, loss):
    law = scaling.fit_power_law(n, loss)
    return law.a, law.alpha


def test_the_library_does_not_answer_them():
    assert "calls the library" in _fails(checks.check_18_1, _library_fit)
