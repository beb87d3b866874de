"""Run directories: one training run per directory, one writer at a time.

A run directory (``--out``) holds ``checkpoint.safetensors``, ``metrics.jsonl``, ``result.json`` and
``plots/``. Before a Trainer writes there, :func:`open_run` makes three checks:

* **One writer.** A lock file ``.lock`` is held with ``fcntl.flock`` for as long as the
  process trains; its text is the holder's PID, which a second process is told. The OS drops
  the lock of a process that dies, so a lock file left by a killed run is taken over (with a
  note). Where ``flock`` does not exist (Windows) the file is created with ``O_EXCL`` instead.
* **No silent overwrite.** A directory that already holds a run (a checkpoint or a metrics
  log) is refused unless the trainer resumes that run or ``overwrite=True``; overwriting
  removes the old run's files (checkpoint, log, result card, plots) first, so two runs never
  mix. Other files in the directory are left alone.
* **No litter.** Temporary files of a write that was killed half-way
  (``.checkpoint.safetensors.<pid>-<hex>.tmp``, in the run or in ``plots/``) are removed when their
  writer is no longer alive.
* **No links.** An entry the run writes (``.lock``, the files above, ``plots/``) that is a
  symbolic link is refused before any training, naming it (``overwrite`` removes the link
  itself, never what it points to); every write goes through ``files.py``, which never
  follows a link inside the run. ``out`` itself may be a link to a directory: where runs
  live is the user's choice.

:func:`check_out` makes the refusals of :func:`open_run` without changing anything or taking
the lock: the CLI calls it before it builds a task and a model. It reads the lock first
(:func:`check_not_in_use`), so a run that a live process writes is refused naming that
process, never offered to be resumed or overwritten.

:func:`resume_command` gives the shell command that continues a run, quoted so that it
pastes into a POSIX shell and parses back to the same path (``./-name`` for a name that
starts with a dash, which would read as a flag).
"""

from __future__ import annotations

import os
import re
import shlex
import time
from pathlib import Path

from ...errors import CheckpointError
from .. import checkpoint
from . import files
from .files import RunDirectoryError
from .notes import note

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".lock"
"""The lock file inside a run directory (hidden: latest_checkpoint skips it)."""

RUN_MARKERS = (checkpoint.CHECKPOINT_NAME, checkpoint.LEGACY_CHECKPOINT_NAME, "metrics.jsonl")
"""A directory holding one of these holds a run."""

RUN_FILES = (
    checkpoint.CHECKPOINT_NAME,
    checkpoint.LEGACY_CHECKPOINT_NAME,
    "metrics.jsonl",
    "result.json",
    "plots/curves.png",
    "plots/lr_schedule.png",
    "plots/attention.png",
)
"""What a run writes; ``overwrite`` removes exactly these."""

_TEMP = re.compile(r"^\..+\.(\d+)-[0-9a-f]+\.tmp$")  # the temp names of checkpoint/format.py


# --------------------------------------------------------------------------------------------
# Opening a run directory
# --------------------------------------------------------------------------------------------


def shell_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a shell word that a command line reads back as that path: quoted, and
    ``./-oops`` for a relative name starting with a dash (which would read as a flag)."""
    text = str(path)
    if text.startswith("-"):
        text = os.path.join(os.curdir, text)
    return shlex.quote(text)


def resume_command(out: str | os.PathLike[str], ranks: int | None = None) -> str:
    """The command that continues the run in ``out``, safe to paste into a POSIX shell;
    for a data-parallel run over ``ranks`` MPI ranks, the same under ``mpiexec -n RANKS``
    with ``--data-parallel`` (what the job was started with)."""
    command = f"minitransformer train --resume {shell_path(out)}"
    if ranks is None:
        return command
    return f"mpiexec -n {int(ranks)} {command} --data-parallel"


def holds_run(directory: str | os.PathLike[str]) -> bool:
    """True when ``directory`` holds a run (a checkpoint or a metrics log, a link too)."""
    return any(os.path.lexists(Path(directory) / name) for name in RUN_MARKERS)


def check_out(out: str | os.PathLike[str], *, owned: bool, overwrite: bool = False) -> None:
    """Raise the RunDirectoryError that :func:`open_run` would raise for ``out`` (a file, a
    live process holding its lock, an entry the run writes that is a link, another run
    there), changing nothing and taking no lock: a command calls it before it builds the
    data and the model, so a refusal comes at once. The lock is read before the files: a
    run that a live process writes is refused as in use (naming the process), never
    offered to be resumed or overwritten. ``open_run`` checks the files again under the
    lock (the directory may change between)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"out {str(out)!r} is a file; pass a directory for the run")
    if out.is_dir():
        check_not_in_use(out)
        _check_run_files(out, owned=owned, overwrite=overwrite)


