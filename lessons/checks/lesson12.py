"""Lesson 12 (why attention): the checks of its exercises.

- ``check_12_1``: Exercise 1 (the projections, counted: the n where attention stops being
  cheaper than a recurrent layer with g gates)
- ``check_12_2``: Exercise 2 (layers of a dilated convolution stack)
- ``check_12_3``: Exercise 3 (additive attention scores)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng


def _macs_attention(n: int, d: int) -> int:
    """One self-attention layer with its projections: x x^T and a V (n^2 d each), and the
    four (n, d) @ (d, d) projections."""
    return 2 * n * n * d + 4 * n * d * d


def _macs_recurrent(n: int, d: int, g: int) -> int:
    """A recurrent layer with g gates: per position and gate, one input and one recurrent
    (1, d) @ (d, d) product."""
    return 2 * g * n * d * d


def _whole_number(got: object, where: str) -> int:
    """An answer n as an int, from an int, a NumPy integer or an integral float (not a bool,
    not a string)."""
    value = np.asarray(got) if not isinstance(got, str | bytes) else np.asarray(None)
    ok = value.ndim == 0 and value.dtype.kind in "iuf"
    assert ok and np.isfinite(value) and value == np.round(value), (
        f"{where}: you return {got!r}; return a whole number of positions n (an int)"
    )
    return int(value)


@_exercise("Exercise 1 (the projections, counted: a new crossover)")
def check_12_1(attention_stops_cheaper: Callable) -> None:
    """Against a search over n with the exercise's counts, for several widths and gates."""
    for d in (1, 2, 8, 64, 100, 512):
        for g in (1, 2, 3, 4, 5, 8):
            where = f"attention_stops_cheaper(d={d}, g={g})"
            n = _whole_number(attention_stops_cheaper(d, g), where)
            expected = 1
            while _macs_attention(expected, d) < _macs_recurrent(expected, d, g):
                expected += 1
            if n == expected:
                continue
            assert n >= 1, (
                f"{where} = {n}, but n counts positions, so it is at least 1. Hint: when "
                "attention is cheaper at no length, it has 'stopped' being cheaper at the "
                "first one."
            )
            assert _macs_attention(n, d) >= _macs_recurrent(n, d, g), (
                f"{where} = {n}: at that n the attention layer still needs fewer "
                "multiply-adds than the recurrent one, so it has not stopped being cheaper. "
                "Hint: count every gate's two products at every position, and each "
                "projection once."
            )
            raise AssertionError(
                f"{where} = {n}: attention already needs at least as many multiply-adds at "
                f"n = {n - 1}, so {n} is not the first such n. Hint: did you add all four "
                "projections to section 7's core count, and does equality count as no "
                "longer cheaper in your comparison?"
            )


@_exercise("Exercise 2 (layers of a dilated convolution stack)")
def check_12_2(dilated_layers: Callable, max_path_length: Callable | None = None) -> None:
    """Against exact integer counts (and, given the lesson's BFS, against it at k = 3)."""

    def fewest(n: int, k: int) -> int:
        L, reach = 0, 1
        while reach < n:
            L, reach = L + 1, reach * k
        return L

    cases = [(n, k) for k in (2, 3, 5, 10) for n in (2, 3, 4, 8, 9, 10, 26, 27, 28, 64, 100)]
    cases += [(125, 5), (126, 5), (243, 3), (1000, 10), (1001, 10), (2**20, 2), (2**20 + 1, 2)]
    for n, k in cases:
        got = dilated_layers(n, k)
        assert got == fewest(n, k), (
            f"dilated_layers({n}, {k}) = {got}, expected {fewest(n, k)}. Hint: how many "
            "positions can L layers of the stack see? Find the smallest L that covers n, in "
            "integers (a floating-point log of an exact power can land just above it)."
        )
    if max_path_length is not None:
        for n in (4, 8, 16, 32, 64):
            bfs = max_path_length(n, "convolution (dilated)", k=3)
            assert dilated_layers(n, 3) == bfs, f"n={n}: the BFS says {bfs}"


@_exercise("Exercise 3 (additive attention scores)")
def check_12_3(additive_scores: Callable) -> None:
    """Against the library's AdditiveAttention.scores (float64), one query at a time."""
    from minitransformer.nn.recurrent import AdditiveAttention

    rng = _rng(23)
    for Hq, Hk, A, S in [(3, 4, 5, 6), (8, 8, 16, 1), (2, 5, 3, 9)]:
        att = AdditiveAttention(Hq, Hk, A, generator=mt.backend.Generator(int(S), "cpu"))
        att = att.to(dtype="float64")
        att.w_k.bias.data[...] = rng.normal(size=A)  # non-zero, so forgetting it shows
        W_q, W_k = att.w_q.weight.numpy(), att.w_k.weight.numpy()
        b, v = att.w_k.bias.numpy(), att.v.weight.numpy()[:, 0]
        q = rng.normal(size=Hq) * 2
        m = rng.normal(size=(S, Hk)) * 2
        memory = mt.tensor(m[None], dtype="float64")
        expected = att.scores(mt.tensor(q[None], dtype="float64"), att.keys(memory)).numpy()[0]
        got = np.asarray(additive_scores(q, m, W_q, W_k, b, v), dtype=np.float64)
        assert got.shape == (S,), (
            f"one score per encoder state: expected shape ({S},), got {got.shape}"
        )
        assert np.allclose(got, expected, atol=1e-10), (
            f"Hq={Hq}, Hk={Hk}, A={A}, S={S}: you give {np.round(got, 4)}, the library "
            f"{np.round(expected, 4)}. Hint: go through the score of section 3 term by term: "
            "which projection carries the bias, where the squashing sits, and that these are "
            "scores, before any softmax."
        )
