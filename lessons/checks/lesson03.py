"""Lesson 03 (softmax, cross-entropy): the checks of its exercises.

- ``check_03_1``: Exercise 1 (logsumexp and its gradient, a fully masked row included)
- ``check_03_2``: Exercise 2 (best margin with label smoothing)
- ``check_03_3``: Exercise 3 (the gradient of cross-entropy smoothed over the V − 1 other
  classes, with ``ignore_index``)

Exercise 1's answer ``logsumexp_with_grad(x, axis)`` returns ``(value, grad)``: logsumexp
over ``axis`` (that axis dropped) and its gradient, the softmax along ``axis`` (x's shape). A
fully masked line (every entry −inf) has the value −inf and the gradient 0, with no warning and
no nan; the cell of the lesson that computes logsumexp gets nan there (−inf − (−inf)).

Exercise 3's answer ``ce_grad(x, t, eps, ignore_index)`` is the gradient of the mean over the
kept rows of −Σ_c q_c log p_c with q = 1 − ε on the target and ε / (V − 1) on each other class
(not this lesson's q, which spreads ε over all V). It is an analytic derivative, compared in
float64 at 1e-12 of each entry's size (``_analytic``): central differences fail, with a hint.

Exercises 1 and 3 say "in NumPy": a call into the library fails with a hint
(``_shared._without_library``). See the package docstring (``checks/__init__.py``) for what a
check does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from . import _analytic
from ._shared import _exercise, _rng, _without_library

_NUMPY_LSE = "the value and the softmax with NumPy, from this lesson's log-softmax section"
_NUMPY_CE = "p − q with NumPy, from this lesson's sections on cross-entropy and smoothing"


def _lse_reference(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """logsumexp over ``axis`` and its gradient, −inf and 0 on a fully masked line."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):  # log 0 = -inf on a fully masked line: the answer
        value = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
    grad = np.where(np.isfinite(value), np.exp(x - np.where(np.isfinite(value), value, 0)), 0.0)
    return np.squeeze(value, axis=axis), grad


