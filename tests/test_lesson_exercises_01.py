"""Lesson 01 (autograd), issue 28: exercise 2 (Sigmoid) is not answered above it and cannot be
answered by the library.

- The lesson's deliberately wrong backward is a sign slip, no longer σ(1 − σ): no cell before
  the exercises states or computes the sigmoid's derivative.
- The library's own sigmoid (the class, a subclass of it, or its ``stable_sigmoid`` called from
  a forward) fails with a hint; a backward that returns σ itself and one with the wrong sign
  get their own hints.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells, markdown_cells
from lesson_notebooks import function_class as _fn
from lesson_notebooks import hint_of as _fails

from minitransformer.function import Function
from minitransformer.ops.activations import Sigmoid as LibrarySigmoid
from minitransformer.ops.activations import stable_sigmoid

NOTEBOOK = LESSONS / "01_autograd.ipynb"
s1 = importlib.import_module("solutions.lesson01")


def _forward_library(ctx, x):
    y = stable_sigmoid(ctx.xp, x)
    ctx.save_for_backward(y)
    return y


def _backward(factor):
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * factor(y)

    return backward


class _Subclass(LibrarySigmoid):
    pass


WRONG = {
    "the library's class": (LibrarySigmoid, "is the library's"),
    "a subclass of it": (_Subclass, "subclasses"),
    "stable_sigmoid in forward": (
        _fn(_forward_library, _backward(lambda y: y * (1 - y))),
        "calls the library",
    ),
    "backward returns sigma": (_fn(s1.Sigmoid.forward, _backward(lambda y: y)), "σ itself"),
    "backward's sign": (_fn(s1.Sigmoid.forward, _backward(lambda y: -y * (1 - y))), "the sign"),
    "backward otherwise wrong": (
        _fn(s1.Sigmoid.forward, _backward(lambda y: 1 - y)),
        "differentiate σ by hand",
    ),
}


@pytest.mark.parametrize("name", WRONG)
def test_01_2_each_mistake_has_its_hint(name):
    answer, hint = WRONG[name]
    assert hint in _fails(checks.check_01_2, answer)


def test_01_2_the_solution_passes():
    assert checks.check_01_2(s1.Sigmoid) == checks.CORRECT


def test_no_cell_before_the_exercises_gives_the_derivative():
    """Neither the text nor the code above the exercises holds σ' = σ(1 − σ)."""
    text = "\n".join(markdown_cells(NOTEBOOK))
    before = text[: text.index("## Exercises")]
    for formula in (r"\sigma(x)(1-\sigma(x))", r"\sigma(x)\,(1-\sigma(x))", "one derivative too"):
        assert formula not in before, formula
    code = code_cells(NOTEBOOK)
    first = next(i for i, c in enumerate(code) if "def value_tanh(" in c)
    for expression in ("(1 - sig)", "* (1 - y)", "sig * "):
        assert expression not in "\n".join(code[:first]), expression


def test_the_buggy_backward_is_still_caught_by_gradcheck():
    """The lesson's wrong backward (a sign slip) really is wrong: gradcheck fails on it."""
    import minitransformer as mt

    source = next(c for c in code_cells(NOTEBOOK) if c.startswith("class BuggySoftplus"))
    namespace = {"Function": Function, "mt": mt, "np": np, "rng": np.random.default_rng(0)}
    exec(source, namespace)  # the cell itself asserts that gradcheck fails
