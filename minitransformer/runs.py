"""Run directories: one training run per directory, one writer at a time, resumable.

A run directory (``--out``) holds ``checkpoint.npz``, ``metrics.jsonl``, ``result.json`` and
``plots/``. Before a Trainer writes there, :func:`open_run` makes three checks:

* **One writer.** A lock file ``.lock`` is held with ``fcntl.flock`` for as long as the
  process trains; its text is the holder's PID, which a second process is told. The OS drops
  the lock of a process that dies, so a lock file left by a killed run is taken over (with a
  note). Where ``flock`` does not exist (Windows) the file is created with ``O_EXCL`` instead.
* **No silent overwrite.** A directory that already holds a run (a checkpoint or a metrics
  log) is refused unless the trainer resumes that run or ``overwrite=True``; overwriting
  removes the old run's files (checkpoint, log, result card, plots) first, so two runs never
  mix. Other files in the directory are left alone.
* **No litter.** Temporary files of a checkpoint write that was killed half-way
  (``.checkpoint.npz.<pid>-<hex>.tmp``) are removed when their writer is no longer alive.

:func:`resume_trainer` turns a checkpoint back into a Trainer, treating every field of the
file as untrusted (see :mod:`minitransformer.checkpoint` for the checks), and
:func:`resume_command` prints the shell command that continues a run, quoted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import backend, checkpoint
from .errors import CheckpointError, ConfigError, MiniTransformerError

if TYPE_CHECKING:
    from .train import Trainer

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".lock"
"""The lock file inside a run directory (hidden: latest_checkpoint skips it)."""

RUN_MARKERS = ("checkpoint.npz", "metrics.jsonl")
"""A directory holding one of these holds a run."""

RUN_FILES = (
    "checkpoint.npz",
    "metrics.jsonl",
    "result.json",
    "plots/curves.png",
    "plots/lr_schedule.png",
    "plots/attention.png",
)
"""What a run writes; ``overwrite`` removes exactly these."""

_TEMP = re.compile(r"^\..+\.(\d+)-[0-9a-f]+\.tmp$")  # checkpoint._atomic_write's temp names


class RunDirectoryError(ConfigError):
    """A run directory that cannot be written: it holds another run, or a process is in it."""


# --------------------------------------------------------------------------------------------
# Opening a run directory
# --------------------------------------------------------------------------------------------


def resume_command(out: str | os.PathLike[str]) -> str:
    """The command that continues the run in ``out``, safe to paste into a POSIX shell."""
    return f"minitransformer train --resume {shlex.quote(str(out))}"


def holds_run(directory: str | os.PathLike[str]) -> bool:
    """True when ``directory`` holds a run (a checkpoint or a metrics log)."""
    return any((Path(directory) / name).exists() for name in RUN_MARKERS)


def open_run(out: str | os.PathLike[str], *, owned: bool, overwrite: bool = False) -> RunLock:
    """Lock run directory ``out`` for writing; return the lock (release it when done).

    Args:
        out: the run directory; created when missing.
        owned: the caller continues the run already in ``out`` (it resumed from it, or wrote
            it itself earlier in this process), so an existing run there is expected.
        overwrite: replace a run that is in ``out`` (its files are removed first).

    Raises:
        RunDirectoryError: ``out`` is a file, another process holds the lock, or ``out``
            holds a run and neither ``owned`` nor ``overwrite`` is set. The message gives the
            ways on.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"out {str(out)!r} is a file; pass a directory for the run")
    out.mkdir(parents=True, exist_ok=True)
    lock = RunLock.acquire(out)
    try:
        remove_stale_temp_files(out)
        if not owned and holds_run(out):
            if not overwrite:
                raise RunDirectoryError(_exists_message(out))
            for name in RUN_FILES:
                (out / name).unlink(missing_ok=True)
    except BaseException:
        lock.release()
        raise
    return lock


def _exists_message(out: Path) -> str:
    what = [name for name in RUN_MARKERS if (out / name).exists()]
    try:
        step = checkpoint.read_metadata(out / "checkpoint.npz").get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            what[0] = f"checkpoint.npz at step {step}"
    except CheckpointError:
        pass
    quoted = shlex.quote(str(out))
    return (
        f"--out {quoted} already holds a run ({', '.join(what)}); a new run there would "
        f"destroy it. Ways on: continue it with `{resume_command(out)}`, write the new run "
        f"elsewhere with --out NEW_DIR, or replace it with `--out {quoted} --overwrite` "
        "(deletes its checkpoint, metrics, result card and plots). From Python: "
        "Trainer.resume(out), another TrainConfig.out, or trainer.train(overwrite=True)"
    )


