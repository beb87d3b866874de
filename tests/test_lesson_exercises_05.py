"""Lesson 05 (attention), issue 28: exercise 1 asks for the gradient of a softmax temperature,
dL/dτ of P = softmax(S/τ), in place of the softmax backward itself, whose formula and code
stand three times above it (the backward section, the from-scratch attention, the √d_k
experiment).

The sign, 1/τ for 1/τ², the softmax backward without its row term, dP taken for the scores'
gradient and an array for a number fail with their own hints; the library's autograd fails;
NumPy forms (einsum, a 0-d array, a library Tensor of one number) pass. Issue 46: the check
compares with the derivative written out at 1e-12 of its terms' size, so central differences
fail at every step with a hint asking for the analytic derivative; exercise 2 (the padding mask
from lengths) watches library calls, so building ids and calling mt.nn.padding_mask fails.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells, markdown_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
import minitransformer.functional as F

NOTEBOOK = LESSONS / "05_attention.ipynb"
s5 = importlib.import_module("solutions.lesson05")


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _grad(dz_of=None, factor=lambda S, tau: -S / tau**2, total=True):
    """temperature_grad with one mistake (the defaults: none)."""

    def answer(S, tau, dP):
        P = _softmax(S / tau)
        dZ = P * (dP - (dP * P).sum(-1, keepdims=True)) if dz_of is None else dz_of(P, dP)
        g = dZ * factor(S, tau)
        return float(g.sum()) if total else g

    return answer


def _autograd(S, tau, dP):
    t = mt.tensor(np.array(tau), requires_grad=True, dtype="float64")
    (F.softmax(mt.tensor(S) / t, axis=-1) * mt.tensor(dP)).sum().backward()
    return float(t.grad)


WRONG = {
    "the sign": (_grad(factor=lambda S, tau: S / tau**2), "the sign"),
    "1/tau": (_grad(factor=lambda S, tau: -S / tau), "once more"),
    "no row term": (_grad(dz_of=lambda P, dP: P * dP), "two terms"),
    "dP as the scores' gradient": (_grad(dz_of=lambda P, dP: dP), "comes first"),
    "an array": (_grad(total=False), "one number"),
    "otherwise wrong": (_grad(factor=lambda S, tau: -S), "go backwards"),
    "the library's autograd": (_autograd, "calls the library"),
    "central differences": (lambda S, tau, dP: _central(S, tau, dP, 1e-5), "analytic"),
}


def _central(S, tau, dP, h):
    """dL/dτ by central differences with step h."""
    loss = lambda t: float((dP * _softmax(S / t)).sum())  # noqa: E731
    return (loss(tau + h) - loss(tau - h)) / (2 * h)


@pytest.mark.parametrize("h", [1e-3, 1e-4, 1e-5, 3e-6, 1e-6, 1e-7, 1e-8])
def test_05_1_central_differences_fail_at_every_step(h):
    """The best step (near 1e-5 here) is within 1e-10 of the derivative, not within the
    check's 1e-12: the hint asks for the analytic derivative."""
    assert "analytic" in _fails(checks.check_05_1, lambda S, tau, dP: _central(S, tau, dP, h))


def _mask_via_library(lengths, S):
    ids = np.zeros((len(lengths), S), dtype=np.int64)
    for b, n in enumerate(lengths):
        ids[b, :n] = 1
    return mt.nn.padding_mask(ids, pad_id=0)


def test_05_2_refuses_the_library_mask():
    assert "calls the library" in _fails(checks.check_05_2, _mask_via_library)


@pytest.mark.parametrize("name", WRONG)
def test_05_1_each_mistake_has_its_hint(name):
    answer, hint = WRONG[name]
    assert hint in _fails(checks.check_05_1, answer)


def _einsum(S, tau, dP):
    P = _softmax(S / tau)
    row = np.einsum("...ts,...ts->...t", dP, P)[..., None]
    return -np.sum(P * (dP - row) * S) / tau**2


VALID = {
    "reference": s5.temperature_grad,
    "mistake-free": _grad(),
    "einsum": _einsum,
    "a 0-d array": lambda S, tau, dP: np.asarray(s5.temperature_grad(S, tau, dP)),
    "a Tensor": lambda S, tau, dP: mt.tensor(np.array(s5.temperature_grad(S, tau, dP))),
}


@pytest.mark.parametrize("name", VALID)
def test_05_1_accepts_valid_forms(name):
    assert checks.check_05_1(VALID[name]) == checks.CORRECT


def test_the_check_agrees_with_the_library():
    """The derivative written out (the check's oracle, the solution) and the library's
    autograd give one number, and central differences agree with it to about 1e-9."""
    rng = np.random.default_rng(0)
    S, dP = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 4, 5))
    assert np.isclose(_autograd(S, 0.8, dP), s5.temperature_grad(S, 0.8, dP), rtol=1e-9)
    assert np.isclose(_central(S, 0.8, dP, 1e-5), s5.temperature_grad(S, 0.8, dP), rtol=1e-8)


def test_no_cell_before_the_exercises_differentiates_a_temperature():
    """The softmax backward is taught above (its formula is the lesson's); the temperature's
    gradient is not: no cell differentiates S/τ with respect to τ."""
    text = "\n".join(markdown_cells(NOTEBOOK))
    before = text[: text.index("## Exercises")]
    assert r"\partial L/\partial\tau" not in before and "tau**2" not in before
    code = code_cells(NOTEBOOK)
    first = next(i for i, c in enumerate(code) if "def temperature_grad(" in c)
    assert "tau**2" not in "\n".join(code[:first]) and "sigma**3" not in "\n".join(code[:first])
