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
ends every rank when one terminates abnormally; a rank that raises exits at once
(``leave``). No collective waits forever: each is non-blocking and polled with a deadline,
``MINITRANSFORMER_COLLECTIVE_TIMEOUT`` seconds (default 300): a rank that is stopped
(SIGSTOP) or hung ends the job with one line per reachable rank naming it, and the last
checkpoint stays intact (waiting.py). Before the first batch the ranks agree on the run's
arguments (agreement.py): ranks started with different ones (MPMD ``:``) are refused.
A refusal at start (those arguments, the batch size, a run directory that holds another
run) stops every rank together: rank 0 raises the error, printed once, and the other
ranks end quietly (``PeerStopped``, status 0), so mpiexec exits with rank 0's status.

mpi4py is imported only by ``World.from_mpi()``, i.e. only with ``--data-parallel``.

On GPUs (``--device cuda``: rank l of a host takes ``cuda:{l mod GPUs}``) the same sum runs
over NCCL where every rank has its own GPU, through host memory where ranks share one
(transport.py decides, once, at start; gpu.py does it).

The package: shards.py (the arithmetic, NumPy only), waiting.py (collectives with a
deadline), agreement.py (the same arguments on every rank), world.py (``World``, ``leave``),
transport.py (MPI, NCCL or host-staged; which GPU), gpu.py (the NCCL and host-staged sums).
"""

from .shards import checksum, shard_batch, shard_rows, token_count
from .transport import Placement, choose_transport
from .waiting import TIMEOUT_ENV, CollectiveTimeout, timeout_from_env
from .world import (
    DROPOUT_SEED_STRIDE,
    INSTALL_HINT,
    PeerStopped,
    World,
    blas_threads_per_rank,
    device_of_rank,
    leave,
    local_size,
)

__all__ = [
    "World", "shard_batch", "shard_rows", "token_count", "checksum", "leave",
    "blas_threads_per_rank", "local_size", "CollectiveTimeout", "PeerStopped",
    "timeout_from_env", "TIMEOUT_ENV", "DROPOUT_SEED_STRIDE", "INSTALL_HINT",
    "device_of_rank", "choose_transport", "Placement",
]  # fmt: skip
