"""Lesson 02 (broadcasting, matmul): the checks of its exercises.

- ``check_02_1``: Exercise 1 (outer product backward)
- ``check_02_2``: Exercise 2 (x Wᵀ backward)
- ``check_02_3``: Exercise 3 (the gradient of a gathered scale, ``x * s[idx]``)

Each answer is written with NumPy: the library's autograd (or its ``unbroadcast``) would
answer any of them, so a call into the library fails with a hint (``_shared._without_library``).
Each is an analytic derivative, compared in float64 at 1e-12 of each entry's size
(``_analytic``) on inputs whose entries span twelve orders of magnitude: central differences
(whose error here is the loss's rounding over the step, the loss being linear) miss it for
every step up to h = 100, and get a hint saying so.

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import _analytic
from ._shared import _exercise, _rng, _without_library

_NUMPY = "write the gradient with NumPy from the arrays you are given (the section above shows how)"


def _spread(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Positive factors 10^-6 .. 10^6 of the given shape: entries of many sizes."""
    return 10.0 ** rng.uniform(-6, 6, shape)


def _pair(answer, where: str, first: str, second: str) -> tuple[np.ndarray, np.ndarray]:
    """An answer that must be a pair of arrays, as float64 arrays."""
    assert isinstance(answer, tuple | list) and len(answer) == 2, (
        f"{where} returns {type(answer).__name__}; return the pair ({first}, {second})"
    )
    return _analytic.floats(answer[0], first), _analytic.floats(answer[1], second)


@_exercise("Exercise 1 (outer product backward)")
def check_02_1(outer_backward: Callable) -> None:
    rng = _rng(2)
    u, v = rng.standard_normal(5), rng.standard_normal(6)
    G = rng.standard_normal((5, 6)) * _spread(rng, (5, 1)) * _spread(rng, (1, 6))
    answer = _without_library(outer_backward, u, v, G, where="outer_backward", instead=_NUMPY)
    du, dv = _pair(answer, "outer_backward", "du", "dv")
    assert du.shape == (5,) and dv.shape == (6,), (
        f"du has shape {du.shape} and dv {dv.shape}, u has (5,) and v (6,); hint: a "
        "gradient has its input's shape"
    )
    want = {"du": G @ v, "dv": G.T @ u}
    scale = {"du": np.abs(G) @ np.abs(v), "dv": np.abs(G).T @ np.abs(u)}
    for name, got in (("du", du), ("dv", dv)):
        if _analytic.exact(got, want[name], scale[name]):
            continue
        if np.allclose(du, G.sum(1), rtol=1e-9, atol=0) or np.allclose(
            dv, G.sum(0), rtol=1e-9, atol=0
        ):
            raise AssertionError(
                "hint: you summed G over the copies, as for a bias; here each copy of u is also "
                "multiplied by an entry of v (and each copy of v by an entry of u)"
            )
        assert not _analytic.near(got, want[name], scale[name]), _analytic.numerical_hint(name)
        raise AssertionError(
            f"{name} is wrong; hint: u was copied along one axis; its gradient sums G "
            "(weighted by v) over that axis"
        )


@_exercise("Exercise 2 (x Wᵀ backward)")
def check_02_2(linear_t_backward: Callable) -> None:
    rng = _rng(3)
    x = rng.standard_normal((2, 3, 4)) * _spread(rng, (1, 1, 4))
    W = rng.standard_normal((5, 4))
    G = rng.standard_normal((2, 3, 5)) * _spread(rng, (2, 3, 1)) * _spread(rng, (1, 1, 5))
    answer = _without_library(linear_t_backward, x, W, G, where="linear_t_backward",
                              instead=_NUMPY)  # fmt: skip
    dx, dW = _pair(answer, "linear_t_backward", "dx", "dW")
    assert dx.shape == (2, 3, 4), f"dx has shape {dx.shape}, x has (2, 3, 4)"
    assert dW.shape == (5, 4), f"dW has shape {dW.shape}, W has (5, 4)"
    rows_x, rows_G = x.reshape(-1, 4), G.reshape(-1, 5)
    want_dx, want_dW = G @ W, rows_G.T @ rows_x
    scale_dx, scale_dW = np.abs(G) @ np.abs(W), np.abs(rows_G).T @ np.abs(rows_x)
    if not _analytic.exact(dx, want_dx, scale_dx):
        assert not _analytic.near(dx, want_dx, scale_dx), _analytic.numerical_hint("dx")
        raise AssertionError("dx is wrong; hint: let the shapes pick the product")
    if _analytic.exact(dW, want_dW, scale_dW):
        return
    if np.allclose(dW, G[0].T @ x[0], rtol=1e-9, atol=0):
        raise AssertionError(
            "dW is the first sequence's only; hint: W is shared by every row of every "
            "sequence, so its gradient sums over all of them"
        )
    assert not _analytic.near(dW, want_dW, scale_dW), _analytic.numerical_hint("dW")
    raise AssertionError("dW is wrong; hint: flatten the rows, then one 2-D product")


