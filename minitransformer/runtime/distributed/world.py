"""``World``: the ranks of one data-parallel job and what the Trainer asks of them, and
``leave``, the CLI's way out of a job. Every collective goes through ``waiting.Waiter``
(non-blocking, polled, with the collective timeout); see the package doc for the maths.

How a job ends (``leave``, called by the CLI with each rank's exit status):

* **Together** (0; 130/143 after a stop agreed at a log line; a refusal every rank decided
  together at start): each rank returns its status and exits normally.
* **Alone** (an error on one rank, a timeout, a second Ctrl-C): the rank has printed its
  one line; it waits ABORT_GRACE_S so that mpiexec forwards it, then exits at once with its
  status (``os._exit``, no MPI_Finalize, which could wait for the others). MPICH's mpiexec
  then ends every other rank, without the MPI_Abort banner, and exits with that status. A
  launcher that would not: the other ranks' collectives time out.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, install_hint
from .. import checkpoint, runs
from . import agreement, startup, transport
from .shards import checksum, shard_batch
from .waiting import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, Waiter, timeout_from_env

INSTALL_HINT = f"{install_hint('mpi')}  (or: pip install mpi4py mpich)"
STOP_SIGNALS = ("SIGINT", "SIGTERM")  # the order of the stop counts in agree()
DROPOUT_SEED_STRIDE = 1_000_003  # rank r draws dropout masks with seed + r * stride
ABORT_GRACE_S = 0.5  # without it, a fresh-clone CI run once lost the error line

_active: World | None = None  # the World of this process, once from_mpi() made it


class PeerStopped(SystemExit):
    """Raised on the ranks that stay quiet when the job stops together at start: rank
    ``reporter`` raises the error itself (and the CLI prints it once); the others exit
    with status 0, so that mpiexec's status is the reporter's."""

    def __init__(self, reporter: int):
        super().__init__(0)
        self.reporter = reporter


@dataclass
class Timer:
    """Seconds spent in the gradient all-reduce, and how many calls."""

    seconds: float = 0.0
    calls: int = 0


class World:
    """The ranks of one data-parallel job (an MPI communicator) and what the Trainer asks
    of them: ``shard``, ``allreduce_grads`` (the grad hook), ``agree`` (losses and the
    stop flag at log lines), ``begin`` (rank 0 opens the run directory), ``bcast``."""

    def __init__(self, comm: Any, mpi: Any, timeout: float = DEFAULT_TIMEOUT_S):
        self.comm, self.MPI = comm, mpi
        self.rank, self.size = int(comm.Get_rank()), int(comm.Get_size())
        self.is_writer = self.rank == 0  # rank 0 alone writes files and prints
        self.allreduce_time = Timer()  # host time: with NCCL, only the queueing
        self.transport = transport.MPI  # how the gradients travel (choose_transport)
        self.reduce: Callable[[list[Any], str], None] | None = None  # None: MPI on the host
        self.agreed_stop: str | None = None  # set once every rank agreed to stop
        self.ended_together = False  # every rank decided to stop at the same point
        self.trainer: Any = None
        self.waiter = Waiter(comm, mpi, timeout)
        self.waiter.after = self.resume_advice
        self._hosts: list[str] | None = None  # every rank's host name (host_names)

    def host_names(self) -> list[str]:
        """Every rank's host name, in rank order: gathered once, at the first call (a
        collective: every rank makes it), then remembered."""
        if self._hosts is None:
            name = self.MPI.Get_processor_name()
            self._hosts = self.waiter.allgather(name, "start (the host names)")
        return self._hosts

    @classmethod
    def from_mpi(cls) -> World:
        """The world of ``MPI.COMM_WORLD``; ImportError with the install line when mpi4py
        (or its MPI library) is missing; ConfigError (on one rank; the others exit quietly)
        for a bad MINITRANSFORMER_COLLECTIVE_TIMEOUT."""
        global _active
        try:
            timeout, problem = timeout_from_env(), None
        except ConfigError as err:
            timeout, problem = DEFAULT_TIMEOUT_S, err
        stop_watchdog = startup.arm(timeout, TIMEOUT_ENV)
        try:
            from mpi4py import MPI
        except ImportError as err:
            raise ImportError(
                f"--data-parallel needs mpi4py and an MPI library, which are not installed "
                f"({' '.join(str(err).split())}). Fix: {INSTALL_HINT}"
            ) from None
        finally:
            stop_watchdog()
        _active = world = cls(MPI.COMM_WORLD, MPI, timeout)
        problems = world.waiter.allgather(problem and str(problem), "start (the timeout)")
        bad = [r for r, text in enumerate(problems) if text]
        if bad:
            world.fail_together(ConfigError(problems[bad[0]]), reporter=bad[0])
        return world

    def fail_together(self, error: BaseException | None, reporter: int = 0) -> None:
        """Stop every rank at the same point with one message: rank ``reporter`` raises
        ``error``, the others PeerStopped. Only where every rank takes the same decision."""
        self.ended_together = True
        if self.rank == reporter and error is not None:
            raise error
        raise PeerStopped(reporter)

    # ------------------------------------------------------------------ setup
    def attach(self, trainer: Any) -> None:
        """Make ``trainer`` one rank of this world: agree on the run's arguments, check the
        batch size, shard its batches, all-reduce its gradients, give each rank its own
        dropout masks, and check that every rank starts from the same weights."""
        self.trainer = trainer
        self.waiter.stop = lambda: getattr(trainer, "_stop_requested", None)
        mine = agreement.run_arguments(trainer, self.waiter.timeout)
        problem = agreement.differences(self.waiter.allgather(mine, "start (the arguments)"))
        if problem:
            self.fail_together(ConfigError(problem))
        if trainer.cfg.batch_size < self.size:
            self.fail_together(ConfigError(
                f"--batch-size {trainer.cfg.batch_size} is smaller than the number of ranks "
                f"({self.size}); the batch size is the global one, split across the ranks. "
                f"Fix: --batch-size {self.size} or more, or fewer ranks (mpiexec -n)"
            ))  # fmt: skip
        from ... import backend

        trainer.world = self
        trainer.grad_hook = self.allreduce_grads
        # Every rank holds the same generator state (rank 0's, in a checkpoint); the masks
        # of different ranks must differ, as those of different rows do in one process.
        generator = trainer.generator  # the trainer's own dropout generator
        generator.seed = trainer.cfg.seed + self.rank * DROPOUT_SEED_STRIDE
        self.check_same_weights([g.data for g in trainer.optimizer.groups])
        self.choose_transport(backend.normalize_device(trainer.cfg.device))

    def choose_transport(self, device: str) -> str:
        """Gather every rank's placement (host, GPU) and take the transport of the
        gradient all-reduce once, the same on every rank (transport.py); rank 0 logs it
        when a GPU is involved. Returns it: ``mpi``, ``nccl`` or ``host-staged``. A rank on
        a GPU makes it its current device (as ``torch.cuda.set_device``): the rank's
        kernels, streams and NCCL calls all run there."""
        from . import gpu

        if device.startswith("cuda"):
            transport.use_gpu(device)
        mine = transport.placement(device, self.MPI.Get_processor_name())
        everyone = self.waiter.allgather(mine, "start (where each rank's parameters live)")
        self.transport, reason = transport.choose_transport(everyone)
        if self.transport == transport.NCCL:
            self.reduce = gpu.cupy_nccl(self.waiter, device, transport.load_nccl())
        elif self.transport == transport.HOST_STAGED and device.startswith("cuda"):
            self.reduce = gpu.cupy_host_staged(self.waiter)
        if self.is_writer and self.transport != transport.MPI:
            print(f"gradient all-reduce: {self.transport} ({reason})", file=sys.stderr)
        return self.transport

    def check_same_weights(self, arrays: list[Any]) -> None:
        """Stop every rank (ConfigError on rank 0) unless every rank holds the same weights."""
        from ... import backend

        mine = checksum([backend.to_numpy(a) for a in arrays])
        sums = self.waiter.allgather(mine, "start (the weights' checksums)")
        if any(s != sums[0] for s in sums):
            self.fail_together(ConfigError(
                f"the ranks start from different weights (checksums {sums}); every rank must "
                "run the same command (same seed, same --resume run directory)"
            ))  # fmt: skip

    def begin(self, open_run: Callable[[], Any]) -> Any:
        """Rank 0 calls ``open_run()`` (runs.open_run: the lock, the refusal of a directory
        that holds another run) and every rank learns whether it could, before any batch:
        a refusal stops every rank together, rank 0 alone printing it. Returns what
        ``open_run`` returned on rank 0, None elsewhere."""
        result, error = None, None
        if self.is_writer:
            try:
                result = open_run()
            except Exception as err:  # noqa: BLE001 - re-raised below, on rank 0
                error = self._with_launcher(err)
        if self.waiter.bcast(error is not None, "start (rank 0 opening the run directory)"):
            self.fail_together(error)
        return result

    def resume_command(self) -> str:
        """The command that resumes this job's run: under mpiexec, with --data-parallel."""
        return runs.resume_command(self.trainer.out, ranks=self.size)

    def _with_launcher(self, error: Exception) -> Exception:
        """``error`` with the single-process resume command in its text (runs/lock.py's
        refusal of an existing run) replaced by this job's."""
        if self.trainer is None or len(error.args) != 1 or not isinstance(error.args[0], str):
            return error
        plain = runs.resume_command(self.trainer.out)
        error.args = (error.args[0].replace(plain, self.resume_command()),)
        return error

    def resume_advice(self) -> str:
        """How the run goes on after this job ended abnormally (for the timeout message)."""
        trainer = self.trainer
        if trainer is None:
            return ""
        if trainer.checkpoint_step is None:
            return "No checkpoint was saved yet: start the run again."
        return (
            f"The last checkpoint, {trainer.out / checkpoint.CHECKPOINT_NAME} (step "
            f"{trainer.checkpoint_step}), is intact; resume with: {self.resume_command()}"
        )

    # ------------------------------------------------------------------ every step
    def shard(self, batch: Any) -> tuple[Any, float]:
        """This rank's shard of the global ``batch`` and its loss scale (``shard_batch``)."""
        return shard_batch(batch, self.rank, self.size)

    def allreduce_grads(self, grads: list[Any], loss: Any) -> None:
        """Sum the flat gradient buffers of all ranks, in place: g ← Σ_r g_r.

        A non-finite local loss poisons the buffer first (``g[0] += loss·0`` is NaN then,
        decided without a host read), so every rank's NaN guard sees the same bad step.
        """
        t0 = time.perf_counter()
        grads[0][:1] += loss * 0
        step = 1 + (self.trainer.step if self.trainer is not None else 0)
        reduce = self.reduce or self.waiter.allreduce  # MPI, NCCL or through the host
        reduce(list(grads), f"gradient all-reduce of step {step}")
        self.allreduce_time.seconds += time.perf_counter() - t0
        self.allreduce_time.calls += 1

    # ------------------------------------------------------------------ log lines
    def agree(self, losses: Any, stop: str | None) -> tuple[Any, str | None]:
        """One small all-reduce: the losses summed over the ranks (each rank's loss was
        scaled by n_r/n, so the sum is the whole-batch mean loss), and whether any rank was
        asked to stop (SIGTERM wins over SIGINT)."""
        import numpy as np

        flags = [float(stop == name) for name in STOP_SIGNALS]
        buf = np.concatenate([np.asarray(losses, dtype=np.float64).reshape(-1), flags])
        step = self.trainer.step if self.trainer is not None else 0
        self.waiter.allreduce([buf], f"loss read-back of step {step}")
        n_int, n_term = buf[-2:]
        agreed = "SIGTERM" if n_term else ("SIGINT" if n_int else None)
        self.agreed_stop = self.agreed_stop or agreed
        return buf[:-2], agreed

    def bcast(self, value: Any, *, after_evaluation: bool = False) -> Any:
        """Rank 0's ``value`` on every rank (the others wait here). ``after_evaluation``:
        rank 0 evaluates before it sends, so the wait has no deadline (see waiting.py)."""
        what = "result of rank 0's evaluation" if after_evaluation else "broadcast"
        return self.waiter.bcast(value, what, bounded=not after_evaluation)

    def wait_for_evaluation(self, step: int) -> None:
        """Every rank waits here while rank 0 evaluates the model of ``step`` alone (no
        deadline: an evaluation's length depends on its size, not on a fault)."""
        self.waiter.barrier(f"end of rank 0's evaluation at step {step}", bounded=False)

    def end(self, status: int) -> None:
        """End this rank now with ``status``, its message (printed already) flushed; the
        launcher then ends the others (see the module doc)."""
        sys.stderr.flush()
        sys.stdout.flush()
        time.sleep(ABORT_GRACE_S)
        os._exit(status)