def _lse_answer(logsumexp_with_grad: Callable, x: np.ndarray, axis: int, where: str):
    """The answer's (value, grad) on ``x``, NumPy warnings turned into a hint."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # overflow/invalid warnings become errors
        try:
            answer = _without_library(
                logsumexp_with_grad, x, axis, where="logsumexp_with_grad", instead=_NUMPY_LSE
            )
        except RuntimeWarning as w:
            raise AssertionError(
                f"{where}: NumPy warned: {w}; {_WARNED.get(where, _EITHER)}"
            ) from None
    assert isinstance(answer, tuple | list) and len(answer) == 2, (
        f"{where}: you return {type(answer).__name__}; return the pair (value, grad)"
    )
    return _analytic.floats(answer[0], "value"), _analytic.floats(answer[1], "grad")


_MASKED = (
    "a fully masked row (every entry -inf) has no largest finite entry: shifting by its max "
    "gives -inf - (-inf) = nan. Its logsumexp is log 0 = -inf, and its gradient 0 (no entry "
    "can change the value); reach both without computing that nan"
)
_EITHER = f"hint: make the largest exponent 0 (finite lines), and {_MASKED}"
_WARNED = {
    "rows [1000, 1000], [-1000, -1000], [0, -inf]": "hint: make the largest exponent 0",
    "a fully masked row [-inf, -inf]": f"hint: {_MASKED}",
}


def _grad_hint(grad: np.ndarray, x: np.ndarray, axis: int, where: str) -> str:
    """Where to look, for a wrong gradient of logsumexp."""
    value, want = _lse_reference(x, axis)
    with np.errstate(all="ignore"):
        log_p = x - np.expand_dims(value, axis)
        unnormalised = np.exp(x - np.max(x, axis=axis, keepdims=True))
        last = _lse_reference(x, -1)[1]
    masked = ~np.isfinite(np.broadcast_to(np.expand_dims(value, axis), x.shape))
    if np.allclose(grad[~masked], want[~masked], rtol=1e-6, atol=1e-9):
        return f"{where}: right except on the fully masked lines; hint: {_MASKED}"
    for other, hint in [
        (log_p, "that is log p, the log-softmax: the derivative of logsumexp is p itself"),
        (unnormalised, "each line of the gradient along `axis` sums to 1 (a probability): "
         "divide by what the exponentials sum to"),
        (last, "the gradient is the softmax along `axis`, not along the last axis"),
    ]:  # fmt: skip
        if np.allclose(grad[~masked], other[~masked], rtol=1e-6, atol=1e-9, equal_nan=True):
            return f"{where}: {hint}"
    if not np.isfinite(grad).all():
        return f"{where}: the gradient has nan or inf; hint: a masked entry (-inf) has weight 0"
    return (
        f"{where}: the gradient is wrong; hint: differentiate m + log Σ e^(x - m) "
        "(the section 'The backward' has log-softmax's derivative)"
    )


@_exercise("Exercise 1 (logsumexp and its gradient)")
def check_03_1(logsumexp_with_grad: Callable) -> None:
    inf = np.inf
    cases = [
        ("rows [1000, 1000], [-1000, -1000], [0, -inf]",
         np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [0.0, -inf]]), -1),
        ("a fully masked row [-inf, -inf]", np.array([[-inf, -inf], [1.0, 1.0]]), -1),
    ]  # fmt: skip
    x = _rng(5).standard_normal((3, 4, 5)) * 3
    x[0, 1, 2] = x[2, 0, 4] = -inf  # masked entries
    x[1, :, 3] = -inf  # a line masked along axis 1
    x[:, 2, 0] = -inf  # along axis 0
    x[2, 3, :] = -inf  # along axis 2
    cases += [(f"x of shape (3, 4, 5), axis={ax}", x, ax) for ax in (0, 1, -1, 2)]
    for where, xs, axis in cases:
        value, grad = _lse_answer(logsumexp_with_grad, xs, axis, where)
        want_value, want_grad = _lse_reference(xs, axis)
        if value.shape == np.expand_dims(want_value, axis).shape and value.shape != ():
            raise AssertionError(
                f"{where}: the value has shape {value.shape}, with the summed axis kept; "
                f"return it without that axis, {want_value.shape}"
            )
        assert value.shape == want_value.shape, (
            f"{where}: the value has shape {value.shape}, expected {want_value.shape} (the "
            "summed axis dropped)"
        )
        assert not np.isnan(value).any(), f"{where}: the value has nan; hint: {_MASKED}"
        assert np.array_equal(np.isneginf(value), np.isneginf(want_value)), (
            f"{where}: the value is -inf exactly where every entry of the line is -inf; "
            f"yours: {value}"
        )
        finite = np.isfinite(want_value)
        assert np.allclose(value[finite], want_value[finite]), (
            f"{where}: got {value}; hint: make the largest exponent 0, and add back what you "
            "took out"
        )
        assert grad.shape == xs.shape, (
            f"{where}: the gradient has shape {grad.shape}; it has x's shape {xs.shape}"
        )
        if not np.allclose(grad, want_grad, rtol=1e-6, atol=1e-9):
            raise AssertionError(_grad_hint(grad, xs, axis, where))


def _row_losses(ms, eps, V):  # loss of rows [m, 0, ..., 0] with target 0, one per margin
    z = np.zeros((ms.size, V))
    z[:, 0] = ms
    t = np.zeros(ms.size, dtype=np.int64)
    return F.cross_entropy(mt.tensor(z), t, label_smoothing=eps, reduction="none").numpy()


@_exercise("Exercise 2 (best margin with label smoothing)")
def check_03_2(best_margin: Callable) -> None:
    for eps, V in [(0.1, 10), (0.1, 1000), (0.3, 5)]:
        ms = np.linspace(0, 20, 201)  # coarse search, then a fine one around the best
        ms = np.linspace(*ms[_row_losses(ms, eps, V).argmin()] + np.array([-0.1, 0.1]), 201)
        numeric = ms[_row_losses(ms, eps, V).argmin()]
        mine = float(best_margin(eps, V))
        assert abs(mine - numeric) < 0.01, (
            f"eps={eps}, V={V}: your margin {mine:.3f}, the loss is smallest at {numeric:.3f}; "
            "hint: when is cross-entropy against q smallest, and what ratio of probabilities "
            "does a margin m give?"
        )


def _smoothed_q(t: np.ndarray, eps: float, V: int, keep: np.ndarray) -> np.ndarray:
    """Exercise 3's target: 1 − ε on t, ε / (V − 1) on each other class (kept rows)."""
    q = np.full((len(t), V), eps / (V - 1))
    q[np.arange(len(t)), np.where(keep, t, 0)] = 1 - eps
    return q


