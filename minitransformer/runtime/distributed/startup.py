"""MPI_Init with a deadline: a job where one process never starts MPI ends, with one line.

``mpiexec -n 1 minitransformer train ... --data-parallel : -n 1 minitransformer train ...``
(the second process without --data-parallel) leaves rank 0 in MPI_Init, waiting for a
peer that never comes. MPI_Init holds the GIL, so no Python thread can act; this module
arms ``faulthandler``'s C timer, which ends the process with status 1 after the collective
timeout and writes its traceback into a pipe. A forked watcher reads the pipe and

1. prints one line instead of the traceback (``message``), then
2. makes sure the job ends. MPICH's launcher normally kills every process of the job when
   a rank that used MPI dies, but its proxy sometimes leaks the dead rank's connection
   into the next process it starts, so it never sees the rank go, and the process without
   --data-parallel trains on, for ever. So once rank 0 is gone and the launcher had
   ``LAUNCHER_GRACE_S`` to act, the watcher sends SIGTERM to the processes the same
   launcher started as ranks of an MPI job (``job_siblings``): a trainer stops at the end
   of its step and saves a resumable run, as after any SIGTERM.

``arm(timeout)`` returns the function that disarms both once MPI started (the watcher sees
the pipe close and exits without doing anything).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

LAUNCHER_GRACE_S = 1.0  # the launcher's own clean-up comes first
PARENT_WAIT_S = 10.0  # the longest the watcher waits for the stuck rank to exit
RANK_VARIABLES = (b"PMI_RANK=", b"PMIX_RANK=", b"OMPI_COMM_WORLD_RANK=")  # set by launchers


def message(timeout: float, variable: str) -> str:
    """The one line printed when MPI did not start within ``timeout`` seconds."""
    return (
        f"minitransformer: error: MPI did not start within {timeout:g} s ({variable}): "
        "a process of this job never joined it. Fix: start every process with "
        "--data-parallel (mpiexec -n N minitransformer train TASK ... --data-parallel)\n"
    )


def arm(timeout: float, variable: str) -> Callable[[], None]:
    """Bound MPI_Init (importing mpi4py) by ``timeout`` seconds; see the module doc."""
    if not hasattr(os, "fork"):  # pragma: no cover - Windows: no watchdog
        return lambda: None
    rank, launcher = os.getpid(), os.getppid()
    read, write = os.pipe()
    watcher = os.fork()
    if watcher == 0:  # the watcher: a read, then (only if the timer fired) a line and a stop
        status = 1
        try:
            os.close(write)
            if os.read(read, 1):  # a traceback: the timer fired (EOF: MPI started)
                os.write(2, message(timeout, variable).encode())
                os.closerange(0, os.sysconf("SC_OPEN_MAX"))  # the rank's pipes and MPI socket
                end_job(rank, launcher)
            status = 0
        finally:
            os._exit(status)
    os.close(read)
    faulthandler.dump_traceback_later(timeout, file=write, exit=True)

    def disarm() -> None:
        faulthandler.cancel_dump_traceback_later()
        os.close(write)
        os.waitpid(watcher, 0)

    return disarm


def end_job(rank: int, launcher: int) -> list[int]:
    """Once ``rank`` has exited and the launcher had its grace period, SIGTERM to the
    processes that ``launcher`` still runs as ranks of an MPI job. Returns their pids."""
    deadline = time.monotonic() + PARENT_WAIT_S
    while _alive(rank) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(LAUNCHER_GRACE_S)
    siblings = job_siblings(launcher, exclude={rank, os.getpid()})
    for pid in siblings:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    return siblings


def job_siblings(launcher: int, exclude: set[int] = frozenset()) -> list[int]:
    """The live children of ``launcher`` whose environment names an MPI rank (PMI_RANK,
    PMIX_RANK or OMPI_COMM_WORLD_RANK): the other processes of the job on this host. A
    launcher that is not an MPI launcher (a shell) has none, so nothing is signalled."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) != launcher or fields[0] == "Z":
                continue
            environ = (entry / "environ").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if any(environ.startswith(v) or b"\0" + v in environ for v in RANK_VARIABLES):
            found.append(int(entry.name))
    return sorted(found)


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
