"""Lesson 12 (why attention): the checks of its exercises.

- ``check_12_1``: Exercise 1 (the projections, counted: the n where attention stops being
  cheaper than a recurrent layer with g gates)
- ``check_12_2``: Exercise 2 (layers of a dilated convolution stack)
- ``check_12_3``: Exercise 3 (additive attention scores)

See the package docstring (``checks/__init__.py``) for what a check does. Answers may come
back as Python or NumPy numbers, one-element arrays or minitransformer Tensors (``_plain``);
anything else fails with a hint, never a crash inside the check.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng, _without_library


def _macs_attention(n: int, d: int) -> int:
    """One self-attention layer with its projections: x x^T and a V (n^2 d each), and the
    four (n, d) @ (d, d) projections."""
    return 2 * n * n * d + 4 * n * d * d


def _macs_recurrent(n: int, d: int, g: int) -> int:
    """A recurrent layer with g gates: per position and gate, one input and one recurrent
    (1, d) @ (d, d) product."""
    return 2 * g * n * d * d


def _plain(got: object) -> np.ndarray:
    """An answer as a NumPy array: a library Tensor through its ``.numpy()``; a string, a
    dict or anything NumPy cannot read as numbers becomes an empty object array (which every
    check then rejects with its hint)."""
    if isinstance(got, mt.Tensor):
        got = got.numpy()
    if isinstance(got, str | bytes | dict | set) or got is None:
        return np.asarray([], dtype=object)
    try:
        return np.asarray(got)
    except (TypeError, ValueError):
        return np.asarray([], dtype=object)


def _whole_number(got: object, where: str, what: str = "positions n") -> int:
    """An answer n as an int, from an int, a NumPy integer, an integral float, or one of these
    in a one-element array or Tensor (not a bool, not a string)."""
    value = _plain(got)
    ok = value.size == 1 and value.dtype.kind in "iuf" and not isinstance(got, bool)
    ok = ok and bool(np.isfinite(value).all()) and bool((value == np.round(value)).all())
    assert ok, f"{where}: you return {got!r}; return a whole number of {what} (an int)"
    return int(value.reshape(()))


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
        got = _whole_number(dilated_layers(n, k), f"dilated_layers({n}, {k})", "layers")
        assert got == fewest(n, k), (
            f"dilated_layers({n}, {k}) = {got}, expected {fewest(n, k)}. Hint: how many "
            "positions can L layers of the stack see? Find the smallest L that covers n, in "
            "integers (a floating-point log of an exact power can land just above it)."
        )
    if max_path_length is not None:
        for n in (4, 8, 16, 32, 64):
            bfs = max_path_length(n, "convolution (dilated)", k=3)
            assert dilated_layers(n, 3) == bfs, f"n={n}: the BFS says {bfs}"


def _additive_mistake(got, q, m, W_q, W_k, b, v) -> str:
    """Which part of section 3's score an answer ``got`` (S,) got wrong, as a hint that says
    where to look: it is compared with the scores that each usual slip produces."""
    pre = q @ W_q + m @ W_k  # (S, A), the bias still out
    right = np.tanh(pre + b) @ v
    weights = np.exp(right - right.max()) / np.exp(right - right.max()).sum()
    slips = [
        (weights, "these are attention weights (they sum to 1): the exercise asks for the "
         "scores, before any softmax"),
        (np.tanh(pre) @ v, "the bias b never reaches your scores: look at where section 3's "
         "formula adds it, and to which projection it belongs"),
        ((np.tanh(pre) + b) @ v, "the bias sits outside the squashing in your scores: look "
         "at what section 3's tanh contains"),
        ((pre + b) @ v, "your scores are not squashed: look at what section 3 applies before "
         "the product with v"),
        (np.tanh((pre + b) @ v), "you squash after the product with v: look at the order of "
         "the two in section 3"),
    ]  # fmt: skip
    for slip, hint in slips:
        if np.allclose(got, slip, atol=1e-8):
            return hint
    return (
        "go through the score of section 3 term by term: the two projections, the bias, "
        "where the squashing sits, and the product with v"
    )


@_exercise("Exercise 3 (additive attention scores)")
def check_12_3(additive_scores: Callable) -> None:
    """Against the library's AdditiveAttention.scores (float64), one query at a time; in plain
    NumPy (a call into the library fails with a hint)."""
    from minitransformer.nn.recurrent import AdditiveAttention

    rng = _rng(23)
    for Hq, Hk, A, S in [(3, 4, 5, 6), (8, 8, 16, 1), (2, 5, 3, 9), (4, 4, 6, 5)]:
        att = AdditiveAttention(Hq, Hk, A, generator=mt.backend.Generator(int(S), "cpu"))
        att = att.to(dtype="float64")
        att.w_k.bias.data[...] = rng.normal(size=A)  # non-zero, so forgetting it shows
        W_q, W_k = att.w_q.weight.numpy(), att.w_k.weight.numpy()
        b, v = att.w_k.bias.numpy(), att.v.weight.numpy()[:, 0]
        q = rng.normal(size=Hq) * 2
        m = rng.normal(size=(S, Hk)) * 2
        memory = mt.tensor(m[None], dtype="float64")
        expected = att.scores(mt.tensor(q[None], dtype="float64"), att.keys(memory)).numpy()[0]
        shapes = f"q {q.shape}, m {m.shape}, W_q {W_q.shape}, W_k {W_k.shape}, b {b.shape}"
        try:
            answer = _without_library(
                additive_scores, q, m, W_q, W_k, b, v, where="additive_scores",
                instead="the exercise's formula with NumPy's @, + and np.tanh",
            )  # fmt: skip
        except (ValueError, IndexError) as err:  # NumPy's shape errors, from the learner's code
            raise AssertionError(
                f"additive_scores({shapes}, v {v.shape}) raised {type(err).__name__}: {err}. "
                "Hint: check which weight matrix each input is multiplied by, from its shape."
            ) from err
        got = _plain(answer)
        assert got.dtype.kind in "iufc", (
            f"additive_scores returned {type(answer).__name__} {answer!r:.60}; return a NumPy "
            f"array of {S} scores"
        )
        assert got.shape == (S,), (
            f"one score per encoder state: expected shape ({S},), got {got.shape}"
        )
        assert np.isfinite(got).all(), f"your scores hold NaN or inf: {np.round(got, 4)}"
        assert not np.iscomplexobj(got) or np.allclose(got.imag, 0), "your scores are complex"
        got = got.real.astype(np.float64)
        assert np.allclose(got, expected, atol=1e-10), (
            f"Hq={Hq}, Hk={Hk}, A={A}, S={S}: you give {np.round(got, 4)}, the library "
            f"{np.round(expected, 4)}. Hint: {_additive_mistake(got, q, m, W_q, W_k, b, v)}."
        )
