"""Lesson 14 (data parallelism): the checks of its exercises.

- ``check_14_1``: Exercise 1 (combining the ranks' gradients)
- ``check_14_2``: Exercise 2 (messages of the ring all-reduce)
- ``check_14_3``: Exercise 3 (where latency and bandwidth cost the same)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng


@_exercise("Exercise 1 (combining the ranks' gradients)")
def check_14_1(combine_shard_grads: Callable) -> None:
    """Shards of a padded batch, down to one row per rank: the combination of the shards'
    mean-loss gradients must equal the whole batch's gradient (library cross_entropy)."""
    rng = _rng(26)
    V, D = 7, 5
    lengths = np.array([5, 1, 3, 4, 2, 6, 1])  # very uneven shards
    B, T = len(lengths), int(lengths.max())
    feats = rng.normal(size=(B, T, D))
    target = rng.integers(1, V, (B, T))
    target[np.arange(T)[None, :] >= lengths[:, None]] = 0  # padding
    W0 = rng.normal(size=(D, V))

    def grad(rows: np.ndarray) -> np.ndarray:
        W = mt.tensor(W0, dtype="float64", requires_grad=True)
        logits = F.matmul(mt.tensor(feats[rows], dtype="float64"), W)
        F.cross_entropy(logits, target[rows], ignore_index=0).backward()
        return W.grad

    whole = grad(np.arange(B))
    for N in (1, 2, 3, B):
        shards = np.array_split(np.arange(B), N)
        grads = [grad(rows) for rows in shards]
        tokens = [int((target[rows] != 0).sum()) for rows in shards]
        got = np.asarray(combine_shard_grads(grads, tokens), dtype=np.float64)
        assert got.shape == whole.shape, f"expected one gradient of shape {whole.shape}"
        assert np.allclose(got, whole, atol=1e-12), (
            f"N={N} ranks with {tokens} tokens: max error {np.abs(got - whole).max():.2e}. "
            "Hint: each shard's gradient is of its own *mean*; the whole batch's loss is the "
            "mean over all its tokens. How much of that mean does each shard hold?"
        )


@_exercise("Exercise 2 (messages of the ring all-reduce)")
def check_14_2(ring_allreduce_counted: Callable) -> None:
    """Runs the learner's simulated ring: every buffer must end as the sum, and each rank
    must report 2(N-1) messages; an uneven buffer size and N = 1 included."""
    rng = _rng(27)
    for N, size in [(1, 10), (2, 8), (3, 10), (5, 17), (8, 1000)]:
        bufs = [rng.normal(size=size) for _ in range(N)]
        expected = np.sum(bufs, axis=0)
        got = ring_allreduce_counted(bufs)
        assert all(np.allclose(b, expected) for b in bufs), (
            f"N={N}: after the all-reduce every rank's buffer must hold the sum (in place)"
        )
        got = [int(c) for c in np.atleast_1d(got)]
        assert len(got) == N, f"N={N}: return one message count per rank, got {len(got)}"
        assert got == [2 * (N - 1)] * N, (
            f"N={N}: you count {got} messages per rank. Hint: count one per chunk a rank sends, "
            "in both phases; the bytes are not the messages."
        )


@_exercise("Exercise 3 (where latency and bandwidth cost the same)")
def check_14_3(equal_terms_size: Callable) -> None:
    for N, alpha, BW in [(8, 5e-6, 12.5e9), (2, 2e-6, 5e9), (64, 1e-5, 25e9), (3, 1.0, 1.0)]:
        B = float(equal_terms_size(N, alpha, BW))
        latency, bandwidth = 2 * (N - 1) * alpha, 2 * (N - 1) / N * B / BW  # the terms of t_ring
        assert np.isclose(latency, bandwidth, rtol=1e-9), (
            f"N={N}, α={alpha}, BW={BW}: at B = {B:.4g} bytes the latency term is "
            f"{latency:.3g} s and the bandwidth term {bandwidth:.3g} s. Hint: write both terms "
            "of t_ring, set them equal and solve for B; the factor 2(N−1) is on both sides."
        )
