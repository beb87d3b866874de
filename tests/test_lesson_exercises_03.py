"""Lesson 03 (softmax, cross-entropy), issue 46: exercises 1 and 3 ask for what the cells above
do not show.

- 03.1 asks for logsumexp AND its gradient, a fully masked row (all -inf) included: value -inf,
  gradient 0, no warning, no nan. The lesson's own cells (logsumexp as m + log Σ e^(x - m),
  then exp(x - value)) fail on that row; np.logaddexp.reduce answers the value only.
- 03.3 asks for the gradient of the mean cross-entropy with ε spread over the V - 1 classes that
  are not the target (the lesson's cells spread it over all V): cells 12 and 14 pasted together
  fail with their own hint; central differences fail at every step with a hint asking for the
  analytic derivative; the library's backward fails (in NumPy).

Each usual mistake has its own hint; valid forms pass.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import (
    LESSONS,
    central_difference,
    checks,
    code_before,
    code_cells,
    markdown_cells,
)
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
import minitransformer.functional as F

NOTEBOOK = LESSONS / "03_softmax_cross_entropy.ipynb"
s3 = importlib.import_module("solutions.lesson03")
c3 = importlib.import_module("checks.lesson03")


# ------------------------------------------------------------------ 03.1
def _cells_log_softmax(x, axis=-1):
    """The lesson's cells 4-5 (logsumexp = m + log Σ e^(x - m)) with the softmax from it."""
    m = np.max(x, axis=axis, keepdims=True)
    value = np.squeeze(m, axis) + np.log(np.exp(x - m).sum(axis=axis))
    return value, np.exp(x - np.expand_dims(value, axis))


def _silenced(x, axis=-1):  # the same, warnings silenced: the nan is still there
    with np.errstate(all="ignore"):
        return _cells_log_softmax(x, axis)


def _uniform_masked(x, axis=-1):  # the masked row's gradient 1/n instead of 0
    value, grad = s3.logsumexp_with_grad(x, axis)
    masked = np.isneginf(np.expand_dims(value, axis))
    return value, np.where(masked, 1.0 / x.shape[axis], grad)


def _lse_then(grad_of):
    """The reference value, and a gradient made by ``grad_of(x, value_kept, axis)``."""

    def answer(x, axis=-1):
        value, grad = s3.logsumexp_with_grad(x, axis)
        kept = np.expand_dims(value, axis)
        masked = np.isneginf(kept)
        with np.errstate(all="ignore"):
            other = grad_of(x, np.where(masked, 0.0, kept), axis)
        return value, np.where(masked, 0.0, other)

    return answer


def _library_softmax(x, axis=-1):
    value, _ = s3.logsumexp_with_grad(x, axis)
    return value, F.softmax(mt.tensor(x), axis=axis).numpy()


WRONG_1 = {
    "naive exp": (
        lambda x, axis=-1: (np.log(np.exp(x).sum(axis=axis)), np.exp(x)),
        "largest exponent 0",
    ),
    "the lesson's cells": (_cells_log_softmax, "fully masked row"),
    "warnings silenced": (_silenced, "nan"),
    "logaddexp.reduce, no gradient": (
        lambda x, axis=-1: np.logaddexp.reduce(x, axis=axis),
        "the pair (value, grad)",
    ),
    "value only, keepdims": (
        lambda x, axis=-1: (np.logaddexp.reduce(x, axis=axis, keepdims=True), x),
        "summed axis kept",
    ),
    "masked row uniform": (_uniform_masked, "right except on the fully masked lines"),
    "log p": (_lse_then(lambda x, v, axis: x - v), "log-softmax"),
    "not normalised": (
        _lse_then(lambda x, v, axis: np.exp(x - x.max(axis=axis, keepdims=True))),
        "sums to 1",
    ),
    "softmax over the last axis": (
        _lse_then(lambda x, v, axis: c3._lse_reference(x, -1)[1]),
        "not along the last axis",
    ),
    "the library's softmax": (_library_softmax, "calls the library"),
}


@pytest.mark.parametrize("name", WRONG_1)
def test_03_1_each_mistake_has_its_hint(name):
    answer, hint = WRONG_1[name]
    assert hint in _fails(checks.check_03_1, answer)


