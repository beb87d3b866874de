"""Lesson 12 (why attention): the checks of its exercises.

- ``check_12_1``: Exercise 1 (path length through a recurrent encoder-decoder)
- ``check_12_2``: Exercise 2 (layers of a dilated convolution stack)
- ``check_12_3``: Exercise 3 (additive attention scores)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _rng


@_exercise("Exercise 1 (path length through a recurrent encoder-decoder)")
def check_12_1(rnn_path: Callable) -> None:
    for S in (1, 4, 9, 16):
        for t in range(S):
            j = S - 1 - t  # the reverse task: output t needs source token S - 1 - t
            got = rnn_path(S, j, t)
            assert got == 2 * t + 1, (
                f"rnn_path({S}, {j}, {t}) = {got}, but on the reverse task the distance plotted "
                f"in section 5 is {2 * t + 1}. Hint: count the encoder steps that still follow "
                "x_j, then the decoder steps up to and including the one that emits output t."
            )
        for j in range(S):
            got = rnn_path(S, j, j)
            assert got == S, (
                f"copy task: rnn_path({S}, {j}, {j}) = {got}; hint: on the copy task every "
                "token is equally far from the output that repeats it"
            )
    rng = _rng(22)
    for _ in range(20):
        S = int(rng.integers(2, 40))
        j, t = int(rng.integers(0, S)), int(rng.integers(0, 50))
        expected = (S - 1 - j) + (t + 1)
        got = rnn_path(S, j, t)
        assert got == expected, (
            f"rnn_path({S}, {j}, {t}) = {got}, expected {expected}; hint: the target may be "
            "longer than the source, and the two counts add up"
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