def _ce_parts(x, t, eps, ignore, *, q_of=_smoothed_q, mean_over_kept=True):
    """(p, q, keep, count): what the gradient (p − q) · keep / count is made of."""
    N, V = x.shape
    keep = t != ignore
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    p = z / z.sum(axis=-1, keepdims=True)
    count = max(int(keep.sum()), 1) if mean_over_kept else N
    return p, q_of(t, eps, V, keep), keep, count


def _lesson_q(t, eps, V, keep):  # this lesson's smoothing: eps / V everywhere, target too
    q = np.full((len(t), V), eps / V)
    q[np.arange(len(t)), np.where(keep, t, 0)] += 1 - eps
    return q


def _unnormalised_q(t, eps, V, keep):  # 1 - eps on the target, eps / V on the others
    q = np.full((len(t), V), eps / V)
    q[np.arange(len(t)), np.where(keep, t, 0)] = 1 - eps
    return q


_CE_SLIPS = [
    ({"q_of": _lesson_q}, "that is this lesson's smoothing (section 'Label smoothing'), which "
     "spreads ε over all V classes, the target included; here the target gets exactly 1 − ε "
     "and only the other classes share ε"),
    ({"q_of": _unnormalised_q}, "q must sum to 1 over the V classes: how many classes share ε?"),
    ({"mean_over_kept": False}, "the mean counts only the rows that are not ignored (section "
     "'Cross-entropy, fused')"),
]  # fmt: skip


def _ce_hint(mine, x, t, eps, ignore) -> str:
    p, q, keep, count = _ce_parts(x, t, eps, ignore)
    want = (p - q) * keep[:, None] / count
    if not keep.any() and not np.isfinite(mine).all():
        return "every row is ignored: the mean of no rows contributes nothing, gradient 0 (no nan)"
    if np.abs(mine[~keep]).max(initial=0.0) > 0:
        return "hint: what do ignored rows contribute to the loss?"
    for flags, hint in _CE_SLIPS:
        p2, q2, keep2, count2 = _ce_parts(x, t, eps, ignore, **flags)
        if np.allclose(mine, (p2 - q2) * keep2[:, None] / count2, rtol=1e-9, atol=0):
            return f"hint: {hint}"
    if np.allclose(mine, -want, rtol=1e-9, atol=0):
        return "hint: the sign: the loss falls as p moves towards q"
    if np.allclose(mine, want * count, rtol=1e-9, atol=0):
        return "hint: the gradient of the MEAN: divide by the number of rows it averages"
    return (
        "the gradient differs; hint: see the sections 'Cross-entropy, fused' and 'Label "
        "smoothing' of this lesson: which target does a smoothed row aim at here?"
    )


@_exercise("Exercise 3 (cross-entropy gradient, ε over the other V − 1 classes)")
def check_03_3(ce_grad: Callable) -> None:
    rng = _rng(6)
    trials = [(0.1, -100, 6, 8), (0.2, -100, 7, 5), (0.3, -1, 5, 12), (0.1, -100, 3, 4)]
    for trial, (eps, ignore, N, V) in enumerate(trials):
        x = rng.standard_normal((N, V)) * 3
        t = rng.integers(0, V, N)
        t[trial % N] = ignore  # one padding row
        if trial == 3:
            t[:] = ignore  # a batch of padding only
        where = f"ce_grad(x {x.shape}, t, eps={eps}, ignore_index={ignore})"
        mine = _without_library(ce_grad, x, t, eps, ignore, where="ce_grad", instead=_NUMPY_CE)
        mine = _analytic.floats(mine, "the gradient")
        assert mine.shape == (N, V), f"{where}: the gradient has the logits' shape {(N, V)}"
        p, q, keep, count = _ce_parts(x, t, eps, ignore)
        want = (p - q) * keep[:, None] / count
        scale = (p + q) * keep[:, None] / count
        if _analytic.exact(mine, want, scale):
            continue
        hint = _ce_hint(mine, x, t, eps, ignore)
        if hint.startswith("the gradient differs") and _analytic.near(mine, want, scale):
            hint = _analytic.numerical_hint("the gradient")
        raise AssertionError(f"{where}: {hint}")
