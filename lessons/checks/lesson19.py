"""Lesson 19 (what the heads do): the checks of its exercises.

- ``check_19_1``: Exercise 1 (Voita et al.'s positional criterion for one head)
- ``check_19_2``: Exercise 2 (the importance of each head by central differences)

Exercise 1's answer ``positional_offset(weights, lengths)`` gets one head's attention weights
(B, T, T) on a padded batch and each sentence's number of real tokens (B,), and returns -1
or +1 when the head is positional by Voita et al.'s criterion (in at least 90% of the real
rows of the batch, pooled, its largest weight sits at key t - 1, or at key t + 1), None when
it is not. The check's heads are built so that each usual slip gives a different set of
verdicts: the mean weight instead of the largest, padded rows counted, the same position
(offset 0) taken for a neighbour, the threshold misused (> for >=, 0.5, 90 for 0.9), the
offset's direction flipped. A sentence's own fraction averaged over sentences gives the same
verdicts as the pooled one on every case (accepted). It must be NumPy of the learner's own (a
call into the library fails) and leave the caller's arrays as they were.

Exercise 2's answer gets a function ``loss_at(gates)`` of a small multi-head attention
layer in float64 (the gates: ``MultiHeadAttention.head_mask``), the number of heads and a
step ``eps``; it must return |dL/dm_h| at m = 1 for every head by central differences with
that step. The check compares it with the library's backward (the gates' gradient). The
loss is curved enough that one-sided differences miss by more than the tolerance, and some
derivatives are negative, so the absolute value counts. Its only array is the learner's own
(the gates it passes to ``loss_at``, which copies them): no caller's array to change.

Answers may come back as NumPy arrays, lists, numbers or minitransformer Tensors.
See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._shared import _array, _exercise, _rng, _without_library

THRESHOLD = 0.9  # Voita et al.: the same relative position in at least 90% of the rows


def _floats(x, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """x as a float64 array of ``shape``: NumPy, a list, a number, or a Tensor."""
    a = _array(x, what, kinds="iuf").astype(np.float64)
    assert a.size == int(np.prod(shape)), (
        f"{what}: expected {int(np.prod(shape))} numbers (shape {shape}), got shape {a.shape}"
    )
    return a.reshape(shape)


# ------------------------------------------------------------------ exercise 1
def _head(seed: int, lengths: list[int], T: int, plan: Callable, causal: bool = False):
    """One head's weights (B, T, T): row t of sentence b gets the weights ``plan(b, t, n)``
    gives ({key: weight}; n = lengths[b]); the rest of the row's mass is spread at random
    over its other keys (real ones, and not after t when ``causal``), padded keys get 0."""
    rng = _rng(seed)
    w = np.zeros((len(lengths), T, T))
    for b, n in enumerate(lengths):
        for t in range(T):
            keys = [s for s in range(n) if not (causal and s > t)]
            fixed = plan(b, t, n)
            others = [s for s in keys if s not in fixed]
            rest = 1.0 - sum(fixed.values())
            for s, v in fixed.items():
                w[b, t, s] = v
            if others:
                share = rng.uniform(0.5, 1.0, len(others))
                w[b, t, others] = rest * share / share.sum()
            else:
                w[b, t, max(fixed, key=fixed.get)] += rest
    return w


def _peak(at: Callable, weight: float = 0.45, padded: Callable | None = None) -> Callable:
    """A plan: row t's largest weight ``weight`` at key at(b, t, n) (None: at key 0, a row
    with no such key); padded rows (t >= n) at ``padded(b, t, n)`` (default: key 0)."""

    def plan(b: int, t: int, n: int) -> dict[int, float]:
        key = (padded or (lambda b, t, n: 0))(b, t, n) if t >= n else at(b, t, n)
        return {0 if key is None or not 0 <= key < n else key: weight}

    return plan


def _sharp_prev(b: int, t: int, n: int) -> dict[int, float]:
    """Near one-hot on t - 1 in most rows; in rows 5, 15, 25 0.5 on key t + 1 (or 0) and 0.45
    on t - 1: the mean weight on t - 1 is above 0.9, the share of rows it wins below."""
    if t == 0 or t >= n:
        return {min(1, n - 1): 0.995}
    if t % 10 == 5:
        return {t + 1 if t + 1 < n else 0: 0.5, t - 1: 0.45}
    return {t - 1: 0.995}


def _cases() -> list[tuple[str, np.ndarray, np.ndarray, int | None]]:
    """(what the head is, weights (B, T, T), lengths (B,), the verdict)."""
    prev, nxt = (lambda b, t, n: t - 1 if t else None), (lambda b, t, n: t + 1)
    same = lambda b, t, n: t  # noqa: E731
    mixed = lambda b, t, n: t - 1 if t % 2 else t  # noqa: E731
    scattered = lambda b, t, n: (3 * t + b + 2) % n  # noqa: E731
    most = lambda b, t, n: t - 1 if t != 5 else None  # noqa: E731  (8 rows of 10)
    return [
        ("a head on the previous token (padded rows on key 0)",
         _head(1, [12, 9, 12], 12, _peak(prev)), np.array([12, 9, 12]), -1),
        ("a head on the next token", _head(2, [20, 20], 20, _peak(nxt)), np.array([20, 20]), 1),
        ("a head on the previous token in exactly 90% of the rows",
         _head(3, [10, 10], 10, _peak(prev)), np.array([10, 10]), -1),
        ("a head on the same position", _head(4, [11, 11], 12, _peak(same)),
         np.array([11, 11]), None),
        ("a head half on the previous token, half on the same position",
         _head(5, [10, 10], 10, _peak(mixed)), np.array([10, 10]), None),
        ("a head on the previous token in 80% of the rows", _head(6, [10, 10], 10, _peak(most)),
         np.array([10, 10]), None),
        ("a sharp head: mean weight above 0.9 on the previous token, largest there in 26 of 30 "
         "rows", _head(7, [30, 30], 30, _sharp_prev), np.array([30, 30]), None),
        ("a decoder head on the previous token (causal: no weight after t)",
         _head(8, [16, 13], 16, _peak(prev, 0.7), causal=True), np.array([16, 13]), -1),
        ("a head whose largest weights are scattered", _head(9, [12, 12], 12, _peak(scattered)),
         np.array([12, 12]), None),
    ]  # fmt: skip


def _verdict(w, lengths, *, largest=True, real=True, with_same=False, strict=False,
             sign=1, threshold=THRESHOLD) -> int | None:  # fmt: skip
    """Voita's verdict, and (through the flags) the usual slips of it."""
    B, T, S = w.shape
    rows = np.arange(T)[None, :] < np.asarray(lengths)[:, None]  # (B, T) the real rows
    if not real:
        rows[:] = True
    fractions = {}
    for offset in (-1, 0, 1) if with_same else (-1, 1):
        hit = np.zeros((B, T))  # row t's share of the verdict at this offset
        for t in range(T):
            key = t + sign * offset
            if 0 <= key < S:
                hit[:, t] = (w[:, t].argmax(-1) == key) if largest else w[:, t, key]
        fractions[offset] = (hit * rows).sum() / rows.sum()
    best = max(fractions, key=fractions.get)
    f = fractions[best]
    return best if (f > threshold if strict else f >= threshold) else None