def leave(status: int) -> int:
    """Called by the CLI with its exit status: a status every rank reached together is
    returned; a rank that fails alone (others may wait in a collective) ends the job at
    once (``World.end``) instead of leaving them hanging. A 130/143 of one rank alone (a
    second Ctrl-C sent to it) ends the job too."""
    world = _active
    if world is None or world.size == 1 or status == 0 or world.ended_together:
        return status
    if status in (130, 143) and world.agreed_stop is not None:
        return status
    world.end(status)
    return status  # pragma: no cover - end() does not return


def blas_threads_per_rank(ranks_here: int) -> int:
    """BLAS threads for each of ``ranks_here`` ranks on one host: the cores shared out,
    at least one (more ranks than cores would only fight over them)."""
    return max(1, (os.cpu_count() or 1) // max(ranks_here, 1))


def local_size(world: World) -> int:
    """How many ranks of ``world`` run on this host (``World.host_names``)."""
    names = world.host_names()
    return names.count(names[world.rank])


def device_of_rank(world: World, requested: str | None) -> str | None:
    """This rank's device for ``--device requested``: a bare ``cuda`` becomes
    ``cuda:{local rank mod visible GPUs}`` (transport.rank_device); anything else is kept.
    A collective (``World.host_names``, gathered once for this and ``local_size``): every
    rank calls it, before building its Trainer."""
    names = world.host_names()
    gpus = transport.visible_gpus() if transport.wants_gpu(requested) else 0
    return transport.rank_device(requested, transport.local_rank(names, world.rank), gpus)
