"""Lesson 04 (LayerNorm, residual), issue 28: no exercise is answered above it.

- 04.2 (the gain on a nearly constant row): the text above no longer states "caps the gain at
  1/√ε"; an answer of 1, 0, √ε or 1/ε each gets its own hint.
- 04.3 (Add & Norm backwards, dx and dW of LayerNorm(x + xW)) replaces "dγ and dβ", whose
  formulas and code stood in cell 3: the identity path forgotten, LayerNorm's backward skipped,
  W untransposed, dW from g or from one row fail with their own hints; the library's autograd
  fails; the lesson's own ``my_layer_norm``/``my_layer_norm_backward`` and einsum pass; a
  float32-rounded answer fails (issue 46: compared beyond finite differences, in float64).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells, markdown_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
import minitransformer.functional as F

NOTEBOOK = LESSONS / "04_layernorm_residual.ipynb"
s4 = importlib.import_module("solutions.lesson04")


# ------------------------------------------------------------------ 04.2
GAIN_WRONG = {
    "1": (lambda eps: 1.0, "how large is r"),
    "0": (lambda eps: 0.0, "not all of them"),
    "sqrt(eps)": (lambda eps: np.sqrt(eps), "upside down"),
    "1/eps": (lambda eps: 1 / eps, "how r is defined"),
    "other": (lambda eps: 2.0, "what is left of dx"),
}


@pytest.mark.parametrize("name", GAIN_WRONG)
def test_04_2_each_mistake_has_its_hint(name):
    answer, hint = GAIN_WRONG[name]
    assert hint in _fails(checks.check_04_2, answer)


# ------------------------------------------------------------------ 04.3
def _dz(z, g, eps=1e-5):  # LayerNorm's backward with gamma = 1
    mu = z.mean(-1, keepdims=True)
    r = 1 / np.sqrt(((z - mu) ** 2).mean(-1, keepdims=True) + eps)
    z_hat = (z - mu) * r
    return r * (g - g.mean(-1, keepdims=True) - z_hat * (g * z_hat).mean(-1, keepdims=True))


def _rows(a):
    return a.reshape(-1, a.shape[-1])


def _answer(dx_of, dW_of):
    def answer(x, W, g, eps=1e-5):
        dz = _dz(x + x @ W, g, eps)
        return dx_of(dz, W, g), dW_of(x, dz, g)

    return answer


def _right_dx(dz, W, g):
    return dz + dz @ W.T


def _right_dW(x, dz, g):
    return _rows(x).T @ _rows(dz)


def _autograd(x, W, g, eps=1e-5):
    xt, Wt = (mt.tensor(a, requires_grad=True, dtype="float64") for a in (x, W))
    D = x.shape[-1]
    F.layer_norm(xt + xt @ Wt, mt.tensor(np.ones(D)), mt.tensor(np.zeros(D))).backward(g)
    return xt.grad, Wt.grad


ADD_NORM_WRONG = {
    "no identity path": (_answer(lambda dz, W, g: dz @ W.T, _right_dW), "two paths"),
    "LayerNorm skipped": (_answer(lambda dz, W, g: g + g @ W.T, _right_dW), "LayerNorm's"),
    "W untransposed": (_answer(lambda dz, W, g: dz + dz @ W, _right_dW), "matmul backward"),
    "dW from g": (_answer(_right_dx, lambda x, dz, g: _rows(x).T @ _rows(g)), "not g"),
    "dW of one row": (_answer(_right_dx, lambda x, dz, g: np.outer(x[0, 0], dz[0, 0])), "rows"),
    "dx otherwise wrong": (_answer(lambda dz, W, g: 2 * dz, _right_dW), "one step at a time"),
    "dW transposed": (_answer(_right_dx, lambda x, dz, g: _rows(dz).T @ _rows(x)), "rows"),
    "the library's autograd": (_autograd, "calls the library"),
    "one array": (lambda x, W, g, eps=1e-5: np.zeros_like(x), "the pair (dx, dW)"),
}


@pytest.mark.parametrize("name", ADD_NORM_WRONG)
def test_04_3_each_mistake_has_its_hint(name):
    answer, hint = ADD_NORM_WRONG[name]
    assert hint in _fails(checks.check_04_3, answer)


def _with_the_lessons_functions():
    """add_norm_backward built on the notebook's own my_layer_norm(_backward) (cell 3)."""
    source = next(c for c in code_cells(NOTEBOOK) if c.startswith("def my_layer_norm("))
    namespace = {"np": np, "mt": mt, "F": F, "rng": np.random.default_rng(0)}
    exec(source.split("\n\nB, T, D =")[0], namespace)  # the two functions, not the demo
    ln, ln_backward = namespace["my_layer_norm"], namespace["my_layer_norm_backward"]

    def answer(x, W, g, eps=1e-5):
        D = x.shape[-1]
        _, cache = ln(x + x @ W, np.ones(D), np.zeros(D), eps)
        dz, _, _ = ln_backward(g, np.ones(D), cache)
        return dz + dz @ W.T, np.einsum("btd,bte->de", x, dz)

    return answer


ADD_NORM_VALID = {
    "reference": lambda: s4.add_norm_backward,
    "the lesson's functions": _with_the_lessons_functions,
    "a list pair": lambda: lambda x, W, g, eps=1e-5: list(s4.add_norm_backward(x, W, g, eps)),
}


@pytest.mark.parametrize("name", ADD_NORM_VALID)
def test_04_3_accepts_valid_forms(name):
    assert checks.check_04_3(ADD_NORM_VALID[name]()) == checks.CORRECT


def test_04_3_refuses_float32_rounding_as_not_analytic():
    """Issue 46: the derivative is compared in float64 at 1e-12 of its size (beyond finite
    differences), so a float32-rounded answer fails, told to write it out in float64."""

    def rounded(x, W, g, eps=1e-5):
        return tuple(
            a.astype(np.float32).astype(np.float64) for a in s4.add_norm_backward(x, W, g, eps)
        )

    hint = _fails(checks.check_04_3, rounded)
    assert "analytic" in hint and "float32" in hint and "float64" in hint


def test_the_hints_differ():
    hints = [_fails(checks.check_04_3, a).partition("hint:")[2] for a, _ in ADD_NORM_WRONG.values()]
    given = [h for h in hints if h]
    assert len(set(given)) >= len(given) - 2  # "dW of one row" and "dW transposed" share one


# ------------------------------------------------------------------ the notebook
def test_no_text_before_the_exercises_gives_the_gain_away():
    text = "\n".join(markdown_cells(NOTEBOOK))
    before = text[: text.index("## Exercises")]
    for answer in ("caps the gain", r"1/\sqrt\epsilon", r"\le 1/\sqrt"):
        assert answer not in before, answer


def test_no_code_before_exercise_3_computes_add_norm_backwards():
    code = code_cells(NOTEBOOK)
    first = next(i for i, c in enumerate(code) if "def add_norm_backward(" in c)
    before = "\n".join(code[:first])
    assert "@ W.T" not in before and ".T @" not in before
