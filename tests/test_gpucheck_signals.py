"""The GPU check stopped by Ctrl-C or SIGTERM leaves nothing behind.

Each step's child runs in a session of its own (a timeout ends its whole process group),
so the terminal's Ctrl-C never reaches it: the check must end the child's group itself.

- ``run_child`` interrupted while it waits: the child and what it started are ended.
- ``main`` stopped in a step (in-process; the step's child made up): 130 or 143, one line
  saying what was stopped, the step's temporary folder removed, SIGTERM's handler put back.
- The real command (``python -m minitransformer.tools.gpucheck --steps train``), sent SIGINT or
  SIGTERM while its ``train copy`` child runs: the same, and no process left.

A process counts as gone when /proc has no entry for it or only a zombie's (this machine's
PID 1 may not reap the orphans it inherits).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minitransformer.tools.gpucheck import __main__ as cli
from minitransformer.tools.gpucheck import check, child, machine, steps

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="POSIX signals and Linux's /proc"
)

ROOT = Path(__file__).resolve().parents[1]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid`` from /proc, or None when it is not there."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], int(fields[2])


def _alive(pid: int) -> bool:
    found = _stat(pid)
    return found is not None and found[0] != "Z"


def _group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [p for p in pids if (s := _stat(p)) is not None and s[0] != "Z" and s[1] == pgid]


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _children_in(folder: Path, besides: int) -> list[int]:
    """Live processes (other than ``besides``) with an argument under ``folder``."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [
        p
        for p in pids
        if p != besides and _alive(p) and any(a.startswith(str(folder)) for a in _cmdline(p))
    ]


def _until(what, seconds: float):
    """``what()`` once true, polled until ``seconds`` have passed (then its last value)."""
    deadline = time.monotonic() + seconds
    while not (found := what()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


# ------------------------------------------------------------------ run_child


def test_run_child_interrupted_while_waiting_ends_the_childs_whole_group(monkeypatch):
    started: list[subprocess.Popen] = []

    class CtrlCWhileWaiting(subprocess.Popen):
        """Ctrl-C arrives once the child has started its own child and said so."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

        def communicate(self, *args, **kwargs):
            assert self.stdout is not None and self.stdout.readline() == "ready\n"
            raise KeyboardInterrupt

    monkeypatch.setattr(child.subprocess, "Popen", CtrlCWhileWaiting)
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    t0 = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            child.run_child(["-c", code], timeout=60)
        (proc,) = started
        assert time.perf_counter() - t0 < 15
        assert _until(lambda: not _group(proc.pid), 5), "the child's group outlived run_child"
        assert proc.returncode is not None  # reaped, not left a zombie
        assert proc.stdout is not None and proc.stdout.closed
    finally:
        for proc in started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ------------------------------------------------------------------ main, in-process


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(machine, "gpu_status", lambda: (False, "CuPy is not installed (test)"))


def _ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


def _sigterm(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # gpucheck's handler raises here
    raise AssertionError("SIGTERM did not stop the check")


@pytest.mark.parametrize(
    "stop, status, said",
    [(_ctrl_c, 130, "interrupted (Ctrl-C)"), (_sigterm, 143, "stopped by SIGTERM")],
)
def test_main_stopped_in_a_step_says_what_it_stopped_and_leaves_an_empty_out(
    tmp_path, monkeypatch, capsys, no_gpu, stop, status, said
):
    """The train step's child is stopped at once (made up); its temporary folder goes,
    the one line names the step and how to rerun; SIGTERM's handler is put back."""

    def unhandled(signum, frame):
        raise AssertionError("SIGTERM reached the test: gpucheck's main did not handle it")

    monkeypatch.setattr(steps, "run_child", stop)
    out = tmp_path / "gc"
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        assert cli.main(["--out", str(out), "--steps", "train", "--allow-no-gpu"]) == status
        assert signal.getsignal(signal.SIGTERM) is unhandled
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"gpucheck: {said}") and "during step 6/7, train copy on cpu" in err
    assert "no report was written; rerun the same command" in err
    assert list(out.iterdir()) == []  # the train-copy-* folder removed: a rerun is accepted
    check.prepare_out(out)


def test_main_stopped_before_a_step_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(machine, "gpu_status", _ctrl_c)
    assert cli.main(["--out", str(tmp_path / "gc")]) == 130
    err = capsys.readouterr().err
    assert err == (
        "gpucheck: interrupted (Ctrl-C) before the first step; no report was written; "
        "rerun the same command\n"
    )
    assert not (tmp_path / "gc").exists()


# ------------------------------------------------------------------ the real command


@pytest.mark.parametrize(
    "signum, status, said",
    [(signal.SIGINT, 130, "interrupted (Ctrl-C)"), (signal.SIGTERM, 143, "stopped by SIGTERM")],
)
def test_a_signal_to_gpucheck_stops_its_running_train_child(tmp_path, signum, status, said):
    """Only gpucheck gets the signal (as from a terminal: its child has its own session),
    once a training child is in its loop (its metrics log begun): gpucheck ends the child,
    removes its half-written folder and exits with one line. A CPU training run takes
    about a second here, so the one stopped may be ``copy`` or ``translate-en-es``."""
    out = tmp_path / "gc"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
               os.environ.get("PYTHONPATH")])))  # fmt: skip
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # a background job's
    gpucheck = subprocess.Popen(
        [sys.executable, "-m", "minitransformer.tools.gpucheck", "--out", str(out)]
        + ["--steps", "train", "--allow-no-gpu"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if ignored else None,
    )
    trainers: list[int] = []
    try:
        logs = _until(lambda: list(out.glob("train-*/run/metrics.jsonl")), 20)
        assert logs, "no training child of gpucheck began its metrics log within 20 s"
        trainers = _children_in(out / "train-", gpucheck.pid)
        assert trainers and all(_stat(p)[1] == p for p in trainers)  # each its own group
        os.kill(gpucheck.pid, signum)
        _, err = gpucheck.communicate(timeout=25)
        left = [p for p in trainers if _alive(p)]  # gpucheck ends and reaps it before it exits
        assert not left, f"train child {left} outlived gpucheck"
        assert not _children_in(out, gpucheck.pid)
        assert list(out.iterdir()) == []  # no train-* folder: a rerun into it is accepted
        check.prepare_out(out)
        assert gpucheck.returncode == status, err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert re.match(
            f"gpucheck: {re.escape(said)} during step 6/7, train (copy|translate-en-es) on "
            "cpu: stopped it and every process it started; no report was written; rerun the "
            "same command",
            err,
        ), err
    finally:
        for pid in [gpucheck.pid, *trainers]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if gpucheck.returncode is None:
            gpucheck.kill()
            gpucheck.communicate(timeout=10)