def _check_run_files(out: Path, *, owned: bool, overwrite: bool) -> None:
    """The refusals of the files in existing directory ``out``: links, another run."""
    if overwrite:
        return
    links = files.linked_entries(out, RUN_FILES)
    if links:
        raise RunDirectoryError(files.link_message(out, links))
    if not owned and holds_run(out):
        raise RunDirectoryError(_exists_message(out))


def check_not_in_use(out: str | os.PathLike[str]) -> None:
    """Raise the RunDirectoryError naming the process that holds the lock of run directory
    ``out``, if a live one does; a lock file left by a dead process does not count.

    The lock is tested, not taken: ``.lock`` is opened read-only (never through a link,
    a plain file only) and a *shared* ``flock`` is tried and dropped at once; it fails
    only while a holder keeps its exclusive one. Nothing is created or written.
    """
    out = Path(out)
    if not os.path.lexists(out / LOCK_NAME):
        return
    if fcntl is None:  # pragma: no cover - Windows: the file is the lock
        holder = _parse_pid((out / LOCK_NAME).read_bytes()[:32])
        raise RunDirectoryError(
            _busy_message(out, holder) + f"; if no training runs there any more, delete "
            f"{out / LOCK_NAME}"
        )
    try:
        fd = files.open_file(out, LOCK_NAME, os.O_RDONLY)
    except FileNotFoundError:
        return  # released in between
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            raise RunDirectoryError(_busy_message(out, _read_pid(fd))) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def open_run(out: str | os.PathLike[str], *, owned: bool, overwrite: bool = False) -> RunLock:
    """Lock run directory ``out`` for writing; return the lock (release it when done).

    Args:
        out: the run directory; created when missing.
        owned: the caller continues the run already in ``out`` (it resumed from it, or wrote
            it itself earlier in this process), so an existing run there is expected.
        overwrite: replace a run that is in ``out`` (its files are removed first).

    Raises:
        RunDirectoryError: ``out`` is a file, another process holds the lock, ``out``
            holds a run and neither ``owned`` nor ``overwrite`` is set, or an entry the run
            writes is a symbolic link (without ``overwrite``). The message gives the ways on.
    """
    out = Path(out)
    check_out(out, owned=owned, overwrite=overwrite)  # a refusal leaves everything as it was
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock.acquire(out)
    try:
        remove_stale_temp_files(out)
        _check_run_files(out, owned=owned, overwrite=overwrite)  # again: the lock is ours
        for link in files.linked_entries(out, RUN_FILES):  # overwrite: the links go, what
            files.remove(out, link)  # they point to stays
        if overwrite and not owned and holds_run(out):
            for name in RUN_FILES:
                files.remove(out, name)
    except BaseException:
        lock.release()
        raise
    return lock


def _exists_message(out: Path) -> str:
    what = [name for name in RUN_MARKERS if (out / name).exists()]
    try:
        found = checkpoint.checkpoint_file(out)
        step = checkpoint.read_metadata(found).get("step")
        if isinstance(step, int) and not isinstance(step, bool) and found.name in what:
            what[what.index(found.name)] = f"{found.name} at step {step}"
    except CheckpointError:
        pass
    return (
        f"--out {shell_path(out)} already holds a run ({', '.join(what)}). Either resume it "
        f"(`{resume_command(out)}`), pass another --out, or add --overwrite to delete it. "
        "From Python: Trainer.resume(out), another TrainConfig.out, or train(overwrite=True)"
    )


