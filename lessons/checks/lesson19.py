"""Lesson 19 (what the heads do): the checks of its exercises.

- ``check_19_1``: Exercise 1 (the entropy of attention rows)
- ``check_19_2``: Exercise 2 (the importance of each head by central differences)

Exercise 1's answer is tested on rows of several shapes (one row, a matrix of rows, a stack
of heads), with zero weights (0 log 0 = 0: a masked key), one-hot rows (entropy 0) and uniform
rows (log S), as NumPy arrays and lists; natural logarithms (nats), as the lesson's table. It
must compute the entropy itself: a call into the library (``minitransformer.tools.heads``) fails.

Exercise 2's answer gets a function ``loss_at(gates)`` of a small multi-head attention
layer in float64 (the gates: ``MultiHeadAttention.head_mask``), the number of heads and a
step ``eps``; it must return |dL/dm_h| at m = 1 for every head by central differences with
that step. The check compares it with the library's backward (the gates' gradient). The
loss is curved enough that one-sided differences miss by more than the tolerance, and some
derivatives are negative, so the absolute value counts.

Answers may come back as NumPy arrays, lists or minitransformer Tensors (``_array``).
See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._shared import _exercise, _rng, _softmax, _without_library


def _array(x, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """x as a float64 array of ``shape``: NumPy, a list, a number, or a Tensor."""
    if hasattr(x, "numpy") and callable(x.numpy):  # a library Tensor (or a torch tensor)
        x = x.numpy()
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise AssertionError(f"{what}: expected numbers, got {type(x).__name__}") from err
    assert a.size == int(np.prod(shape)), (
        f"{what}: expected {int(np.prod(shape))} numbers (shape {shape}), got shape {a.shape}"
    )
    return a.reshape(shape)


def _entropy(p: np.ndarray) -> np.ndarray:
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-1)


@_exercise("Exercise 1 (the entropy of attention rows)")
def check_19_1(row_entropy: Callable) -> None:
    """``row_entropy(p)``: p (..., S) rows of attention weights -> (...,) entropies in nats."""
    rng = _rng(19)
    S = 7
    one_hot = np.eye(S)[[2]]  # (1, S)
    uniform = np.full((1, S), 1 / S)
    masked = _softmax(rng.standard_normal((3, S)))
    masked[:, 4:] = 0.0  # padded keys: weight exactly 0
    masked /= masked.sum(axis=-1, keepdims=True)
    cases = [
        ("a one-hot row", one_hot),
        ("a uniform row", uniform),
        ("rows with zero weights (masked keys)", masked),
        ("a stack of heads (2, 4, 5, S)", _softmax(rng.standard_normal((2, 4, 5, S)) * 2)),
        ("one row of shape (S,)", _softmax(rng.standard_normal(S))),
    ]
    for name, p in cases:
        for given in (p.copy(), p.tolist()):
            got = _without_library(
                row_entropy, given, where="row_entropy(p)",
                instead="np.log of the weights, summed over the last axis",
            )  # fmt: skip
            got = _array(got, f"row_entropy on {name}", p.shape[:-1])
            want = _entropy(p)
            assert not np.isnan(got).any(), (
                f"row_entropy on {name} gave NaN. Hint: a weight of exactly 0 contributes "
                "0 to the entropy (the limit of p log p as p -> 0), but log(0) is -inf and "
                "0 * -inf is NaN in floating point"
            )
            if name == "a uniform row" and np.allclose(got, np.log2(S)):
                raise AssertionError(
                    f"a uniform row over {S} keys gives {got.ravel()[0]:.4f} = log2({S}); the "
                    "lesson measures in nats. Hint: use the natural logarithm"
                )
            assert np.allclose(got, want, rtol=1e-9, atol=1e-12), (
                f"row_entropy on {name}: got {np.round(got.ravel()[:4], 5)}, want "
                f"{np.round(want.ravel()[:4], 5)}. Hint: H = -sum over the keys of p log p, "
                "one number per row (sum over the last axis only), and it is never negative"
            )


def _layer_loss(seed: int):
    """(loss_at(gates) -> float, the library's |dL/dm| (H,)) for a small float64 attention
    layer: L = sum of (out * w) + 0.5 sum(out^2), curved in the gates."""
    import minitransformer as mt

    rng = np.random.default_rng(seed)
    mt.backend.manual_seed(seed)
    layer = mt.nn.MultiHeadAttention(16, 4).to(dtype="float64")
    x = mt.Tensor(rng.standard_normal((2, 5, 16)))
    w = mt.Tensor(rng.standard_normal((2, 5, 16)) * 3.0)

    def loss(gates):
        layer.head_mask = gates
        out = layer(x, x, x)
        return (out * w).sum() + (out * out).sum() * 0.5

    gates = mt.Tensor(np.ones(4), requires_grad=True)
    loss(gates).backward()
    want = np.abs(gates.grad)
    signs = np.sign(gates.grad)

    def loss_at(g) -> float:
        g = np.array(g, dtype=np.float64).reshape(4)
        with mt.no_grad():
            return float(loss(g).item())

    return loss_at, want, signs


@_exercise("Exercise 2 (head importance by central differences)")
def check_19_2(importance_by_differences: Callable) -> None:
    """``importance_by_differences(loss_at, n_heads, eps)`` -> (n_heads,) |dL/dm_h| at m = 1."""
    for seed in (0, 1, 2):
        loss_at, want, signs = _layer_loss(seed)
        # (no library-call guard here: loss_at itself runs the library's layer, and the
        # answer is given no model it could ask for the library's importance)
        got = _array(importance_by_differences(loss_at, 4, 1e-3), "importance_by_differences", (4,))
        if np.allclose(np.abs(got), want, rtol=1e-5) and (got < 0).any():
            raise AssertionError(
                f"your scores {np.round(got, 5)} have the right sizes but some are negative. "
                "Hint: Michel et al.'s importance is the size of the derivative, whichever way "
                "the loss moves"
            )
        if np.allclose(got, 2 * want, rtol=1e-5) or np.allclose(got, want / 2, rtol=1e-5):
            raise AssertionError(
                f"your scores are twice or half the derivative ({np.round(got, 5)} against "
                f"{np.round(want, 5)}). Hint: the two evaluations are 2·eps apart"
            )
        assert np.allclose(got, want, rtol=1e-6, atol=1e-9), (
            f"layer {seed}: your scores {np.round(got, 6)}, the library's backward "
            f"{np.round(want, 6)} (difference {np.abs(got - want).max():.2e}). Hint: step each "
            "gate both ways, m_h = 1 + eps and 1 - eps with the others at 1: a step one way "
            "only is off by about eps times the curvature"
        )
        assert signs.min() < 0 < signs.max()  # the check itself: both signs occur
