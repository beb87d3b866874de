"""Lesson 11 (speed), issue 28.

- 11.1 (count the parameters): building a config or a model to count them now fails.
- 11.2 asked for B·H·T·S·itemsize, which section 2 computes in its print; it now asks for the
  weights every attention of the encoder-decoder keeps (N layers: the encoder's (S, S), the
  decoder's (T, T) and its cross-attention's (T, S)). Each miscount gets its own hint; the
  check's oracle is what a built model stores.
- 11.3 asked for the log-log slope, which section 2 computes with the same ``np.polyfit``
  line; it now asks where the fitted law reaches a budget (the fit read forward). Log x, no
  intercept, a linear fit and y at x = budget fail with their own hints; base-10 logs and
  ``np.linalg.lstsq`` pass.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt

NOTEBOOK = LESSONS / "11_speed_and_gpu.ipynb"
s11 = importlib.import_module("solutions.lesson11")


def test_11_1_a_built_config_fails():
    def through_config(V, D, d_ff, N):
        sizes = dict(src_vocab=V, tgt_vocab=V, d_model=D, d_ff=d_ff, N=N, h=1)
        return mt.TransformerConfig(**sizes).num_parameters()

    assert "calls the library" in _fails(checks.check_11_1, through_config)


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


def _fit(x, y):
    a, log_c = np.polyfit(np.log(x), np.log(y), 1)
    return a, log_c


BUDGET_WRONG = {
    "log x": (lambda x, y, b: np.log(s11.length_for_budget(x, y, b)), "undo the logarithm"),
    "no intercept": (lambda x, y, b: b ** (1 / _fit(x, y)[0]), "intercept"),
    "linear fit": (
        lambda x, y, b: (b - np.polyfit(x, y, 1)[1]) / np.polyfit(x, y, 1)[0],
        "linear ones",
    ),
    "y at x = budget": (lambda x, y, b: np.exp(_fit(x, y)[1]) * b ** _fit(x, y)[0], "solve for x"),
    "two endpoints": (
        lambda x, y, b: x[0] * (b / y[0]) ** (np.log(x[-1] / x[0]) / np.log(y[-1] / y[0])),
        "every (log x, log y)",
    ),
}


@pytest.mark.parametrize("name", BUDGET_WRONG)
def test_11_3_each_mistake_has_its_hint(name):
    answer, hint = BUDGET_WRONG[name]
    assert hint in _fails(checks.check_11_3, answer)


def _base10(x, y, b):
    a, log_c = np.polyfit(np.log10(x), np.log10(y), 1)
    return 10 ** ((np.log10(b) - log_c) / a)


def _lstsq(x, y, b):
    A = np.stack([np.log(x), np.ones(len(x))], axis=1)
    (a, log_c), *_ = np.linalg.lstsq(A, np.log(y), rcond=None)
    return np.array(np.exp((np.log(b) - log_c) / a))


@pytest.mark.parametrize("answer", [s11.length_for_budget, _base10, _lstsq])
def test_11_3_accepts_valid_forms(answer):
    assert checks.check_11_3(answer) == checks.CORRECT


def test_no_code_before_the_exercises_answers_them():
    """Section 2 fits slopes (np.polyfit) and section 3 counts the attentions' FLOPs (with
    d_model, per layer), but no cell before exercise 2 counts the weights P per head, and
    none before exercise 3 solves a fit for x."""
    code = code_cells(NOTEBOOK)
    ex2 = next(i for i, c in enumerate(code) if "def score_bytes(" in c)
    ex3 = next(i for i, c in enumerate(code) if "def length_for_budget(" in c)
    for count in ("H * S * S", "H * T * S", "H * (S"):
        assert count not in "\n".join(code[:ex2]), count
    assert "np.log(budget" not in "\n".join(code[:ex3])
