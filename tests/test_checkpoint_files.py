"""What a checkpoint's path may turn out to be, and what writing one may meet.

* Reading: a FIFO, a device (``/dev/zero`` through a link) or a FIFO in a run directory is
  refused with one line before a byte is read (``checkpoint.open_regular``, also for the
  run's metrics log), by the library, by ``translate``, ``evaluate``, ``train --resume`` and
  ``python -m minitransformer.runtime.checkpoint upgrade``: exit 2, never a hang. Every such
  case runs in a subprocess with a timeout and a memory cap, so a regression fails instead of
  hanging.
* Writing: a read-only folder, a file or a dangling link where a folder belongs, a target that
  exists: one CheckpointError naming the path and the fix (exit 2 from the command line),
  the temp file's cleanup never raising over it; two upgrades to one target started together:
  exactly one writes it, the other is refused, and the target is the winner's whole file.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tiny_runs import KNOBS, SIZE, marian_config

from minitransformer.errors import CheckpointError
from minitransformer.runtime import checkpoint
from minitransformer.runtime.checkpoint import load_checkpoint, save_checkpoint, upgrade
from minitransformer.train import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs, /dev/zero, links")
MEMORY_CAP = 3 << 30  # address space of a subprocess: a reader of /dev/zero stops here


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python ARGS`` in a subprocess: a timeout instead of a hang, a cap instead of 7 GB."""
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
        timeout=timeout, preexec_fn=_capped, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess) -> str:
    """The one error line of a command that refused a user's mistake (exit 2)."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    return lines[0]


def legacy(path: Path, n: int = 1000) -> Path:
    """A format-2 ``.npz`` checkpoint (no model config) for the upgrade to convert."""
    arrays = {"w": np.arange(n, dtype=np.float32), "b": np.ones(3, np.int64)}
    meta = {"step": 7, "format_version": 2}
    meta["checksum"] = checkpoint.format.checksum(arrays, meta)
    entries = {"__metadata__": np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays}
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in entries.items():
            with archive.open(name + ".npy", "w") as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 2-step tiny run (a training checkpoint, a metrics log)."""
    out = tmp_path_factory.mktemp("trained") / "R"
    cfg = TrainConfig(
        task="copy", steps=2, batch_size=8, warmup=10, out=str(out), progress=False,
        plots=False, log_every=1, eval_every=1000, eval_samples=8, final_eval_samples=8,
        task_knobs=dict(KNOBS), model_overrides=dict(SIZE),
    )  # fmt: skip
    Trainer(cfg).train()
    return out


# --- reading: a FIFO or a device is refused before it is read --------------------------------

_LIBRARY = """
import json, sys
from minitransformer.runtime import checkpoint
from minitransformer.errors import CheckpointError
said = {}
for name in ("load_checkpoint", "read_metadata", "read_entries", "upgrade_checkpoint"):
    for path in sys.argv[1:]:
        try:
            getattr(checkpoint, name)(path)
            said[f"{name} {path}"] = "returned"
        except CheckpointError as err:
            said[f"{name} {path}"] = str(err)
print(json.dumps(said))
"""


@posix_only
def test_the_library_refuses_a_fifo_and_a_device_without_reading_them(tmp_path):
    os.mkfifo(tmp_path / "pipe.safetensors")
    (tmp_path / "zero.npz").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "old.npz")
    done = run(["-c", _LIBRARY, "pipe.safetensors", "zero.npz", "old.npz"], tmp_path)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert len(said) == 12
    for call, message in said.items():
        path = call.split()[1]
        kind = "a character device" if path == "zero.npz" else "a FIFO"
        assert f"checkpoint {path}: it is not a regular file but {kind}" in message, call
        assert "Fix: name a checkpoint file written by `minitransformer train`" in message
        assert "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.npz", "pipe.safetensors", "zero.npz"]


@posix_only
@pytest.mark.parametrize(
    "command, where",
    [
        (["translate", "--checkpoint", "pipe", "a b"], "pipe"),
        (["translate", "--checkpoint", "R", "a b"], "R/checkpoint.safetensors"),
        (["evaluate", "--checkpoint", "R"], "R/checkpoint.safetensors"),
        (["train", "--resume", "R", "--no-progress"], "R/checkpoint.safetensors"),
        (["translate", "--checkpoint", "zero", "a b"], "zero"),
    ],
)
def test_the_cli_refuses_a_fifo_or_device_checkpoint_in_one_line(tmp_path, command, where):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "R").mkdir()
    os.mkfifo(tmp_path / "R" / "checkpoint.safetensors")
    (tmp_path / "zero").symlink_to("/dev/zero")
    done = run(["-m", "minitransformer", *command], tmp_path)
    line = one_line(done)
    assert f"checkpoint {where}: it is not a regular file but a" in line, line
    assert sorted(p.name for p in (tmp_path / "R").iterdir()) == ["checkpoint.safetensors"]


