"""The arithmetic of data parallelism, in one process: which rows of a batch each rank takes,
the loss scale n_r / n of its shard (why the shards' gradients add up to the whole batch's:
see the package doc, ``distributed/__init__.py``), and a checksum of the weights that every
rank compares at start. NumPy only: nothing here needs MPI.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...data.batching import Batch
from ...data.vocab import PAD


def shard_rows(batch_rows: int, rank: int, size: int) -> np.ndarray:
    """The rows of a ``batch_rows``-row batch that rank ``rank`` of ``size`` takes: every
    size-th row from ``rank`` (strided, so shards of a length-bucketed batch hold about the
    same number of tokens: the ranks finish their steps at about the same time)."""
    return np.arange(rank, batch_rows, size)


def token_count(batch: Batch) -> int:
    """Non-pad target tokens: the n the loss is averaged over (``ignore_index=PAD``)."""
    return int(np.count_nonzero(batch.tgt_out != PAD))


def shard_batch(batch: Batch, rank: int, size: int) -> tuple[Batch, float]:
    """Rank ``rank``'s shard of ``batch`` and its loss scale n_r / n (see the module doc).

    The shard drops the pad columns none of its rows needs. A batch with fewer rows than
    ranks (the last, short batch of an epoch) leaves some ranks without a row: they compute
    row 0 with scale 0, so they add exactly zero to the gradient and the loss.
    """
    rows = shard_rows(len(batch), rank, size)
    if rows.size == 0:
        return _take(batch, np.array([0])), 0.0
    shard = _take(batch, rows)
    return shard, token_count(shard) / token_count(batch)


def _take(batch: Batch, rows: np.ndarray) -> Batch:
    """Rows ``rows`` of ``batch``, trimmed to the widest non-pad extent among them."""
    src, tgt_in, tgt_out = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
    s = max(int((src != PAD).sum(axis=1).max()), 1)
    t = max(int((tgt_out != PAD).sum(axis=1).max()), 1)
    n = int(np.count_nonzero(tgt_out != PAD))
    return Batch(src[:, :s], tgt_in[:, :t], tgt_out[:, :t], n, batch.indices[rows])


def checksum(arrays: list[Any]) -> int:
    """A cheap, exact fingerprint of the weights: the bits of every float32 (or other)
    element read as an unsigned integer, weighted by (1 + position mod 7) and summed modulo
    2^64. Integer arithmetic: the same on every host and CPU (a float sum could round
    differently on another machine's BLAS); a reordering or a one-bit change alters it."""
    total = 0
    for a in arrays:
        host = np.ascontiguousarray(a)
        words = host.view(np.uint8).reshape(-1)
        words = np.pad(words, (0, -words.size % 4)).view(np.uint32).astype(np.uint64)
        weights = (np.arange(words.size, dtype=np.uint64) % np.uint64(7)) + np.uint64(1)
        total = (total + int(np.sum(words * weights, dtype=np.uint64))) % 2**64  # arrays wrap
    return total
