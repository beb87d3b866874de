"""Lesson 11 (speed), issues 28 and 46.

- 11.1 (issue 46) replaces a parameter count (the course keeps 06.1) with a roofline reading:
  a float32 GEMM's arithmetic intensity, the time the roofline model gives it and whether it
  is compute- or memory-bound. Each usual mistake (FLOPs without the 2, numbers for bytes, C
  not written or read and written, the inverse ratio, a byte per multiply, the ridge point;
  the sum, the minimum or one term for the time; the bound reversed) gets its own hint;
  lists, NumPy scalars, Tensors and 'compute-bound' pass.
- 11.2 asked for B·H·T·S·itemsize, which section 2 computes in its print; it now asks for the
  weights every attention of the encoder-decoder keeps (N layers: the encoder's (S, S), the
  decoder's (T, T) and its cross-attention's (T, S)). Each miscount gets its own hint; the
  check's oracle is what a built model stores.
- 11.3 (issue 46) replaces a log-log fit read forward (the course keeps 18.1) with Amdahl's
  law: the speedup of a step when parts of it get faster, on this run's profile.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_before, code_cells, markdown_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt

NOTEBOOK = LESSONS / "11_speed_and_gpu.ipynb"
s11 = importlib.import_module("solutions.lesson11")


# ------------------------------------------------------------------ 11.1: the roofline
def _roofline(flops=None, moved=None, time=max, bound=None, invert=False):
    """A roofline answer with one mistake: ``flops(m, k, n)``, ``moved(m, k, n)`` (bytes),
    ``time(compute_s, memory_s)``, ``bound(compute_s, memory_s)``, ``invert``: bytes/FLOP."""

    def answer(m, k, n, peak, bandwidth):
        f = flops(m, k, n) if flops else 2 * m * k * n
        b = moved(m, k, n) if moved else 4 * (m * k + k * n + m * n)
        compute_s, memory_s = f / peak, b / bandwidth
        kind = bound(compute_s, memory_s) if bound else (
            "compute" if compute_s > memory_s else "memory"
        )  # fmt: skip
        return (b / f if invert else f / b), time(compute_s, memory_s), kind

    return answer


ROOFLINE_WRONG = {  # name: (answer, what its hint must say)
    "FLOPs without the 2": (_roofline(flops=lambda m, k, n: m * k * n), "two floating-point"),
    "numbers, not bytes": (_roofline(moved=lambda m, k, n: m * k + k * n + m * n), "4 bytes"),
    "C not written": (_roofline(moved=lambda m, k, n: 4 * (m * k + k * n)), "written"),
    "C read and written": (
        _roofline(moved=lambda m, k, n: 4 * (m * k + k * n + 2 * m * n)),
        "not read and written",
    ),
    "bytes per FLOP": (_roofline(invert=True), "FLOPs per byte, not bytes per FLOP"),
    "a byte count per multiply": (
        _roofline(moved=lambda m, k, n: 4 * 2 * m * k * n),
        "crosses the memory bus once",
    ),
    "the ridge point": (
        lambda m, k, n, p, b: (p / b, *s11.gemm_roofline(m, k, n, p, b)[1:]),
        "ridge",
    ),
    "time: the sum": (_roofline(time=lambda c, m: c + m), "not their sum"),
    "time: the minimum": (_roofline(time=min), "waits for the slower"),
    "time: FLOPs alone": (_roofline(time=lambda c, m: c), "FLOPs alone"),
    "time: bytes alone": (_roofline(time=lambda c, m: m), "bytes alone"),
    "bound reversed": (
        _roofline(bound=lambda c, m: "memory" if c > m else "compute"),
        "ridge point peak_flops / bandwidth",
    ),
    "bound as a bool": (
        lambda *a: (*s11.gemm_roofline(*a)[:2], s11.gemm_roofline(*a)[2] == "compute"),
        "the string 'compute' or 'memory'",
    ),
    "bound says both": (lambda *a: (*s11.gemm_roofline(*a)[:2], "compute or memory"), "string"),
    "two things": (lambda *a: s11.gemm_roofline(*a)[:2], "three things"),
    "a NaN intensity": (lambda *a: (math.nan, *s11.gemm_roofline(*a)[1:]), "one finite number"),
    "an intensity array": (
        lambda *a: (np.ones(2), *s11.gemm_roofline(*a)[1:]),
        "one finite number",
    ),
    "other": (lambda *a: (1.0, 1.0, "memory"), "each moved once"),
}


@pytest.mark.parametrize("name", ROOFLINE_WRONG)
def test_11_1_each_mistake_has_its_hint(name):
    answer, hint = ROOFLINE_WRONG[name]
    assert hint in _fails(checks.check_11_1, answer)


def _roofline_by_ridge(m, k, n, peak_flops, bandwidth):  # the bound from the ridge point
    intensity = 2 * m * k * n / (4 * (m * k + k * n + m * n))
    bound = "Compute-bound" if intensity > peak_flops / bandwidth else "Memory-bound"
    return [intensity, 2 * m * k * n / min(peak_flops, intensity * bandwidth), bound]


ROOFLINE_VALID = {
    "reference": s11.gemm_roofline,
    "a list, the bound from the ridge, capitalised": _roofline_by_ridge,
    "NumPy scalars": lambda *a: (
        np.float32(s11.gemm_roofline(*a)[0]),
        np.float64(s11.gemm_roofline(*a)[1]),
        s11.gemm_roofline(*a)[2],
    ),  # fmt: skip
    "Tensors and 0-d arrays": lambda *a: (
        mt.tensor(s11.gemm_roofline(*a)[0], dtype="float64"),
        np.array(s11.gemm_roofline(*a)[1]),
        s11.gemm_roofline(*a)[2].upper(),
    ),
}


@pytest.mark.parametrize("name", ROOFLINE_VALID)
def test_11_1_accepts_valid_forms(name):
    assert checks.check_11_1(ROOFLINE_VALID[name]) == checks.CORRECT


def test_11_1_the_cases_are_on_both_sides_of_the_ridge():
    """The check's products are compute- and memory-bound on each machine, never at the
    ridge, and one shape changes side between the two machines."""
    kinds = [checks.lesson11._roofline(*g)[2] for g in checks.lesson11.GEMMS]
    assert set(kinds) == {"compute", "memory"}
    for m, k, n, peak, bandwidth in checks.lesson11.GEMMS:
        intensity = checks.lesson11._roofline(m, k, n, peak, bandwidth)[0]
        assert not math.isclose(intensity, peak / bandwidth, rel_tol=0.05)


SCORES_WRONG = {
    "numbers, not bytes": (
        lambda B, H, S, T, N, i: N * B * H * (S * S + T * T + T * S),
        "bytes, not numbers",
    ),
    "one layer": (lambda B, H, S, T, N, i: B * H * (S * S + T * T + T * S) * i, "N layers"),
    "no heads": (lambda B, H, S, T, N, i: N * B * (S * S + T * T + T * S) * i, "every head"),
    "no encoder": (lambda B, H, S, T, N, i: N * B * H * (T * T + T * S) * i, "encoder's"),
    "no cross-attention": (
        lambda B, H, S, T, N, i: N * B * H * (S * S + T * T) * i,
        "cross-attention",
    ),
    "cross as (T, T)": (
        lambda B, H, S, T, N, i: N * B * H * (S * S + 2 * T * T) * i,
        "queries come from the target",
    ),
    "one attention": (lambda B, H, S, T, N, i: B * H * T * S * i, "3N of them"),
    "other": (lambda B, H, S, T, N, i: 1, "list the attention layers"),
}


@pytest.mark.parametrize("name", SCORES_WRONG)
def test_11_2_each_mistake_has_its_hint(name):
    answer, hint = SCORES_WRONG[name]
    assert hint in _fails(checks.check_11_2, answer)


def test_11_2_the_oracle_is_the_formula():
    for B, H, S, T, N in [(2, 3, 7, 5, 2), (1, 2, 3, 6, 3)]:
        assert checks.lesson11._kept_scores(B, H, S, T, N, np.float32) == s11.score_bytes(
            B, H, S, T, N, 4
        )


# ------------------------------------------------------------------ 11.3: Amdahl's law
def _ratio_of_sums(f, s):  # the same law, written as old time over new time
    return 1 / (1 - np.sum(f) + np.sum(np.asarray(f) / np.asarray(s)))


AMDAHL_WRONG = {  # name: (answer, what its hint must say)
    "the new time": (lambda f, s: 1 / s11.step_speedup(f, s), "the new time as a fraction"),
    "the rest forgotten": (lambda f, s: 1 / np.sum(f / s), "the rest of the step"),
    "speedups averaged, with the rest": (
        lambda f, s: np.sum(f * s) + 1 - np.sum(f),
        "speedups do not average: add up the new times of the parts, then",
    ),
    "speedups averaged": (lambda f, s: np.sum(f * s), "speedups do not average"),
    "fraction times speedup": (lambda f, s: 1 / (1 - np.sum(f * s)), "divided by its speedup"),
    "the parts made free": (lambda f, s: 1 / (1 - np.sum(f)), "not nothing"),
    "a list": (lambda f, s: [s11.step_speedup(f, s)] * 2, "one finite number"),
    "other": (lambda f, s: 1.0, "the untouched part plus"),
}


@pytest.mark.parametrize("name", AMDAHL_WRONG)
def test_11_3_each_mistake_has_its_hint(name):
    answer, hint = AMDAHL_WRONG[name]
    assert hint in _fails(checks.check_11_3, answer)


def _amdahl_loop(fractions, speedups):  # plain Python, a loop
    new_time = 1.0
    for f, s in zip(fractions.tolist(), speedups.tolist(), strict=True):
        new_time -= f - f / s
    return new_time**-1


@pytest.mark.parametrize(
    "answer",
    [s11.step_speedup, _ratio_of_sums, _amdahl_loop,
     lambda f, s: mt.tensor(np.array(_ratio_of_sums(f, s)), dtype="float64"),
     lambda f, s: np.array([_ratio_of_sums(f, s)])],
)  # fmt: skip
def test_11_3_accepts_valid_forms(answer):
    assert checks.check_11_3(answer) == checks.CORRECT


# ------------------------------------------------------------------ nothing above answers them
def test_no_code_before_the_exercises_answers_them():
    """Section 2 fits slopes (np.polyfit) and section 3 counts FLOPs (2·m·k·n) and the
    attentions' FLOPs (with d_model, per layer), but no cell before exercise 1 counts a
    product's bytes or names a bandwidth, none before exercise 2 counts the weights P per
    head, and none before exercise 3 divides a share by a speedup."""
    before_1 = code_before(NOTEBOOK, "gemm_roofline")
    for giveaway in ("bandwidth", "m * k + k * n", "intensity", "ridge"):
        assert giveaway not in before_1, giveaway
    before_2 = code_before(NOTEBOOK, "score_bytes")
    for count in ("H * S * S", "H * T * S", "H * (S"):
        assert count not in before_2, count
    before_3 = code_before(NOTEBOOK, "step_speedup")
    for giveaway in ("speedup", "1 / (1 -", "/ speedups"):
        assert giveaway not in before_3, giveaway


def test_no_markdown_before_exercise_1_states_the_roofline():
    """The exercise's text describes the two limits; no text above it gives the byte count,
    the max or the ridge comparison."""
    text = markdown_cells(NOTEBOOK)
    at = next(i for i, t in enumerate(text) if "gemm_roofline(" in t)
    above = "\n".join(text[: at + 1]).lower()
    for giveaway in ("max(", "4·(m", "4(mk", "ridge", "mk + kn"):
        assert giveaway not in above, giveaway


def test_the_exercise_cells_ship_placeholders():
    cells = code_cells(NOTEBOOK)
    for name in ("gemm_roofline", "score_bytes", "step_speedup"):
        (cell,) = [c for c in cells if f"def {name}(" in c]
        assert "NotImplementedError(" in cell and "return" not in cell


def test_lesson_20_is_linked_for_sparse_and_linear_attention():
    """Review row 36: the formula-changing variants are cited and point to lesson 20."""
    text = "\n".join(markdown_cells(NOTEBOOK))
    for needed in ("20_below_n_squared.ipynb", "Child et al., 2019", "Katharopoulos et al., 2020"):
        assert needed in text, needed


def test_11_3_an_answer_that_writes_into_its_input_fails():
    """The shared guard of checks/_shared.py sees an answer that changes the fractions."""

    def in_place(fractions, speedups):
        fractions /= speedups  # the new times, written into the caller's array
        return 1 / (1 - fractions.sum() * 0 + fractions.sum() - fractions.sum())

    assert "in place" in _fails(checks.check_11_3, in_place)
