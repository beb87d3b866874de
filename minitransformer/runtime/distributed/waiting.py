"""Collectives that cannot wait forever: every collective of a data-parallel job is started
non-blocking (``Iallreduce``, ``Iallgather``, ``Ibcast``) and waited for here, by polling.

Why. A blocking ``MPI_Allreduce`` whose partner never arrives (a rank stopped with SIGSTOP,
hung in a driver, swapped out) waits forever, spinning at 100% CPU, and Python cannot run
the trainer's SIGTERM handler while it sits in C. Polling fixes all three:

* **A deadline.** A wait longer than the collective timeout (``MINITRANSFORMER_COLLECTIVE_
  TIMEOUT`` seconds, default 300) ends the job: the ranks that are still reachable tell
  each other (a small message on a private duplicate of the communicator), so each one
  raises ``CollectiveTimeout`` naming the ranks that did NOT arrive. No rank saves a
  checkpoint then: the last one on disk stays intact and the message says how to resume.
* **No spin.** The wait naps between polls, a twentieth of the time waited so far (50 µs
  to 50 ms): a partner 10 ms late costs at most ~0.5 ms extra, a stopped one ~0% CPU.
* **Signals.** Python runs signal handlers during the naps. A stop (Ctrl-C, SIGTERM)
  normally takes effect at the next log line, where the ranks agree on it; if instead this
  wait is still not over ``STOP_GRACE_S`` after the signal, a partner is stuck, and the
  rank ends now (exit status 130 / 143), saying which ranks did not arrive.

A wait for rank 0's solo work (its evaluation) has no deadline (``bounded=False``): how
long an evaluation takes depends on its size, not on a fault. It still acts on signals.
"""

from __future__ import annotations

import math
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import ConfigError, TrainingError

TIMEOUT_ENV = "MINITRANSFORMER_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0  # minutes of evaluation between two steps are not waited for here
MAX_TIMEOUT_S = 7 * 24 * 3600.0
STOP_GRACE_S = 10.0  # after a signal, how long a wait may still last before this rank ends
NOTICE_S = 2.0  # after a timeout, how long to listen for the ranks that are still reachable
MIN_NAP_S, MAX_NAP_S, SPIN_S = 50e-6, 0.05, 1e-3
NOTICE_TAG = 17


class CollectiveTimeout(TrainingError):
    """A collective did not complete within the collective timeout: a rank is stuck."""


def timeout_from_env(environ: dict[str, str] | None = None) -> float:
    """The collective timeout in seconds: ``MINITRANSFORMER_COLLECTIVE_TIMEOUT`` (a number
    of seconds, 1 to 604800) or 300. ConfigError naming the variable for anything else."""
    text = (os.environ if environ is None else environ).get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 1.0 <= value <= MAX_TIMEOUT_S):
        raise ConfigError(
            f"{TIMEOUT_ENV}={text[:40]!r} is not a number of seconds from 1 to "
            f"{MAX_TIMEOUT_S:.0f}; it bounds how long a rank waits for the others. "
            f"Fix: {TIMEOUT_ENV}=300 (the default) or unset it"
        )
    return value


