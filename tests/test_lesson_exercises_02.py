"""Lesson 02 (broadcasting, matmul): the exercises ask for gradients written out with NumPy,
and the checks can tell (issues 28 and 46): the library's autograd and its ``unbroadcast``
fail with a hint, and so do central differences, at every step size a learner would try
(the checks compare at 1e-12 of each entry's size, on inputs spanning twelve orders of
magnitude). Exercise 3 is the gradient of a gather, ``x * s[idx]``, which the lesson's
``my_unbroadcast`` does not answer: repeated ids (a buffered ``ds[idx] += ...``) are its trap.
Each common mistake gets its own hint; valid NumPy forms (einsum, tensordot, loops,
np.bincount, a one-hot product, lists) pass.
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
from minitransformer.function import unbroadcast

NOTEBOOK = LESSONS / "02_broadcasting_matmul.ipynb"
s2 = importlib.import_module("solutions.lesson02")
STEPS = (1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)  # central-difference h


def _autograd_outer(u, v, G):
    ut, vt = (mt.tensor(a, requires_grad=True, dtype="float64") for a in (u, v))
    (ut.reshape(-1, 1) * vt.reshape(1, -1)).backward(G)
    return ut.grad, vt.grad


def _autograd_linear_t(x, W, G):
    xt, Wt = (mt.tensor(a, requires_grad=True, dtype="float64") for a in (x, W))
    (xt @ Wt.T).backward(G)
    return xt.grad, Wt.grad


def _autograd_gather(x, s, idx, G):
    st = mt.tensor(s, requires_grad=True, dtype="float64")
    (F.embedding(idx, st) * mt.tensor(x, dtype="float64")).backward(G)
    return st.grad


def _numeric_outer(h):
    def answer(u, v, G):
        return (
            central_difference(lambda a: np.sum(G * np.outer(a, v)), u, h),
            central_difference(lambda b: np.sum(G * np.outer(u, b)), v, h),
        )

    return answer


def _numeric_linear_t(h):
    def answer(x, W, G):
        return (
            central_difference(lambda a: np.sum(G * (a @ W.T)), x, h),
            central_difference(lambda b: np.sum(G * (x @ b.T)), W, h),
        )

    return answer


def _numeric_gather(h):
    return lambda x, s, idx, G: central_difference(lambda t: np.sum(G * x * t[idx]), s, h)


def _my_unbroadcast():
    """The lesson's own NumPy unbroadcast, taken from its cell."""
    source = next(c for c in code_cells(NOTEBOOK) if c.startswith("def my_unbroadcast("))
    namespace = {"np": np, "rng": np.random.default_rng(0), "unbroadcast": unbroadcast}
    exec(source, namespace)
    return namespace["my_unbroadcast"]


MY_UNBROADCAST = _my_unbroadcast()  # the cell's own self-test runs here, not inside an answer


def _buffered(x, s, idx, G):  # the trap: one position per repeated id
    ds = np.zeros_like(s)
    ds[idx] += G * x
    return ds


def _assigned(x, s, idx, G):
    ds = np.zeros_like(s)
    ds[idx] = G * x
    return ds


def _unseen_not_zero(x, s, idx, G):  # np.empty-like garbage in the rows of unseen ids
    ds = np.ones_like(s)
    for v in np.unique(idx):
        ds[v] = (G * x)[idx == v].sum(axis=0)
    return ds


WRONG = {
    ("02_1", "autograd"): (_autograd_outer, "calls the library"),
    ("02_1", "summed like a bias"): (lambda u, v, G: (G.sum(1), G.sum(0)), "as for a bias"),
    ("02_1", "swapped"): (lambda u, v, G: (G.T @ u, G @ v), "input's shape"),
    ("02_1", "one array"): (lambda u, v, G: G @ v, "return the pair"),
    ("02_1", "central differences"): (_numeric_outer(1e-5), "analytic"),
    ("02_2", "autograd"): (_autograd_linear_t, "calls the library"),
    ("02_2", "one sequence"): (lambda x, W, G: (G @ W, G[0].T @ x[0]), "first sequence"),
    ("02_2", "dW transposed"): (
        lambda x, W, G: (G @ W, np.einsum("btd,bto->do", x, G)),
        "W has (5, 4)",
    ),
    ("02_2", "dx from W transposed"): (
        lambda x, W, G: (G @ np.ones_like(W), s2.linear_t_backward(x, W, G)[1]),
        "let the shapes pick",
    ),
    ("02_2", "central differences"): (_numeric_linear_t(1e-5), "analytic"),
    ("02_3", "the library's embedding"): (_autograd_gather, "calls the library"),
    ("02_3", "unbroadcast"): (
        lambda x, s, idx, G: unbroadcast(np, G * x, (idx.shape[1], s.shape[1])),
        "calls the library",
    ),
    ("02_3", "the lesson's my_unbroadcast"): (
        lambda x, s, idx, G: MY_UNBROADCAST(G * x, s.shape),
        "the table s's shape",
    ),
    ("02_3", "buffered +="): (_buffered, "ufunc.at"),
    ("02_3", "assigned"): (_assigned, "ufunc.at"),
    ("02_3", "x forgotten"): (lambda x, s, idx, G: _fixed_add(s, idx, G), "the x it scaled"),
    ("02_3", "every position"): (
        lambda x, s, idx, G: np.broadcast_to((G * x).sum(axis=(0, 1)), s.shape),
        "only the positions whose id is v",
    ),
    ("02_3", "unseen ids not zero"): (_unseen_not_zero, "never appear"),
    ("02_3", "the position's gradient"): (lambda x, s, idx, G: G * x, "the table s's shape"),
    ("02_3", "central differences"): (_numeric_gather(1e-5), "analytic"),
}


