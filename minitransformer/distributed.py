"""Data parallelism over MPI: N processes ("ranks") train ONE model on shards of each batch.

    mpiexec -n 2 python -m minitransformer train copy --data-parallel

Every rank builds the same model (same seed: the same initial weights, checked at start
with a checksum) and the same global batch (same data seed). Rank r takes every N-th row,
``rows[r::N]``, computes the loss and the gradient of its shard, and one all-reduce per step
adds the gradients of all ranks in place, so every rank applies the same update and the
weights stay identical without ever being sent.

Why the sum of the shards equals the whole batch. The loss of a batch is the mean over its
non-pad target tokens, L = (1/n) Σ_t ℓ_t with n = Σ_r n_r tokens in all, n_r on rank r.
Split the sum by shard:

    L = Σ_r (n_r/n) · L_r,      L_r = (1/n_r) Σ_{t in shard r} ℓ_t   (the shard's mean loss)
    ∇L = Σ_r (n_r/n) · ∇L_r     (the gradient is linear)

So rank r multiplies its mean loss by ``scale_r = n_r / n`` before backward (``loss_scale``)
and the all-reduce SUM of the gradients is exactly the whole-batch gradient. Both n_r and n
are counted on every rank from the host batch, which every rank holds: no communication.
Weighting by tokens, not by rows, matters: shards of the same row count hold different
token counts, and a plain average of the shard means would weigh a short shard's tokens
more. What follows the all-reduce (gradient clipping on the global norm, Adam, the NaN
guard) sees the same numbers on every rank, so it needs nothing more.

Communication per step: one ``Allreduce(MPI.IN_PLACE, grad, op=SUM)`` on the flat gradient
buffer of ``optim.FlatGroup`` (one per device and dtype; normally one). The loss values and
a stop flag (Ctrl-C, SIGTERM on any rank) travel in one small all-reduce at each log line,
where the single-process trainer reads its losses back anyway.

Exact, up to rounding: with dropout 0 the losses match one process with the same global
batch step for step to float32 rounding (the ranks add up their rows in another order).
With dropout, rank r draws its masks from seed + r·DROPOUT_SEED_STRIDE, so the ranks'
rows get independent masks, as the rows of one process do (but not the same ones). The
checkpoint (written by rank 0) does not depend on N: resume with any number of ranks.
A stop (Ctrl-C, SIGTERM to ``mpiexec`` or to any rank) takes effect at the next log line.

Failure: a rank that dies (SIGKILL, a crash) ends the whole job — MPICH's ``mpiexec``
aborts every rank when one terminates abnormally; a rank that raises calls ``MPI.Abort``
(``leave``) so no other rank waits forever in a collective.

mpi4py is imported only by ``World.from_mpi()``, i.e. only with ``--data-parallel``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .data.batching import Batch
from .data.vocab import PAD
from .errors import ConfigError

INSTALL_HINT = 'pip install -e ".[mpi]"  (or: pip install mpi4py mpich)'
STOP_SIGNALS = ("SIGINT", "SIGTERM")  # the order of the stop counts in agree()
DROPOUT_SEED_STRIDE = 1_000_003  # rank r draws dropout masks with seed + r * stride

_active: World | None = None  # the World of this process, once from_mpi() made it


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


@dataclass
class Timer:
    """Seconds spent in the gradient all-reduce, and how many calls."""

    seconds: float = 0.0
    calls: int = 0


class World:
    """The ranks of one data-parallel job (an MPI communicator) and what the Trainer asks
    of them: ``shard``, ``allreduce_grads`` (the grad hook), ``agree`` (losses and the
    stop flag at log lines), ``bcast`` and ``check_same_weights``."""

    def __init__(self, comm: Any, mpi: Any):
        self.comm, self.MPI = comm, mpi
        self.rank, self.size = int(comm.Get_rank()), int(comm.Get_size())
        self.is_writer = self.rank == 0  # rank 0 alone writes files and prints
        self.allreduce_time = Timer()
        self.agreed_stop: str | None = None  # set once every rank agreed to stop

    @classmethod
    def from_mpi(cls) -> World:
        """The world of ``MPI.COMM_WORLD``; ImportError with the install line when mpi4py
        (or its MPI library) is missing."""
        global _active
        try:
            from mpi4py import MPI
        except ImportError as err:
            raise ImportError(
                f"--data-parallel needs mpi4py and an MPI library, which are not installed "
                f"({' '.join(str(err).split())}). Fix: {INSTALL_HINT}"
            ) from None
        _active = cls(MPI.COMM_WORLD, MPI)
        return _active

    # ------------------------------------------------------------------ setup
    def attach(self, trainer: Any) -> None:
        """Make ``trainer`` one rank of this world: check the batch size, shard its batches,
        all-reduce its gradients, give each rank its own dropout masks, and check that
        every rank starts from the same weights."""
        if trainer.cfg.batch_size < self.size:
            raise ConfigError(
                f"--batch-size {trainer.cfg.batch_size} is smaller than the number of ranks "
                f"({self.size}); the batch size is the global one, split across the ranks. "
                f"Fix: --batch-size {self.size} or more, or fewer ranks (mpiexec -n)"
            )
        from . import backend

        trainer.world = self
        trainer.grad_hook = self.allreduce_grads
        # Every rank holds the same generator state (rank 0's, in a checkpoint); the masks
        # of different ranks must differ, as those of different rows do in one process.
        generator = backend.default_generator(trainer.cfg.device)
        generator.seed = trainer.cfg.seed + self.rank * DROPOUT_SEED_STRIDE
        self.check_same_weights([g.data for g in trainer.optimizer.groups])

    def check_same_weights(self, arrays: list[Any]) -> None:
        """Raise (on every rank) unless every rank holds the same weights."""
        from . import backend

        mine = checksum([backend.to_numpy(a) for a in arrays])
        sums = self.comm.allgather(mine)
        if any(s != sums[0] for s in sums):
            raise ConfigError(
                f"the ranks start from different weights (checksums {sums}); every rank must "
                "run the same command (same seed, same --resume run directory)"
            )

    # ------------------------------------------------------------------ every step
    def shard(self, batch: Batch) -> tuple[Batch, float]:
        """This rank's shard of the global ``batch`` and its loss scale (``shard_batch``)."""
        return shard_batch(batch, self.rank, self.size)

    def allreduce_grads(self, grads: list[Any], loss: Any) -> None:
        """Sum the flat gradient buffers of all ranks, in place: g ← Σ_r g_r.

        A non-finite local loss poisons the buffer first (``g[0] += loss·0`` is NaN then,
        decided without a host read), so every rank's NaN guard sees the same bad step.
        """
        t0 = time.perf_counter()
        grads[0][:1] += loss * 0
        for g in grads:
            self.comm.Allreduce(self.MPI.IN_PLACE, g, op=self.MPI.SUM)
        self.allreduce_time.seconds += time.perf_counter() - t0
        self.allreduce_time.calls += 1

    # ------------------------------------------------------------------ log lines
    def agree(self, losses: np.ndarray, stop: str | None) -> tuple[np.ndarray, str | None]:
        """One small all-reduce: the losses summed over the ranks (each rank's loss was
        scaled by n_r/n, so the sum is the whole-batch mean loss), and whether any rank was
        asked to stop (SIGTERM wins over SIGINT)."""
        flags = [float(stop == name) for name in STOP_SIGNALS]
        buf = np.concatenate([np.asarray(losses, dtype=np.float64).reshape(-1), flags])
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        n_int, n_term = buf[-2:]
        agreed = "SIGTERM" if n_term else ("SIGINT" if n_int else None)
        self.agreed_stop = self.agreed_stop or agreed
        return buf[:-2], agreed

    def bcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (the others wait here)."""
        return self.comm.bcast(value, root=0)

    def abort(self, status: int) -> None:
        """End every rank of the job with ``status`` (MPI_Abort). mpiexec forwards each
        rank's output asynchronously and an abort kills the job at once, so the rank waits
        ABORT_GRACE_S after flushing: the error line it printed reaches the user."""
        sys.stderr.flush()
        sys.stdout.flush()
        time.sleep(ABORT_GRACE_S)
        self.comm.Abort(status)


ABORT_GRACE_S = 0.5  # without it, a fresh-clone CI run once lost the error line


def leave(status: int) -> int:
    """Called by the CLI with its exit status: a rank that fails while others may still
    wait in a collective ends the whole job (MPI_Abort) instead of leaving them hanging.
    The statuses every rank reaches together (0; 130/143 after an agreed stop) return; a
    130 of one rank alone (a second Ctrl-C sent to it) aborts the job."""
    if _active is None or _active.size == 1 or status == 0:
        return status
    if status in (130, 143) and _active.agreed_stop is not None:
        return status
    _active.abort(status)
    return status


def blas_threads_per_rank(ranks_here: int) -> int:
    """BLAS threads for each of ``ranks_here`` ranks on one host: the cores shared out,
    at least one (more ranks than cores would only fight over them)."""
    return max(1, (os.cpu_count() or 1) // max(ranks_here, 1))


def local_size(world: World) -> int:
    """How many ranks of ``world`` run on this host (MPI's shared-memory split)."""
    node = world.comm.Split_type(world.MPI.COMM_TYPE_SHARED)
    try:
        return int(node.Get_size())
    finally:
        node.Free()


__all__ = [
    "World", "shard_batch", "shard_rows", "token_count", "checksum", "leave",
    "blas_threads_per_rank", "local_size",
]  # fmt: skip
