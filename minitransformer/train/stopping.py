"""Stopping a run on a signal: Ctrl-C (SIGINT) and SIGTERM (``kill``, ``timeout``, batch
schedulers) while ``Trainer.train`` runs.

The contract, wherever the signal lands: a checkpoint on disk, the command that resumes
printed, the run directory's lock released, and the exit status 130 (SIGINT) or 143
(SIGTERM) from the command line. In the loop the first signal is a request, acted on after
the current step (which is saved); after the loop, when the last step is already saved, the
final evaluation, the result card and the plots stop at once (``StopNow``) and a resume
redoes them. ``handlers`` installs the Trainer's handler for the length of ``train()`` only:
importing the library, or building a Trainer, changes no process-wide state.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..runtime import runs

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopNow(BaseException):
    """A signal after the loop (the last step is saved): the final evaluation, result card
    or plots stop at once. Its argument is the signal's name. Not an ``Exception``: the
    plots' ``except Exception`` (a figure may fail without failing the run) lets it pass."""


@contextlib.contextmanager
def handlers(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """SIGINT and SIGTERM go to ``handler`` inside the block, on the main thread (no other
    thread may set handlers; elsewhere nothing changes); the previous handlers come back
    after it, however it ends."""
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, handler) for s in (STOP_SIGNALS if main else ())}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def resume_line(out: Path, world: Any) -> str:
    """The shell command that continues the run in ``out`` (under ``mpiexec`` with
    ``--data-parallel`` for a data-parallel job, as it was started)."""
    return runs.resume_command(out, None if world is None else world.size)