def _lse_loop(x, axis=-1):  # one line at a time, plain Python for the masked case
    moved = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    value = np.empty(moved.shape[:-1])
    grad = np.zeros_like(moved)
    for i in np.ndindex(value.shape):
        line = moved[i]
        m = line.max()
        if m == -np.inf:
            value[i] = -np.inf
            continue
        e = np.exp(line - m)
        value[i] = m + np.log(e.sum())
        grad[i] = e / e.sum()
    return value, np.moveaxis(grad, -1, axis)


def _lse_logaddexp(x, axis=-1):  # NumPy's reduction for the value, the gradient from it
    value = np.logaddexp.reduce(x, axis=axis)
    kept = np.expand_dims(value, axis)
    finite = np.isfinite(kept)
    return value, np.where(finite, np.exp(x - np.where(finite, kept, 0.0)), 0.0)


VALID_1 = {
    "reference": s3.logsumexp_with_grad,
    "a loop over lines": _lse_loop,
    "np.logaddexp.reduce and a guarded exp": _lse_logaddexp,
    "float32 results": lambda x, axis=-1: tuple(
        a.astype(np.float32) for a in s3.logsumexp_with_grad(x, axis)
    ),
    "a list pair": lambda x, axis=-1: [a.tolist() for a in s3.logsumexp_with_grad(x, axis)],
}


@pytest.mark.parametrize("name", VALID_1)
def test_03_1_accepts_valid_forms(name):
    assert checks.check_03_1(VALID_1[name]) == checks.CORRECT


def test_03_1_nothing_above_handles_a_fully_masked_row():
    """The cells above compute logsumexp by the max shift, which gives nan on an all -inf row;
    none guards it, and no markdown gives logsumexp's value or gradient there."""
    before = code_before(NOTEBOOK, "logsumexp_with_grad")
    assert "isfinite" not in before and "isneginf" not in before and "errstate" not in before
    assert "logaddexp" not in before
    exercise = next(i for i, t in enumerate(markdown_cells(NOTEBOOK)) if "**Exercise 1.**" in t)
    text = "\n".join(markdown_cells(NOTEBOOK)[:exercise])
    assert "fully masked" not in text


# ------------------------------------------------------------------ 03.3
def _slip(**flags):
    def answer(x, t, eps, ignore):
        p, q, keep, count = c3._ce_parts(x, t, eps, ignore, **flags)
        return (p - q) * keep[:, None] / count

    return answer


def _cells_12_and_14(x, t, eps, ignore):
    """The lesson's cells 12 (ignore_index) and 14 (smoothing over all V) pasted together."""
    N, V = x.shape
    keep = t != ignore
    t_safe = np.where(keep, t, 0)
    q = np.full((N, V), eps / V)
    q[np.arange(N), t_safe] += 1 - eps
    m = x.max(axis=-1, keepdims=True)
    logp = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return (np.exp(logp) - q) * keep[:, None] / max(keep.sum(), 1)


def _central(x, t, eps, ignore, h=1e-5):
    """The mean smoothed loss differentiated by central differences, entry by entry."""
    N, V = x.shape
    keep = t != ignore
    q = c3._smoothed_q(t, eps, V, keep)

    def loss(z):
        m = z.max(axis=-1, keepdims=True)
        logp = z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
        return float(-(q * logp * keep[:, None]).sum() / max(keep.sum(), 1))

    return central_difference(loss, x, h)


def _library_backward(x, t, eps, ignore):  # the library with the equivalent epsilon
    V = x.shape[1]
    xt = mt.tensor(x, requires_grad=True, dtype="float64")
    F.cross_entropy(xt, t, label_smoothing=eps * V / (V - 1), ignore_index=ignore).backward()
    return xt.grad


def _nan_when_all_ignored(x, t, eps, ignore):
    keep = t != ignore
    with np.errstate(all="ignore"):
        return s3.ce_grad(x, t, eps, ignore) * max(keep.sum(), 1) / keep.sum()


def _ignored_rows_kept(x, t, eps, ignore):
    return _slip()(x, np.where(t == ignore, 0, t), eps, ignore - 1)