def _gather_mistake(ds, x, idx, G, V: int) -> str | None:
    """The hint for a usual mistake in the gradient of the gathered table, if ``ds`` is one."""
    D = x.shape[-1]
    want, scale = _gather_grad(x, idx, G, V)
    buffered = np.zeros((V, D))
    buffered[idx] += G * x  # NumPy's buffered fancy-index add: one position per id
    every = np.zeros((V, D))
    np.add.at(every, idx, G)
    mistakes = [
        (buffered, "an id that appears several times gets the gradient of only one of its "
         "positions: a fancy-indexed `ds[idx] += ...` (or `=`) is buffered, each id is written "
         "once. Every copy of s[v] must add its part (a loop, or an unbuffered add: see NumPy's "
         "ufunc.at)"),
        (every, "s[idx] multiplies x: each copy passes back G times the x it scaled"),
        (np.broadcast_to((G * x).sum(axis=(0, 1)), (V, D)), "row v of s reaches only the "
         "positions whose id is v, not every position"),
    ]  # fmt: skip
    for other, hint in mistakes:
        if np.allclose(ds, other, rtol=1e-9, atol=0):
            return hint
    seen = np.unique(idx)
    if _analytic.exact(ds[seen], want[seen], scale[seen]):
        unseen = ", ".join(str(v) for v in np.setdiff1d(np.arange(V), seen))
        return (
            f"the rows of the ids that never appear ({unseen}) must be 0: those entries of s "
            "touch no output (start from zeros, not np.empty)"
        )
    return None


def _gather_grad(x, idx, G, V: int) -> tuple[np.ndarray, np.ndarray]:
    """The gradient of the table for ``y = x * s[idx]``, and each entry's scale."""
    want, scale = np.zeros((V, x.shape[-1])), np.zeros((V, x.shape[-1]))
    np.add.at(want, idx, G * x)
    np.add.at(scale, idx, np.abs(G * x))
    return want, scale


@_exercise("Exercise 3 (the gradient of a gathered scale)")
def check_02_3(gather_scale_grad: Callable) -> None:
    rng = _rng(4)
    V, D = 7, 5
    idx = np.array([[3, 1, 3, 0], [3, 6, 1, 3], [0, 3, 1, 1]])  # ids 2, 4 and 5 never appear
    x = rng.standard_normal((3, 4, D)) * _spread(rng, (1, 1, D))
    s = rng.standard_normal((V, D))
    G = rng.standard_normal((3, 4, D)) * _spread(rng, (V, 1))[idx]  # sizes per id
    ds = _without_library(gather_scale_grad, x, s, idx, G, where="gather_scale_grad",
                          instead=_NUMPY)  # fmt: skip
    ds = _analytic.floats(ds, "ds")
    assert ds.shape == (V, D), (
        f"ds has shape {ds.shape}; it must have the table s's shape (V, D) = {(V, D)}"
    )
    want, scale = _gather_grad(x, idx, G, V)
    if _analytic.exact(ds, want, scale):
        return
    mistake = _gather_mistake(ds, x, idx, G, V)
    assert mistake is None, f"hint: {mistake}"
    assert not _analytic.near(ds, want, scale), _analytic.numerical_hint("ds")
    raise AssertionError(
        "hint: row v of ds sums, over every position (b, t) whose id is v, G times the x it scaled"
    )