def ranks_text(ranks: list[int]) -> str:
    """``rank 1`` / ``ranks 1, 3``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


class Waiter:
    """Waits for the non-blocking collectives of ``comm`` with the timeout, the naps and the
    signal check described in the module doc. ``stop()`` returns the name of a stop signal
    this rank received ("SIGINT" / "SIGTERM") or None; ``after()`` the sentence that says
    how the run goes on (its last checkpoint, the resume command)."""

    def __init__(self, comm: Any, mpi: Any, timeout: float):
        self.comm, self.MPI, self.timeout = comm, mpi, timeout
        self.rank, self.size = int(comm.Get_rank()), int(comm.Get_size())
        self.notices = comm.Dup()  # a private channel: never mixed up with the collectives
        self.seq = 0  # collectives waited for so far: the same count on every rank
        self.stop: Callable[[], str | None] = lambda: None
        self.after: Callable[[], str] = lambda: ""
        self._sent: list[Any] = []  # notices in flight (their buffers must live)

    # ------------------------------------------------------------------ waiting
    def wait(self, requests: list[Any], what: str, *, bounded: bool = True) -> None:
        """Return once every request is complete; end this rank (see the module doc) when
        the wait outlasts the timeout (``bounded``), a peer gave up, or a signal's grace."""
        self.seq += 1
        test = self.MPI.Request.Testall
        t0 = time.monotonic()
        while time.monotonic() - t0 < SPIN_S:  # partners in step: done within microseconds
            if test(requests):
                return
        stopped_at: float | None = None
        while not test(requests):
            now = time.monotonic()
            waited = now - t0
            peer_gave_up = self.notices.iprobe(source=self.MPI.ANY_SOURCE, tag=NOTICE_TAG)
            if peer_gave_up or (bounded and waited > self.timeout):
                self._give_up(
                    what,
                    f"within the collective timeout of {self.timeout:g} s "
                    f"({TIMEOUT_ENV}; raise it for a slow but healthy job)",
                )
            name = self.stop()
            if name is not None:
                stopped_at = stopped_at or now
                if now - stopped_at > min(STOP_GRACE_S, self.timeout):
                    self._give_up(what, f"within {STOP_GRACE_S:g} s of {name}", signal_name=name)
            time.sleep(min(MAX_NAP_S, max(MIN_NAP_S, waited / 20)))

    def _give_up(self, what: str, when: str, signal_name: str | None = None) -> None:
        """Tell the other ranks that this one gives up at collective number ``seq``, listen
        NOTICE_S for theirs, and end this rank naming those that did not answer from the
        same collective (stopped, hung or far behind)."""
        mine = (self.rank, self.seq)
        for dest in range(self.size):
            if dest != self.rank:
                self._sent.append(self.notices.isend(mine, dest=dest, tag=NOTICE_TAG))
        heard: dict[int, int] = {}
        end = time.monotonic() + NOTICE_S
        while time.monotonic() < end and len(heard) < self.size - 1:
            while self.notices.iprobe(source=self.MPI.ANY_SOURCE, tag=NOTICE_TAG):
                rank, seq = self.notices.recv(source=self.MPI.ANY_SOURCE, tag=NOTICE_TAG)
                heard[rank] = seq
            time.sleep(0.01)
        missing = [r for r in range(self.size) if r != self.rank and heard.get(r) != self.seq]
        if missing:
            why = f"{ranks_text(missing)} did not arrive at the {what} {when}"
        else:
            why = f"every rank reached the {what}, but it did not complete {when}"
        message = f"rank {self.rank}: {why}; ending the job. {self.after()}".strip()
        if signal_name is None:
            raise CollectiveTimeout(message)
        print(f"minitransformer: {message}", file=sys.stderr, flush=True)
        if signal_name == "SIGINT":
            raise KeyboardInterrupt
        raise SystemExit(128 + signal.SIGTERM)

    # ------------------------------------------------------------------ collectives
    def allreduce(self, buffers: list[Any], what: str) -> None:
        """Sum ``buffers`` over the ranks, in place (one Iallreduce each, waited together)."""
        op = self.MPI.SUM
        self.wait([self.comm.Iallreduce(self.MPI.IN_PLACE, b, op=op) for b in buffers], what)

    def allgather(self, value: Any, what: str) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order."""
        data = np.frombuffer(pickle.dumps(value), dtype=np.uint8)
        sizes = np.zeros(self.size, dtype=np.int64)
        self.wait([self.comm.Iallgather(np.array([data.size], np.int64), sizes)], what)
        whole = np.empty(int(sizes.sum()), dtype=np.uint8)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.wait([self.comm.Iallgatherv(data, [whole, sizes, offsets, self.MPI.BYTE])], what)
        # the ranks of one job, one launch: this pickle comes from our own processes
        pieces = zip(offsets, sizes, strict=True)
        return [pickle.loads(whole[o : o + n].tobytes()) for o, n in pieces]

    def bcast(self, value: Any, what: str, *, bounded: bool = True) -> Any:
        """Rank 0's ``value`` (picklable) on every rank."""
        data = np.frombuffer(pickle.dumps(value), dtype=np.uint8) if self.rank == 0 else None
        size = np.array([0 if data is None else data.size], dtype=np.int64)
        self.wait([self.comm.Ibcast(size, root=0)], what, bounded=bounded)
        buf = data.copy() if data is not None else np.empty(int(size[0]), dtype=np.uint8)
        self.wait([self.comm.Ibcast(buf, root=0)], what, bounded=bounded)
        return value if self.rank == 0 else pickle.loads(buf.tobytes())

    def barrier(self, what: str, *, bounded: bool = True) -> None:
        """Every rank reached this point."""
        self.wait([self.comm.Ibarrier()], what, bounded=bounded)
