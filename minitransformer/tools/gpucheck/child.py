"""Each measurement of the GPU check runs as a child process, inside a time budget.

``Budget`` is what is left of ``--budget-s``: a step asks it for the seconds it wants and the
least it can use, and gets a timeout, or None (the step is then reported as skipped: it did
not fit). ``run_child`` starts ``python ARGS`` with the same interpreter and this copy of
the package first on ``PYTHONPATH``, in a process group of its own, so a timeout ends the
child *and* what it started (the benchmark's workers), never anything else. Being in its own
session, the child never sees the terminal's Ctrl-C: when anything (Ctrl-C's
KeyboardInterrupt, SIGTERM's exception, any error) stops the wait, ``run_child`` ends the
child's group the same way before it lets the exception go on, so no process outlives the
check.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[3]
"""The directory that holds the ``minitransformer`` package (a clone's root, or site-packages)."""


class Budget:
    """The seconds left of the check's budget, on a monotonic clock."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.total, self._clock = float(seconds), clock
        self._end = clock() + self.total

    def left(self) -> float:
        return max(0.0, self._end - self._clock())

    def grant(self, wanted: float, least: float) -> float | None:
        """A timeout for a step that wants ``wanted`` seconds and is useless under ``least``:
        ``min(wanted, left)``, or None when less than ``least`` is left."""
        left = self.left()
        return None if left < least else min(wanted, left)


@dataclasses.dataclass
class ChildResult:
    """What a child process did: its exit status (None when it was stopped at its
    timeout), its output, and its wall time."""

    rc: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.rc is None

    def tail(self, lines: int = 6) -> str:
        """The last lines of its error output (or of its output), for a report."""
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return "\n".join(text[-lines:])


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, this package first on PYTHONPATH, ``extra`` set."""
    env = dict(os.environ)
    paths = [str(PACKAGE_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra or {})
    return env


def run_child(
    args: list[str],
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    interrupt_first: bool = False,
) -> ChildResult:
    """Run ``python ARGS`` for at most ``timeout`` seconds; ``env`` is added to this
    process's environment (see ``child_env``). On timeout the child's process group gets
    SIGTERM (SIGINT first, with 10 s to end, when ``interrupt_first``: pytest then prints
    its summary), then SIGKILL after 5 s. An exception while waiting (Ctrl-C, SIGTERM
    turned into an exception, ...) ends the group the same way (SIGTERM, SIGKILL after
    5 s), then goes on up."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        rc, out, err = _wait(proc, timeout, interrupt_first)
    except BaseException:  # Ctrl-C, SIGTERM, ...: the child never saw it; end its group
        _stop_group(proc)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        raise
    return ChildResult(rc, out or "", err or "", time.perf_counter() - t0)


def _wait(
    proc: subprocess.Popen, timeout: float, interrupt_first: bool
) -> tuple[int | None, str, str]:
    """The child's exit status (None when stopped at its timeout) and its output."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        if interrupt_first:
            try:
                os.killpg(proc.pid, signal.SIGINT)
                out, err = proc.communicate(timeout=10.0)
                _stop_group(proc)  # whatever of its group is left (xdist workers)
                return None, out, err
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        _stop_group(proc)
        out, err = proc.communicate()
        return None, out, err


def _stop_group(proc: subprocess.Popen) -> None:
    """End the child's own process group (the child and what it started): SIGTERM, 5 s
    for it to end, then SIGKILL for whatever of the group is left (also when a second
    Ctrl-C cuts the 5 s short), and the child reaped."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5.0)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
