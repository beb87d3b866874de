"""Lesson 02 (broadcasting, matmul): the checks of its exercises.

- ``check_02_1``: Exercise 1 (outer product backward)
- ``check_02_2``: Exercise 2 (x Wᵀ backward)
- ``check_02_3``: Exercise 3 (per-head scale gradient)

Each answer is written with NumPy: the library's autograd (or its ``unbroadcast``) would
answer any of them, so a call into the library fails with a hint (``_shared._without_library``).

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng, _without_library

_NUMPY = "write the gradient with NumPy from the arrays you are given (the section above shows how)"


@_exercise("Exercise 1 (outer product backward)")
def check_02_1(outer_backward: Callable) -> None:
    rng = _rng(2)
    u0, v0, G = rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal((3, 4))
    ut = mt.tensor(u0, requires_grad=True, dtype="float64")
    vt = mt.tensor(v0, requires_grad=True, dtype="float64")
    (ut.reshape(3, 1) * vt.reshape(1, 4)).backward(G)
    du, dv = _without_library(outer_backward, u0, v0, G, where="outer_backward", instead=_NUMPY)
    assert np.shape(du) == (3,) and np.shape(dv) == (4,), (
        f"du has shape {np.shape(du)} and dv {np.shape(dv)}, u has (3,) and v (4,); hint: a "
        "gradient has its input's shape"
    )
    if np.allclose(du, G.sum(1)) or np.allclose(dv, G.sum(0)):
        raise AssertionError(
            "hint: you summed G over the copies, as for a bias; here each copy of u is also "
            "multiplied by an entry of v (and each copy of v by an entry of u)"
        )
    assert np.allclose(du, ut.grad) and np.allclose(dv, vt.grad), (
        "hint: u was copied along one axis; its gradient sums G (weighted by v) over that axis"
    )


@_exercise("Exercise 2 (x Wᵀ backward)")
def check_02_2(linear_t_backward: Callable) -> None:
    rng = _rng(3)
    x0, W0, G0 = (
        rng.standard_normal((2, 3, 4)),
        rng.standard_normal((5, 4)),
        rng.standard_normal((2, 3, 5)),
    )
    xt = mt.tensor(x0, requires_grad=True, dtype="float64")
    Wt = mt.tensor(W0, requires_grad=True, dtype="float64")
    (xt @ Wt.T).backward(G0)
    dx, dW = _without_library(linear_t_backward, x0, W0, G0, where="linear_t_backward",
                              instead=_NUMPY)  # fmt: skip
    assert np.shape(dx) == (2, 3, 4), f"dx has shape {np.shape(dx)}, x has (2, 3, 4)"
    assert np.shape(dW) == (5, 4), f"dW has shape {np.shape(dW)}, W has (5, 4)"
    assert np.allclose(dx, xt.grad), "dx is wrong; hint: let the shapes pick the product"
    if np.allclose(dW, G0[0].T @ x0[0]):
        raise AssertionError(
            "dW is the first sequence's only; hint: W is shared by every row of every "
            "sequence, so its gradient sums over all of them"
        )
    assert np.allclose(dW, Wt.grad), "dW is wrong; hint: flatten the rows, then one 2-D product"


@_exercise("Exercise 3 (per-head scale gradient)")
def check_02_3(head_scale_grad: Callable) -> None:
    rng = _rng(4)
    x0, s0 = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((1, 3, 1, 1))
    G0 = rng.standard_normal((2, 3, 4, 5))
    st = mt.tensor(s0, requires_grad=True, dtype="float64")
    (mt.tensor(x0, dtype="float64") * st).backward(G0)
    ds = _without_library(head_scale_grad, x0, s0, G0, where="head_scale_grad", instead=_NUMPY)
    ds = np.asarray(ds)
    assert ds.shape == (1, 3, 1, 1), f"ds has shape {ds.shape}; it must have s's shape (1, 3, 1, 1)"
    if np.allclose(ds, G0.sum(axis=(0, 2, 3), keepdims=True)):
        raise AssertionError(
            "hint: s multiplies x, so each copy of s passes back G times the x it scaled"
        )
    assert np.allclose(ds, st.grad), "hint: sum over every axis where s was broadcast"