def _fixed_add(s, idx, G):
    ds = np.zeros_like(s)
    np.add.at(ds, idx, G)
    return ds


CHECKS = {"02_1": checks.check_02_1, "02_2": checks.check_02_2, "02_3": checks.check_02_3}


@pytest.mark.parametrize("case", WRONG, ids=[f"{n}-{m}" for n, m in WRONG])
def test_each_mistake_has_its_hint(case):
    answer, hint = WRONG[case]
    assert hint in _fails(CHECKS[case[0]], answer)


NUMERIC = {"02_1": _numeric_outer, "02_2": _numeric_linear_t, "02_3": _numeric_gather}


@pytest.mark.parametrize("h", STEPS)
@pytest.mark.parametrize("name", NUMERIC)
def test_central_differences_fail_at_every_step(name, h):
    """The loss is linear in each argument, so central differences have no truncation error:
    their error is the loss's rounding over 2h. On the checks' inputs (entries from 1e-6 to
    1e6 of each other) it stays above 1e-12 of the small entries for every h up to 100; where
    the answer is close, the hint asks for the analytic derivative."""
    assert "analytic" in _fails(CHECKS[name], NUMERIC[name](h))


def _gather_loop(x, s, idx, G):
    ds = np.zeros(s.shape)
    for b in range(idx.shape[0]):
        for t in range(idx.shape[1]):
            ds[idx[b, t]] += G[b, t] * x[b, t]
    return ds


def _gather_bincount(x, s, idx, G):
    V, D = s.shape
    gx = (G * x).reshape(-1, D)
    return np.stack([np.bincount(idx.ravel(), gx[:, d], minlength=V) for d in range(D)], axis=1)


def _gather_one_hot(x, s, idx, G):
    V, D = s.shape
    one_hot = (idx.reshape(-1, 1) == np.arange(V)).astype(np.float64)  # (B*T, V)
    return one_hot.T @ (G * x).reshape(-1, D)


def _with_my_unbroadcast():  # exercise 1 with the lesson's own function: a valid NumPy form
    return lambda u, v, G: (
        MY_UNBROADCAST(G * v, (len(u), 1))[:, 0],
        MY_UNBROADCAST(G * u[:, None], v.shape),
    )


VALID = {  # factories of the answers
    ("02_1", "reference"): lambda: s2.outer_backward,
    ("02_1", "einsum"): lambda: (
        lambda u, v, G: (np.einsum("nm,m->n", G, v), np.einsum("nm,n->m", G, u))
    ),
    ("02_1", "the lesson's my_unbroadcast"): _with_my_unbroadcast,
    ("02_1", "lists"): lambda: lambda u, v, G: [list(G @ v), list(G.T @ u)],
    ("02_2", "reference"): lambda: s2.linear_t_backward,
    ("02_2", "tensordot"): lambda: (
        lambda x, W, G: (G @ W, np.tensordot(G, x, axes=([0, 1], [0, 1])))
    ),
    ("02_2", "a sum of per-sequence products"): lambda: (
        lambda x, W, G: (G @ W, sum(G[b].T @ x[b] for b in range(len(x))))
    ),
    ("02_3", "reference"): lambda: s2.gather_scale_grad,
    ("02_3", "a loop over positions"): lambda: _gather_loop,
    ("02_3", "np.bincount per feature"): lambda: _gather_bincount,
    ("02_3", "a one-hot product"): lambda: _gather_one_hot,
    ("02_3", "a list"): lambda: lambda x, s, idx, G: s2.gather_scale_grad(x, s, idx, G).tolist(),
    ("02_3", "a Tensor"): lambda: (
        lambda x, s, idx, G: mt.tensor(s2.gather_scale_grad(x, s, idx, G), dtype="float64")
    ),
}


@pytest.mark.parametrize("case", VALID, ids=[f"{n}-{m}" for n, m in VALID])
def test_valid_numpy_forms_pass(case):
    assert CHECKS[case[0]](VALID[case]()) == checks.CORRECT


def test_the_gather_solution_is_the_library_backward():
    """The reference answer of exercise 3 is F.embedding's backward (repeated ids summed)."""
    rng = np.random.default_rng(7)
    idx = rng.integers(0, 6, (4, 5))
    x, s, G = (
        rng.standard_normal((4, 5, 3)),
        rng.standard_normal((6, 3)),
        rng.standard_normal((4, 5, 3)),
    )
    np.testing.assert_allclose(
        s2.gather_scale_grad(x, s, idx, G), _autograd_gather(x, s, idx, G), rtol=1e-12
    )


def test_the_text_says_the_checks_notice_the_library_and_numerical_answers():
    text = "\n".join(markdown_cells(NOTEBOOK))
    assert "checks notice a" in text and "single 2-D product for `dW`" not in text
    assert "analytic" in text and "finite differences" in text


def test_nothing_above_exercise_3_answers_it():
    """No cell above the exercise scatters by an index: cell 3's my_unbroadcast sums along axes
    only (it fails the check: test_each_mistake_has_its_hint), and no unbuffered add appears."""
    before = code_before(NOTEBOOK, "gather_scale_grad")
    for giveaway in (".at(", "bincount", "embedding", "[idx]"):
        assert giveaway not in before, giveaway
    text = "\n".join(markdown_cells(NOTEBOOK))
    assert "add.at" not in text and "ufunc.at" not in text