@posix_only
def test_resume_refuses_a_fifo_in_place_of_the_metrics_log(trained, tmp_path):
    import shutil

    run_dir = tmp_path / "R"
    shutil.copytree(trained, run_dir)
    (run_dir / "metrics.jsonl").unlink()
    os.mkfifo(run_dir / "metrics.jsonl")
    before = sorted(p.name for p in run_dir.iterdir())
    done = run(["-m", "minitransformer", "train", "--resume", "R", "--steps", "4"], tmp_path)
    line = one_line(done)
    assert "R/metrics.jsonl: it is not a regular file but a FIFO" in line, line
    assert sorted(p.name for p in run_dir.iterdir()) == before
    assert checkpoint.read_metadata(run_dir / "checkpoint.safetensors")["step"] == 2


@posix_only
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_upgrade_command_refuses_a_fifo_or_dev_zero_in_one_line(tmp_path, kind):
    source = tmp_path / "old.npz"
    if kind == "fifo":
        os.mkfifo(source)
    else:
        source.symlink_to("/dev/zero")
    done = run(["-m", "minitransformer.runtime.checkpoint", "upgrade", "old.npz"], tmp_path)
    assert "old.npz: it is not a regular file but a" in one_line(done)
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "old.safetensors").exists()


# --- writing: OS errors are one CheckpointError ----------------------------------------------


@posix_only
def test_save_into_a_read_only_folder_is_one_error(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        try:
            (folder / "probe").touch()
            pytest.skip("this user writes in a read-only folder (root: see the test below)")
        except PermissionError:
            pass
        for target in (folder / "c.safetensors", folder / "sub" / "c.safetensors"):
            with pytest.raises(CheckpointError, match="choose a folder you can write to"):
                save_checkpoint(target, {"w": np.zeros(2)}, {})
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize(
    "fail, words",
    [
        (errno.EROFS, "cannot write in .* \\(a read-only file system\\).*choose a folder"),
        (errno.EACCES, "cannot write in .* \\(permission denied\\).*choose a folder"),
        (errno.ENOSPC, "the disk is full"),
    ],
)
def test_a_failed_write_whose_cleanup_fails_too_is_still_one_error(
    tmp_path, monkeypatch, fail, words
):
    """A read-only file system refuses the temp file and then its removal as well (EROFS):
    the removal's error never replaces the real one. (Simulated: root ignores modes.)"""
    path = save_checkpoint(tmp_path / "c.safetensors", {"w": np.zeros(2)}, {"step": 1})
    real_open = os.open

    def refuse_temp(name, flags, *args, **kwargs):
        if str(name).endswith(".tmp") and fail != errno.ENOSPC:
            raise OSError(fail, os.strerror(fail), str(name))
        return real_open(name, flags, *args, **kwargs)

    def no_replace(src, dst, **kwargs):
        raise OSError(fail, os.strerror(fail))

    def no_unlink(name, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(name))

    monkeypatch.setattr(os, "open", refuse_temp)
    monkeypatch.setattr(os, "replace", no_replace)
    monkeypatch.setattr(os, "unlink", no_unlink)
    with pytest.raises(CheckpointError, match=words) as info:
        save_checkpoint(path, {"w": np.ones(2)}, {"step": 2})
    monkeypatch.undo()
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert load_checkpoint(path)[1]["step"] == 1


@posix_only
@pytest.mark.parametrize("blocker", ["file", "dangling-link"])
def test_save_under_a_file_or_a_dangling_folder_link_is_one_error(tmp_path, blocker):
    place = tmp_path / "place"
    if blocker == "file":
        place.write_text("not a folder")
        words = "place is a file, not a folder"
    else:
        place.symlink_to(tmp_path / "missing")
        words = "place is a link to a folder that does not exist"
    for target in (place / "c.safetensors", place / "sub" / "c.safetensors"):
        with pytest.raises(CheckpointError, match=words) as info:
            save_checkpoint(target, {"w": np.zeros(2)}, {})
        assert f"cannot save checkpoint {target}" in str(info.value)
    assert not (tmp_path / "missing").exists()


@posix_only
@pytest.mark.parametrize(
    "out, words",
    [
        ("link/new.safetensors", "link is a link to a folder that does not exist"),
        ("file/new.safetensors", "file is a file, not a folder"),
        ("taken.bin", "taken.bin already exists"),
    ],
)
def test_upgrade_command_refuses_an_out_it_cannot_write_with_exit_2(tmp_path, out, words):
    legacy(tmp_path / "old.npz")
    (tmp_path / "link").symlink_to(tmp_path / "missing")
    (tmp_path / "file").write_text("a file")
    (tmp_path / "taken.bin").write_bytes(b"someone's")
    command = ["-m", "minitransformer.runtime.checkpoint", "upgrade", "old.npz", "--out", out]
    done = run(command, tmp_path)
    line = one_line(done)
    assert len(done.stderr.strip().splitlines()) == 1 and words in line, line
    assert not (tmp_path / "missing").exists()
    assert (tmp_path / "taken.bin").read_bytes() == b"someone's"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "file", "link", "old.npz", "taken.bin"
    ]  # fmt: skip


