"""A run directory that a live process holds (issue 47, cause 1): the early ``--out`` check
reads the lock before the files, so every way into a live run (a new run, ``--overwrite``,
``--resume``) is refused at once naming the process that holds it, and never with advice
to resume a run that is still being written. A lock left by a dead process does not block.

The holder is a real second process that opens the run (``runs.open_run``) and sleeps.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_cli import assert_user_error, run_main
from tiny_runs import MPIEXEC, TINY, needs_mpi

from minitransformer.runtime import runs
from minitransformer.runtime.runs import RunDirectoryError

ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import sys, time
from minitransformer.runtime import runs
lock = runs.open_run(sys.argv[1], owned=True)
print("locked", flush=True)
time.sleep(120)
"""


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


@contextmanager
def held(out: Path) -> Iterator[int]:
    """A second process holding the lock of run ``out`` for the block; yields its PID."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True, env=_env()
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def _finished_run(out: Path, capsys) -> None:
    """A tiny finished run in ``out`` (checkpoint, metrics log, result card)."""
    assert run_main(["train", "copy", "--steps", "2", "--out", str(out), *TINY], capsys)[0] == 0


def _empty(out: Path, capsys) -> None:
    out.mkdir()


def _checkpoint_only(out: Path, capsys) -> None:
    _finished_run(out, capsys)
    (out / "metrics.jsonl").unlink()
    (out / "result.json").unlink()


def _forbid_building(monkeypatch) -> None:
    """From now on, building a task fails the test: a refusal comes before data and model."""

    def never(*args, **kwargs):
        raise AssertionError("the task was built before the refusal")

    monkeypatch.setattr("minitransformer.train.trainer.make_task", never)


def _assert_in_use(code: int, err: str, pid: int) -> None:
    assert_user_error(code, err, f"is in use: process {pid} is training there", f"kill {pid}")
    assert "Wait for it to finish" in err
    assert "resume" not in err and "already holds a run" not in err, err


NEW_RUN = [
    ["train", "copy", "--out", "{R}"],
    ["train", "copy", "--out", "{R}", "--overwrite"],  # never overwrite a live run
    ["train", "copy", "--out", "{R}/"],
]


@pytest.mark.parametrize("argv", NEW_RUN, ids=["new", "overwrite", "trailing-slash"])
@pytest.mark.parametrize("prepare", [_empty, _checkpoint_only, _finished_run])
def test_a_new_run_into_a_live_run_is_refused_naming_the_holder(
    tmp_path, capsys, monkeypatch, argv, prepare
):
    out = tmp_path / "R"
    prepare(out, capsys)
    capsys.readouterr()
    _forbid_building(monkeypatch)
    with held(out) as pid:
        before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
        code, _, err = run_main([a.replace("{R}", str(out)) for a in argv] + TINY, capsys)
        _assert_in_use(code, err, pid)
        assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # untouched


RESUME = [
    ["train", "--resume", "{R}"],
    ["train", "--resume", "{R}", "--out", "{R}"],
    ["train", "--resume", "{R}/checkpoint.safetensors"],
    ["train", "--resume", "{R}", "--steps", "5"],
    ["train", "--resume", "{R}", "--overwrite"],
]


@pytest.mark.parametrize("argv", RESUME, ids=["dir", "out-same", "file", "steps", "overwrite"])
def test_resuming_a_live_run_is_refused_naming_the_holder(tmp_path, capsys, monkeypatch, argv):
    out = tmp_path / "R"
    _finished_run(out, capsys)
    capsys.readouterr()
    _forbid_building(monkeypatch)
    with held(out) as pid:
        code, _, err = run_main([a.replace("{R}", str(out)) for a in argv] + TINY, capsys)
    _assert_in_use(code, err, pid)


def test_check_out_reads_the_lock_before_the_files(tmp_path, capsys):
    out = tmp_path / "R"
    _finished_run(out, capsys)
    with held(out) as pid:
        for owned in (False, True):
            for overwrite in (False, True):
                with pytest.raises(RunDirectoryError, match=rf"in use: process {pid} "):
                    runs.check_out(out, owned=owned, overwrite=overwrite)
    assert (out / "checkpoint.safetensors").exists()


@pytest.mark.parametrize("prepare", [_empty, _finished_run])
def test_the_lock_of_a_dead_process_does_not_block(tmp_path, capsys, prepare):
    out = tmp_path / "R"
    prepare(out, capsys)
    with held(out) as pid:
        pass  # killed at the end of the block: its lock file stays, its flock is gone
    assert (out / runs.LOCK_NAME).read_text().strip() == str(pid)
    runs.check_out(out, owned=True)
    argv = ["train", "copy", "--steps", "2", "--out", str(out), "--overwrite", *TINY]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert f"took over the lock of {out} from process {pid}" in err


def test_a_check_in_another_process_does_not_read_as_a_holder(tmp_path):
    """check_not_in_use holds a shared lock for an instant: an acquire in that instant waits
    it out instead of refusing the run."""
    (tmp_path / runs.LOCK_NAME).write_text("")
    fd = os.open(tmp_path / runs.LOCK_NAME, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    threading.Timer(0.03, fcntl.flock, (fd, fcntl.LOCK_UN)).start()
    try:
        with runs.RunLock.acquire(tmp_path):
            assert (tmp_path / runs.LOCK_NAME).read_text().strip() == str(os.getpid())
    finally:
        os.close(fd)


@needs_mpi
def test_under_mpiexec_without_data_parallel_too(tmp_path, capsys):
    out = tmp_path / "R"
    _finished_run(out, capsys)
    cmd = [str(MPIEXEC), "-n", "1", sys.executable, "-m", "minitransformer", "train", "copy",
           "--out", str(out), *TINY]  # fmt: skip
    with held(out) as pid:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=60)
    _assert_in_use(proc.returncode, proc.stderr, pid)
