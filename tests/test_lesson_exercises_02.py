"""Lesson 02 (broadcasting, matmul), issue 28: the exercises ask for gradients written with
NumPy, and the checks can tell: the library's autograd and its ``unbroadcast`` fail with a hint.
Each common mistake gets its own hint; valid NumPy forms (einsum, tensordot, the lesson's own
``my_unbroadcast``) pass.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_cells, markdown_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
from minitransformer.function import unbroadcast

NOTEBOOK = LESSONS / "02_broadcasting_matmul.ipynb"
s2 = importlib.import_module("solutions.lesson02")


def _autograd_outer(u, v, G):
    ut, vt = (mt.tensor(a, requires_grad=True, dtype="float64") for a in (u, v))
    (ut.reshape(-1, 1) * vt.reshape(1, -1)).backward(G)
    return ut.grad, vt.grad


def _autograd_linear_t(x, W, G):
    xt, Wt = (mt.tensor(a, requires_grad=True, dtype="float64") for a in (x, W))
    (xt @ Wt.T).backward(G)
    return xt.grad, Wt.grad


def _my_unbroadcast():
    """The lesson's own NumPy unbroadcast, taken from its cell."""
    source = next(c for c in code_cells(NOTEBOOK) if c.startswith("def my_unbroadcast("))
    namespace = {"np": np, "rng": np.random.default_rng(0), "unbroadcast": unbroadcast}
    exec(source, namespace)
    return namespace["my_unbroadcast"]


WRONG = {
    ("02_1", "autograd"): (_autograd_outer, "calls the library"),
    ("02_1", "summed like a bias"): (lambda u, v, G: (G.sum(1), G.sum(0)), "as for a bias"),
    ("02_1", "swapped"): (lambda u, v, G: (G.T @ u, G @ v), "input's shape"),
    ("02_2", "autograd"): (_autograd_linear_t, "calls the library"),
    ("02_2", "one sequence"): (lambda x, W, G: (G @ W, G[0].T @ x[0]), "first sequence"),
    ("02_2", "dW transposed"): (
        lambda x, W, G: (G @ W, np.einsum("btd,bto->do", x, G)),
        "W has (5, 4)",
    ),
    ("02_3", "unbroadcast"): (lambda x, s, G: unbroadcast(np, G * x, s.shape), "calls the library"),
    ("02_3", "x forgotten"): (
        lambda x, s, G: G.sum(axis=(0, 2, 3), keepdims=True),
        "the x it scaled",
    ),
    ("02_3", "kept axes lost"): (lambda x, s, G: (G * x).sum(axis=(0, 2, 3)), "s's shape"),
}


def _with_my_unbroadcast():
    mine = _my_unbroadcast()  # the cell's own self-test runs here, not inside the answer
    return lambda x, s, G: mine(G * x, s.shape)


VALID = {  # factories of the answers
    ("02_1", "einsum"): lambda: (
        lambda u, v, G: (np.einsum("nm,m->n", G, v), np.einsum("nm,n->m", G, u))
    ),
    ("02_2", "tensordot"): lambda: (
        lambda x, W, G: (G @ W, np.tensordot(G, x, axes=([0, 1], [0, 1])))
    ),
    ("02_3", "the lesson's my_unbroadcast"): _with_my_unbroadcast,
    ("02_3", "a list"): lambda: lambda x, s, G: s2.head_scale_grad(x, s, G).tolist(),
}
CHECKS = {"02_1": checks.check_02_1, "02_2": checks.check_02_2, "02_3": checks.check_02_3}


@pytest.mark.parametrize("case", WRONG, ids=[f"{n}-{m}" for n, m in WRONG])
def test_each_mistake_has_its_hint(case):
    answer, hint = WRONG[case]
    assert hint in _fails(CHECKS[case[0]], answer)


@pytest.mark.parametrize("case", VALID, ids=[f"{n}-{m}" for n, m in VALID])
def test_valid_numpy_forms_pass(case):
    assert CHECKS[case[0]](VALID[case]()) == checks.CORRECT


def test_the_text_says_the_checks_notice_the_library():
    text = "\n".join(markdown_cells(NOTEBOOK))
    assert "checks notice a" in text and "single 2-D product for `dW`" not in text