def remove_stale_temp_files(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete the temp files of checkpoint writes whose process is dead; return them."""
    removed = []
    for path in Path(directory).iterdir():
        match = _TEMP.match(path.name)
        if match and path.is_file() and not _pid_alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    if removed:
        _note(
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


def _note(text: str) -> None:
    print(f"minitransformer: note: {text}", file=sys.stderr, flush=True)


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
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read_pid(fd)
                os.close(fd)
                raise RunDirectoryError(_busy_message(directory, holder)) from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # we locked a file its holder had just removed: take the new one
        else:  # pragma: no cover - needs 100 lost races in a row
            raise RunDirectoryError(f"cannot lock {path}: it keeps being replaced")
        previous = _read_pid(fd)
        if previous is not None:  # a clean release deletes the file: its holder died
            _note(
                f"took over the lock of {directory} from process {previous}, which is no "
                "longer running (it was killed or crashed)"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    @classmethod
    def _acquire_exclusive(cls, path: Path) -> RunLock:  # pragma: no cover - Windows
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
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
            if os.path.samestat(os.fstat(self._fd), os.stat(self.path)):
                self.path.unlink()
        except OSError:
            pass
        os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


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


# --------------------------------------------------------------------------------------------
# Resuming: a checkpoint, checked field by field, back into a Trainer
# --------------------------------------------------------------------------------------------


def resume_trainer(cls: type[Trainer], run: str | os.PathLike[str], **changes: Any) -> Trainer:
    """What :meth:`Trainer.resume` does (see there); every field of the file is checked
    before it is used, and any problem is one CheckpointError that names the field."""
    from .train import RESUMABLE, TrainConfig

    path = checkpoint.checkpoint_file(run)
    arrays, meta = checkpoint.load_checkpoint(path)
    if meta.get("kind") != "minitransformer-train":
        raise CheckpointError(
            f"cannot resume from {path}: it is not a training checkpoint of this library "
            "(no kind 'minitransformer-train'); pass the run directory of "
            "`minitransformer train`"
        )
    checkpoint.check_training_metadata(path, meta, TrainConfig)
    stored = dict(meta["train_config"])
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    bad = sorted(set(changes) - known)
    if bad:
        raise ConfigError(f"resume: unknown option(s) {bad}; valid: {sorted(known)}")
    changes = {k: v for k, v in changes.items() if k in RESUMABLE or v is not None}
    differ = [
        f"{k} (checkpoint {stored.get(k)!r}, given {v!r})"
        for k, v in changes.items()
        if k not in RESUMABLE and stored.get(k) != v
    ]  # task, model, data, seed, optimisation: what makes the run this run
    if differ:
        raise CheckpointError(
            f"cannot resume {path} with other settings: {'; '.join(differ)}. Fix: leave these "
            "options out to continue the run as it was, or start a new run in another "
            "directory (--out)"
        )
    changes.setdefault("out", str(path.parent))
    trainer = cls(TrainConfig(**{**stored, **changes}))
    checkpoint.check_config(meta["model_config"], trainer.model_cfg.to_dict(), path=path)
    if meta["step"] > trainer.cfg.steps and "steps" not in changes:
        _bad(path, "step", f"is {meta['step']}, beyond the run's own steps {trainer.cfg.steps}")

    dev = trainer.cfg.device
    model_state = checkpoint.section(arrays, "model")
    checkpoint.check_arrays_like(path, "model", model_state, _layout(trainer.model.state_dict()))
    _load(
        path,
        "model",
        lambda: trainer.model.load_state_dict(
            {k: backend.asarray(v, device=dev) for k, v in model_state.items()}
        ),
    )

    opt_state = checkpoint.section(arrays, "optim")
    _check_optimizer(path, trainer.optimizer, opt_state, meta["optimizer"], meta["step"])
    _load(
        path,
        "optim",
        lambda: trainer.optimizer.load_state_dict(
            {k: backend.asarray(v, device=dev) for k, v in opt_state.items()}, meta["optimizer"]
        ),
    )
    fresh_rng = backend.default_generator(dev).state()
    for field, fresh, load in [
        ("schedule", trainer.schedule.state_dict(), trainer.schedule.load_state_dict),
        ("stream", trainer.stream.state_dict(), trainer.stream.load_state_dict),
        ("rng", fresh_rng, backend.default_generator(dev).set_state),
    ]:
        if (
            field == "rng"
            and isinstance(meta[field], dict)
            and not meta[field].get("bit_generator")
            and "bit_generator" in fresh
        ):
            fresh = {**fresh, "bit_generator": None}  # a GPU generator keeps its seed only
        # what the run's config fixes (schedule sizes, batch size ...) must be what it builds
        counters = fresh if field != "rng" else None
        checkpoint.check_like(path, field, meta[field], fresh, counters_of=counters)
        _load(path, field, lambda load=load, field=field: load(meta[field]))
    stream = meta["stream"]
    if not 0 <= stream["position"] <= stream["n_pairs"]:
        _bad(path, "stream.position", f"is {stream['position']}, outside 0..{stream['n_pairs']}")

    trainer.step, trainer.losses = meta["step"], [float(x) for x in meta["losses"]]
    trainer.elapsed = float(meta["elapsed"])
    trainer.resumed_from = path
    same_dir = trainer.out.resolve() == path.parent.resolve()
    trainer.checkpoint_step = trainer.step if same_dir and path.name == "checkpoint.npz" else None
    return trainer


def _layout(state: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """{name: (shape, dtype name)} of a state dict: what a checkpoint's arrays must match."""
    return {k: (tuple(v.shape), backend.dtype_name(v.dtype)) for k, v in state.items()}


def _check_optimizer(path: Path, optimizer: Any, arrays: dict, meta: Any, step: int) -> None:
    """The optimizer's section, against the state of the optimizer about to load it.

    Nothing here knows how an optimizer names its state: the expected arrays are the ones a
    fresh optimizer of the same kind declares (its ``state_dict()``); one that makes its
    state lazily, on its first step, declares none, so a twin over one-element stand-ins
    takes one step to say which names it uses (shapes are then checked by its own
    ``load_state_dict``). A run that has taken steps must bring its state: resuming Adam
    with fresh moments would quietly train a different run.
    """
    fresh_arrays, fresh_meta = optimizer.state_dict()
    checkpoint.check_like(path, "optimizer", meta, fresh_meta, counters_of=fresh_meta)
    if fresh_arrays:
        checkpoint.check_arrays_like(path, "optim", arrays, _layout(fresh_arrays))
        return
    dtypes = {k: backend.dtype_name(p.dtype) for k, p in _twin_state(optimizer).items()}
    expected = set(dtypes)
    if step == 0 and not arrays:
        return
    missing, unexpected = sorted(expected - set(arrays)), sorted(set(arrays) - expected)
    if missing or unexpected:
        parts = [f"missing keys: {missing[:5]}"] if missing else []
        parts += [f"unexpected keys: {unexpected[:5]}"] if unexpected else []
        _bad(
            path,
            "optim",
            "does not fit the model's optimizer ("
            + "; ".join(parts)
            + f"; {len(missing)} missing, {len(unexpected)} unexpected)",
        )
    for name, array in arrays.items():
        checkpoint.check_array(path, f"optim.{name}", array, dtype=dtypes[name])


def _twin_state(optimizer: Any) -> dict[str, Any]:
    """The state arrays an optimizer of this kind holds after one step, per name (stand-ins
    of one element per parameter, same dtype and device)."""
    from .tensor import Tensor

    twins = []
    for p in optimizer.params:
        xp = backend.namespace(p.data)
        t = Tensor(xp.zeros((1,) * max(p.data.ndim, 1), dtype=p.data.dtype), requires_grad=True)
        t.data = backend.to_device(t.data, backend.device_of(p.data))
        t.grad = xp.zeros_like(t.data)
        twins.append(t)
    twin = type(optimizer)(twins, lr=0.0)
    twin.step()
    arrays, _ = twin.state_dict()
    return arrays


def _load(path: Path, field: str, load: Any) -> None:
    """Run a component's own loader; any complaint becomes a CheckpointError naming ``field``."""
    try:
        load()
    except CheckpointError:
        raise
    except (
        MiniTransformerError,
        KeyError,
        TypeError,
        ValueError,
        IndexError,
        OverflowError,
        AttributeError,
    ) as err:
        _bad(path, field, f"does not load ({' '.join(str(err).split())})")


def _bad(path: Path, field: str, problem: str) -> None:
    raise CheckpointError(
        f"cannot resume from {path}: field {field!r} {problem}. Fix: resume from an intact "
        "checkpoint written by `minitransformer train` (an edited or foreign file is refused)"
    )


# --------------------------------------------------------------------------------------------
# The metrics log
# --------------------------------------------------------------------------------------------


def read_metrics(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a metrics log and the numbers of the lines that are not records.

    A record is a JSON object whose ``step`` is a non-negative int, whose ``split`` (if any)
    is a string, and whose other values are finite numbers or strings. Anything else (a
    line cut short by a crash, an edit, binary junk) is left out, and its line number given.
    """
    path = Path(path)
    if not path.exists():
        return [], []
    records, skipped = [], []
    with open(path, encoding="utf-8", errors="replace") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                skipped.append(number)
                continue
            if _is_record(record):
                records.append(record)
            else:
                skipped.append(number)
    return records, skipped


def _is_record(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return False
    if not isinstance(record.get("split", ""), str):
        return False
    return all(
        isinstance(v, str) or (_is_number(v) and math.isfinite(v))
        for k, v in record.items()
        if k not in ("step", "split")
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def truncate_metrics(path: str | os.PathLike[str], step: int) -> None:
    """Keep the log records up to ``step`` (those after it were written after the checkpoint
    a run resumes from) and drop lines that are not records, saying which."""
    path = Path(path)
    records, skipped = read_metrics(path)
    if skipped:
        shown = ", ".join(map(str, skipped[:10])) + (" ..." if len(skipped) > 10 else "")
        _note(
            f"{path}: left out {len(skipped)} line(s) that are not metric records "
            f"(line {shown}; cut short by a crash, or edited)"
        )
    kept = [r for r in records if r["step"] <= step]
    if skipped or len(kept) != len(records) or path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}-0.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        os.replace(tmp, path)