def remove_stale_temp_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete the temp files of writes (checkpoint, result card, plots) whose process is
    dead, in the run and in its ``plots/``; return them. A link is removed, not followed."""
    directory, removed = Path(directory), []
    places = [directory] + [directory / "plots"] * (not os.path.islink(directory / "plots"))
    for place in places:
        for path in place.iterdir() if place.is_dir() else ():
            match = _TEMP.match(path.name)
            if match and not _pid_alive(int(match.group(1))):
                if files.remove(directory, str(path.relative_to(directory))):
                    removed.append(path)
    if removed:
        note(
            f"removed {len(removed)} temporary file(s) left in {directory} by an interrupted "
            f"checkpoint write ({', '.join(p.name for p in removed[:3])})"
        )
    return removed


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (True when it cannot be told, to stay on the safe side)."""
    if pid == os.getpid():
        return True
    if os.name != "posix" or pid <= 0:
        return True  # os.kill(pid, 0) would terminate the process on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


class RunLock:
    """An exclusive lock on a run directory, held until :meth:`release` (or process exit)."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, directory: Path) -> RunLock:
        """Take the lock of ``directory``; RunDirectoryError naming the holder's PID if taken."""
        path = directory / LOCK_NAME
        if fcntl is None:  # pragma: no cover - Windows
            return cls._acquire_exclusive(path)
        for _ in range(100):  # a retry only when a holder unlinked the file in between
            fd = files.open_file(directory, LOCK_NAME, os.O_RDWR | os.O_CREAT)
            if not _lock_now(fd):
                holder = _read_pid(fd)
                os.close(fd)
                raise RunDirectoryError(_busy_message(directory, holder)) from None
            try:
                same = os.path.samestat(os.fstat(fd), os.lstat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # we locked a file its holder had just removed: take the new one
        else:  # pragma: no cover - needs 100 lost races in a row
            raise RunDirectoryError(f"cannot lock {path}: it keeps being replaced")
        previous = _read_pid(fd)
        if previous is not None:  # a clean release deletes the file: its holder died
            note(
                f"took over the lock of {directory} from process {previous}, which is no "
                "longer running (it was killed or crashed)"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    @classmethod
    def _acquire_exclusive(cls, path: Path) -> RunLock:  # pragma: no cover - Windows
        try:
            fd = files.open_file(path.parent, LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            with open(path, "rb") as file:
                holder = _parse_pid(file.read(32))
            raise RunDirectoryError(
                _busy_message(path.parent, holder)
                + f"; if no training runs there any more, delete {path}"
            ) from None
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(path, fd)

    def release(self) -> None:
        """Give the lock up: remove the file (a clean exit), then close it (drops the flock)."""
        if self._fd < 0:
            return
        try:
            if os.path.samestat(os.fstat(self._fd), os.lstat(self.path)):
                self.path.unlink()
        except OSError:
            pass
        os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock_now(fd: int) -> bool:
    """Take the exclusive ``flock`` of ``fd`` without waiting on a holder; False when one
    holds it. Tried 10 times over about 0.2 s: check_not_in_use in another process holds a
    shared lock for an instant, which must not read as a run in progress."""
    for attempt in range(10):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            if attempt < 9:
                time.sleep(0.02)
    return False


def _read_pid(fd: int) -> int | None:
    try:
        return _parse_pid(os.pread(fd, 32, 0))
    except OSError:
        return None


def _parse_pid(raw: bytes) -> int | None:
    text = raw.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _busy_message(directory: Path, holder: int | None) -> str:
    who = f"process {holder}" if holder is not None else "another process"
    if holder == os.getpid():
        who += " (this process: another Trainer writes there)"
    return (
        f"run directory {str(directory)!r} is in use: {who} is training there. Wait for it "
        f"to finish, stop it (kill {holder if holder is not None else 'PID'}: it saves a "
        "checkpoint first), or pass another --out"
    )