def test_save_without_overwrite_never_replaces_a_file_or_a_link(tmp_path):
    taken = tmp_path / "taken.safetensors"
    taken.write_bytes(b"someone's")
    dangling = tmp_path / "dangling.safetensors"
    dangling.symlink_to(tmp_path / "elsewhere")
    for target in (taken, dangling):
        with pytest.raises(CheckpointError, match="already exists"):
            save_checkpoint(target, {"w": np.zeros(2)}, {}, overwrite=False)
    assert taken.read_bytes() == b"someone's" and dangling.is_symlink()
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dangling.safetensors", "taken.safetensors"
    ]  # fmt: skip


# --- two upgrades at once --------------------------------------------------------------------


def test_two_upgrades_at_once_one_writes_the_other_is_refused(tmp_path, monkeypatch):
    """Both pass the check for an existing target, then race to write it: exactly one does."""
    source = legacy(tmp_path / "old.npz", n=200_000)
    real_read = upgrade.read_npz
    for trial in range(5):
        target = tmp_path / f"new{trial}.safetensors"
        barrier = threading.Barrier(2, timeout=30)

        def read_then_meet(*args, _barrier=barrier, **kwargs):
            got = real_read(*args, **kwargs)
            _barrier.wait()  # both have read the source and found no target
            return got

        monkeypatch.setattr(upgrade, "read_npz", read_then_meet)
        results: list[object] = [None, None]

        def one(i: int, _target=target, _results=results) -> None:
            try:
                _results[i] = checkpoint.upgrade_checkpoint(source, _target)
            except CheckpointError as err:
                _results[i] = err

        threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        wins = [r for r in results if isinstance(r, Path)]
        refusals = [r for r in results if isinstance(r, CheckpointError)]
        assert len(wins) == 1 and len(refusals) == 1, results
        assert "already exists" in str(refusals[0]) and str(target) in str(refusals[0])
        arrays, meta = load_checkpoint(target)  # the winner's file, whole and verified
        assert meta["step"] == 7 and np.array_equal(arrays["w"], np.arange(200_000))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@posix_only
def test_two_upgrade_commands_started_together_never_both_write(tmp_path):
    legacy(tmp_path / "old.npz", n=2_000_000)
    for trial in range(3):
        out = f"new{trial}.safetensors"
        cmd = [sys.executable, "-m", "minitransformer.runtime.checkpoint", "upgrade", "old.npz"]
        pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs = [
            subprocess.Popen([*cmd, "--out", out], cwd=tmp_path, env=ENV, **pipes) for _ in range(2)
        ]
        done = [(p.wait(60), *p.communicate()) for p in procs]
        assert sorted(rc for rc, _, _ in done) == [0, 2], done
        loser = next(err for rc, _, err in done if rc == 2)
        assert "already exists" in loser and len(loser.strip().splitlines()) == 1, loser
        assert "Traceback" not in loser
        assert load_checkpoint(tmp_path / out)[1]["step"] == 7
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


class _Unblocker:
    """While open, a thread that, should a reader ever wait on ``fifo``, opens its write end
    and closes it (the reader sees an empty file): an in-process regression fails, never hangs."""

    def __init__(self, fifo):
        self.fifo, self.done = fifo, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.wait(0.2):
            try:
                os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO: no reader
            except OSError:
                pass

    def __enter__(self):
        self.thread.start()

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def test_plot_and_a_marian_folder_refuse_a_fifo_by_its_kind(tmp_path, capsys):
    """A FIFO metrics log for `plot --run` ("No such file" before), a FIFO model.safetensors
    in a Marian folder ("no model.safetensors" before): each named as not a regular file."""
    import minitransformer as mt
    from minitransformer.cli import main

    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "metrics.jsonl")
    with _Unblocker(run / "metrics.jsonl"):
        code = main(["plot", "--run", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and "not a regular file but a FIFO" in err and "Traceback" not in err, err
    folder = tmp_path / "opus"
    cfg = marian_config(30, d_model=8, N=1, d_ff=16, max_len=16)
    mt.nn.Transformer(cfg, seed=0).save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    with _Unblocker(folder / "model.safetensors"), pytest.raises(CheckpointError) as err:
        mt.nn.Transformer.from_pretrained(folder)
    assert "model.safetensors: not a regular file" in str(err.value)