_SLIPS = [
    ({"largest": False}, "Voita's criterion counts the rows whose LARGEST weight (the argmax) "
     "sits at t - 1 or t + 1, not the mean weight there"),
    ({"real": False}, "count only the rows of real tokens, t < lengths[b]: padded rows are "
     "not the sentence's tokens, whatever their weights"),
    ({"with_same": True}, "the same position (offset 0) is no neighbour: a positional head "
     "looks at t - 1 or t + 1 only"),
    ({"strict": True}, "at least 90% of the rows: a fraction of exactly 0.9 counts (>=, not >)"),
    ({"threshold": 0.5}, "the threshold is 90% of the rows, not a majority"),
    ({"threshold": 90}, "you find no positional head at all, not even on a head whose largest "
     "weight is on t - 1 in every row but the first: the threshold is a fraction of the rows, "
     "0.9 (not 90)"),
    ({"sign": -1}, "the offset is key minus query, s - t: the previous token is -1, the next "
     "+1 (yours has the direction flipped)"),
]  # fmt: skip


def _offset(got, what: str) -> int | None:
    """An answer as -1, +1, 0 or None (an int, an integral float, a one-element array)."""
    if got is None:
        return None
    a = _array(got, what, kinds="biuf")
    assert a.size == 1 and a.dtype.kind != "b", (
        f"{what}: you return {got!r:.60}; return -1, +1, or None for a head that is not positional"
    )
    value = float(a.reshape(()))
    assert value in (-1.0, 0.0, 1.0), (
        f"{what}: you return {value:g}; return the offset, -1 or +1, or None"
    )
    return int(value)


@_exercise("Exercise 1 (Voita et al.'s positional criterion)")
def check_19_1(positional_offset: Callable) -> None:
    """``positional_offset(weights, lengths)``: one head's weights (B, T, T) and the real
    lengths (B,) -> -1, +1 or None."""
    cases = _cases()
    want = [verdict for *_, verdict in cases]
    got = []
    for name, w, lengths, _ in cases:
        answer = _without_library(
            positional_offset, w, lengths, where="positional_offset(weights, lengths)",
            instead="np.argmax over the keys, compared with t - 1 and t + 1",
        )  # fmt: skip
        got.append(_offset(answer, f"positional_offset on {name}"))
    if got != want:
        for flags, hint in _SLIPS:
            if got == [_verdict(w, n, **flags) for _, w, n, _ in cases]:
                raise AssertionError(f"Hint: {hint}")
        i = next(i for i, (g, v) in enumerate(zip(got, want, strict=True)) if g != v)
        raise AssertionError(
            f"on {cases[i][0]} you return {got[i]}, want {want[i]}. Hint: among the rows of "
            "real tokens of the whole batch (t < lengths[b]), the fraction whose largest "
            "weight sits at key t - 1, and at key t + 1; the head is positional at an offset "
            "where that fraction is at least 0.9, else None"
            + (" (None, not 0, for a head that is not positional)" if got[i] == 0 else "")
        )
    for name, w, lengths, verdict in cases:  # the same verdicts from lists
        answer = positional_offset(w.tolist(), lengths.tolist())
        assert _offset(answer, f"positional_offset on {name}, as lists") == verdict, (
            f"on {name} given as Python lists you return {answer!r:.40}, want {verdict} (as "
            "for the arrays). Hint: np.asarray(weights) first"
        )


# ------------------------------------------------------------------ exercise 2
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
        got = _floats(
            importance_by_differences(loss_at, 4, 1e-3), "importance_by_differences", (4,)
        )
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