WRONG_3 = {
    "cells 12 and 14 pasted": (_cells_12_and_14, "spreads ε over all V classes"),
    "eps / V on the others": (_slip(q_of=c3._unnormalised_q), "q must sum to 1"),
    "mean over every row": (_slip(mean_over_kept=False), "not ignored"),
    "no smoothing": (lambda x, t, eps, ig: _slip()(x, t, 0.0, ig), "which target"),
    "the sign": (lambda *a: -s3.ce_grad(*a), "the sign"),
    "a sum, not a mean": (
        lambda x, t, eps, ig: s3.ce_grad(x, t, eps, ig) * max((t != ig).sum(), 1),
        "MEAN",
    ),
    "ignored rows kept": (_ignored_rows_kept, "ignored rows"),
    "nan when every row is ignored": (_nan_when_all_ignored, "every row is ignored"),
    "central differences": (_central, "analytic"),
    "the library's backward": (_library_backward, "calls the library"),
}


@pytest.mark.parametrize("name", WRONG_3)
def test_03_3_each_mistake_has_its_hint(name):
    answer, hint = WRONG_3[name]
    assert hint in _fails(checks.check_03_3, answer)


@pytest.mark.parametrize("h", [1e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 1e-3])
def test_03_3_central_differences_fail_at_every_step(h):
    """The best step of central differences (about 1e-5 here) misses the check's 1e-12."""
    assert "analytic" in _fails(checks.check_03_3, lambda x, t, eps, ig: _central(x, t, eps, ig, h))


def _ce_loop(x, t, eps, ignore):  # one row at a time
    N, V = x.shape
    kept = [i for i in range(N) if t[i] != ignore]
    grad = np.zeros((N, V))
    for i in kept:
        e = np.exp(x[i] - x[i].max())
        q = np.full(V, eps / (V - 1))
        q[t[i]] = 1 - eps
        grad[i] = (e / e.sum() - q) / len(kept)
    return grad


def _ce_lesson_form(x, t, eps, ignore):  # this lesson's q with eps' = eps V / (V - 1)
    V = x.shape[1]
    return _cells_12_and_14(x, t, eps * V / (V - 1), ignore)


VALID_3 = {
    "reference": s3.ce_grad,
    "a loop over rows": _ce_loop,
    "the lesson's q with eps V / (V - 1)": _ce_lesson_form,
    "a list": lambda *a: s3.ce_grad(*a).tolist(),
    "a Tensor": lambda *a: mt.tensor(s3.ce_grad(*a), dtype="float64"),
}


@pytest.mark.parametrize("name", VALID_3)
def test_03_3_accepts_valid_forms(name):
    assert checks.check_03_3(VALID_3[name]) == checks.CORRECT


def test_03_3_solution_is_the_library_backward_with_the_equivalent_eps():
    """q with ε over V - 1 classes is the lesson's q with ε V / (V - 1): the library agrees."""
    rng = np.random.default_rng(1)
    x, t = rng.standard_normal((7, 6)) * 2, rng.integers(0, 6, 7)
    t[2] = -100
    np.testing.assert_allclose(
        s3.ce_grad(x, t, 0.2, -100), _library_backward(x, t, 0.2, -100), rtol=1e-10, atol=1e-15
    )


def test_03_3_nothing_above_spreads_eps_over_v_minus_1():
    before = code_before(NOTEBOOK, "ce_grad")
    assert "V - 1" not in before and "(V-1)" not in before
    exercise = next(i for i, t in enumerate(markdown_cells(NOTEBOOK)) if "**Exercise 3.**" in t)
    assert "V - 1" not in "\n".join(markdown_cells(NOTEBOOK)[:exercise])


# ------------------------------------------------------------------ row 28: the two floors
def test_the_text_separates_the_training_floor_from_perplexity():
    """The smoothed loss's floor (entropy of q) and the perplexity's (−ln p_t, p_t held near
    q_t) are two statements, and the nats are computed in a cell."""
    text = "\n".join(markdown_cells(NOTEBOOK))
    assert "the reason the\npaper's perplexity" not in text
    assert "**The training loss**" in text and "**Perplexity**" in text
    code = "\n".join(code_cells(NOTEBOOK))
    assert "-np.log(p_t)" in code and "Floor of the training loss" in code
