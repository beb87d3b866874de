"""Checkpoints: named NumPy arrays plus JSON metadata in one atomically written ``.npz`` file.

A checkpoint is an ordinary ``.npz`` archive (readable with ``np.load``) whose entries are the
caller's arrays (dotted parameter names such as ``model.encoder.layers.0.attn.w_q.weight`` and
optimizer state such as ``optim.m.<name>``) plus one extra entry, ``__metadata__``: the UTF-8
bytes of a JSON object stored as a ``uint8`` array. Arrays and metadata therefore live in one
file and are published together by a single ``os.replace``.

Safety and durability:

* Writing goes to a temporary file in the target's directory, is flushed and ``fsync``-ed, then
  ``os.replace``-d over the target (and the directory is ``fsync``-ed where the OS allows). A
  crash at any moment leaves either the old checkpoint or the new one, never a mix.
* Loading always uses ``np.load(..., allow_pickle=False)``, and files that are not zip archives
  are refused before NumPy sees them, so nothing in a checkpoint can execute code.
* A sha256 checksum over every array's name, dtype, shape and bytes is stored in the metadata
  and verified on load.

This module stands on the ground: it works on host NumPy arrays only. Convert device arrays
(CuPy) to NumPy before saving.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from minitransformer.errors import CheckpointError

FORMAT_VERSION = 1
"""Version of the on-disk layout; bump it when the layout changes incompatibly."""

METADATA_KEY = "__metadata__"
"""Name of the archive entry that holds the JSON metadata."""

RESERVED_METADATA_KEYS = ("format_version", "library_version", "created_at", "checksum")
"""Metadata keys that :func:`save_checkpoint` fills in (overwriting any given values)."""

_ALLOWED_KINDS = "biufc"  # bool, signed int, unsigned int, float, complex
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with entries, an empty zip
_NPY_MAGIC = b"\x93NUMPY"


# --------------------------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------------------------


def save_checkpoint(
    path: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    metadata: Mapping[str, Any] | None = None,
    *,
    compress: bool = False,
) -> Path:
    """Write ``arrays`` and ``metadata`` to ``path`` atomically; return the path written.

    Args:
        path: target file, conventionally ending in ``.npz``; parent directories are created.
        arrays: name -> host NumPy array of a numeric or bool dtype (0-d arrays are fine).
        metadata: JSON-serializable dict (tuples come back as lists, NumPy scalars as Python
            numbers). The keys ``format_version``, ``library_version``, ``created_at`` and
            ``checksum`` are filled in here and overwrite any given values.
        compress: deflate the entries. Off by default: trained float weights barely compress
            (a few percent) while deflate makes saving many times slower.

    Raises:
        CheckpointError: an array is not a NumPy array, has an object/string dtype, or uses a
            reserved name; the metadata is not JSON-serializable; or the write failed (the
            previous file at ``path``, if any, is then left untouched).
    """
    path = Path(path)
    checked = _check_arrays(path, arrays)
    meta = dict(metadata or {})
    meta.update(
        format_version=FORMAT_VERSION,
        library_version=_library_version(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        checksum=_checksum(checked),
    )
    try:
        meta_bytes = json.dumps(meta, default=_json_default, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"cannot save checkpoint {path}: metadata is not JSON-serializable ({exc}). "
            "Fix: store only str/int/float/bool/None/list/dict values "
            "(convert dataclasses with dataclasses.asdict)."
        ) from exc

    entries = {METADATA_KEY: np.frombuffer(meta_bytes, dtype=np.uint8), **checked}
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, entries, compress)
    return path


def _check_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validate names and dtypes; return plain ``np.ndarray`` values in the given order."""
    if not isinstance(arrays, Mapping):
        raise CheckpointError(
            f"cannot save checkpoint {path}: arrays must be a dict of name -> np.ndarray, "
            f"got {type(arrays).__name__}. Fix: pass e.g. model.state_dict() converted to NumPy."
        )
    checked: dict[str, np.ndarray] = {}
    for name, value in arrays.items():
        if not isinstance(name, str) or not name or "\x00" in name:
            raise CheckpointError(
                f"cannot save checkpoint {path}: array name {name!r} is not a non-empty string. "
                "Fix: use dotted parameter names such as 'model.encoder.layers.0.attn.w_q.weight'."
            )
        if name == METADATA_KEY:
            raise CheckpointError(
                f"cannot save checkpoint {path}: the array name {METADATA_KEY!r} is reserved for "
                "the metadata. Fix: rename that array."
            )
        if not isinstance(value, (np.ndarray, np.generic, bool, int, float)):
            raise CheckpointError(
                f"cannot save checkpoint {path}: arrays[{name!r}] is a {type(value).__name__}, "
                "not a NumPy array. Fix: convert device arrays to host NumPy first "
                "(Tensor.numpy() or the backend's to_numpy)."
            )
        array = np.asarray(value)
        if array.dtype.kind not in _ALLOWED_KINDS:
            raise CheckpointError(
                f"cannot save checkpoint {path}: arrays[{name!r}] has dtype {array.dtype}, but "
                "only numeric and bool dtypes can be saved (object and string arrays would need "
                "pickle). Fix: convert it to a numeric array or put it in the JSON metadata."
            )
        checked[name] = array
    return checked


def _atomic_write(path: Path, entries: Mapping[str, np.ndarray], compress: bool) -> None:
    """Write the archive to a temp file beside ``path``, fsync it, then rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    compression = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    try:
        # O_EXCL: never follow or clobber an existing file; mode 0o666 lets the umask decide.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        fd = os.open(tmp, flags, 0o666)
        with os.fdopen(fd, "wb") as file:
            with zipfile.ZipFile(file, "w", compression=compression, allowZip64=True) as archive:
                for name, array in entries.items():
                    with archive.open(name + ".npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, array, allow_pickle=False)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # also KeyboardInterrupt: never leave the temp file behind
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise CheckpointError(
                f"cannot save checkpoint {path}: writing failed ({exc}); the previous file, if "
                "any, is untouched. Fix: check free disk space and write permission on "
                f"{path.parent}."
            ) from exc
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable where the OS supports fsync on a directory (POSIX)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse; the data itself is already fsync-ed
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_checkpoint(
    path: str | os.PathLike[str], *, verify: bool = True
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint written by :func:`save_checkpoint`; return ``(arrays, metadata)``.

    Never unpickles anything: object arrays, raw pickles and unknown file types are refused.

    Args:
        path: the ``.npz`` file.
        verify: recompute the sha256 checksum and compare it with the stored one.

    Raises:
        CheckpointError: the file is missing, not a zip archive, truncated or corrupted, has
            missing or malformed metadata, holds an entry that would need pickle, comes from an
            unknown format version, or fails the checksum. The one-line message names the file,
            the problem and the fix.
    """
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    with _open_archive(path) as archive:
        meta = _read_metadata(path, archive)
        for name in archive.files:
            if name != METADATA_KEY:
                arrays[name] = _read_entry(path, archive, name)
    if verify:
        stored = meta.get("checksum")
        if not isinstance(stored, str):
            _fail(path, "the metadata has no checksum", "re-save it with save_checkpoint")
        if _checksum(arrays) != stored:
            _fail(
                path,
                "checksum mismatch: the arrays changed after saving (corrupted or edited file)",
                "restore an earlier checkpoint (see latest_checkpoint) or retrain",
            )
    return arrays, meta


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return only the metadata of a checkpoint (cheap: no arrays are read or verified).

    Raises:
        CheckpointError: as :func:`load_checkpoint` for the file and its metadata.
    """
    path = Path(path)
    with _open_archive(path) as archive:
        return _read_metadata(path, archive)


def _fail(path: Path, problem: str, fix: str) -> NoReturn:
    """Raise the one-line CheckpointError: file, problem, fix."""
    raise CheckpointError(f"cannot load checkpoint {path}: {problem}. Fix: {fix}.")


def _open_archive(path: Path) -> Any:
    """Open ``path`` as an ``NpzFile`` after checking that it is a zip archive at all."""
    if not path.exists():
        _fail(path, "file not found", "check the path (latest_checkpoint(run_dir) finds one)")
    if not path.is_file():
        _fail(path, "not a regular file", "pass the path of a .npz checkpoint file")
    try:
        with open(path, "rb") as file:
            magic = file.read(len(_NPY_MAGIC))
    except OSError as exc:
        _fail(path, f"cannot be read ({exc})", "check the file's permissions")
    if not magic.startswith(_ZIP_MAGICS):
        if magic.startswith(_NPY_MAGIC):
            kind = "a single .npy array, not a checkpoint archive"
        elif magic[:1] == b"\x80":
            kind = "a Python pickle, which is never loaded because unpickling can run code"
        elif not magic:
            kind = "empty (0 bytes)"
        else:
            kind = "not a .npz (zip) archive"
        _fail(path, f"the file is {kind}", "load a file written by save_checkpoint")
    try:
        return np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error) as exc:
        _fail(
            path,
            f"the archive is truncated or corrupted ({exc})",
            "restore an earlier checkpoint (see latest_checkpoint) or retrain",
        )


def _read_entry(path: Path, archive: Any, name: str) -> np.ndarray:
    """Read one array entry, refusing anything that is not a plain numeric .npy array."""
    try:
        value = archive[name]
    except ValueError as exc:
        if "pickle" in str(exc):
            _fail(
                path,
                f"entry {name!r} holds Python objects that would need pickle (refused: "
                "unpickling can run code)",
                "only load checkpoints written by save_checkpoint from a trusted source",
            )
        _fail(path, f"entry {name!r} is not a valid .npy array ({exc})", "re-save the checkpoint")
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        _fail(
            path,
            f"entry {name!r} is truncated or corrupted ({exc})",
            "restore an earlier checkpoint (see latest_checkpoint) or retrain",
        )
    if not isinstance(value, np.ndarray):
        _fail(path, f"entry {name!r} is not a .npy array", "load a file written by save_checkpoint")
    if value.dtype.kind not in _ALLOWED_KINDS:
        _fail(
            path,
            f"entry {name!r} has unsupported dtype {value.dtype}",
            "load a file written by save_checkpoint",
        )
    return value


def _read_metadata(path: Path, archive: Any) -> dict[str, Any]:
    """Decode and check the ``__metadata__`` entry."""
    if METADATA_KEY not in archive.files:
        _fail(
            path,
            f"no {METADATA_KEY} entry, so this is not a minitransformer checkpoint",
            "load a file written by save_checkpoint",
        )
    raw = _read_entry(path, archive, METADATA_KEY)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        _fail(path, f"malformed {METADATA_KEY} entry", "re-save the checkpoint")
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        _fail(path, f"the metadata is not valid JSON ({exc})", "re-save the checkpoint")
    if not isinstance(meta, dict):
        _fail(path, "the metadata is not a JSON object", "re-save the checkpoint")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        written_by = meta.get("library_version", "an unknown version")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            fix = (
                f"upgrade minitransformer (this is {_library_version()}, the file was written by "
                f"{written_by})"
            )
        else:
            fix = "load it with the minitransformer version that wrote it, or re-save it"
        _fail(
            path,
            f"unknown checkpoint format version {version!r} (this library reads "
            f"version {FORMAT_VERSION})",
            fix,
        )
    return meta


# --------------------------------------------------------------------------------------------
# Helpers for the trainer
# --------------------------------------------------------------------------------------------


def check_config(
    meta_config: Mapping[str, Any],
    expected: Mapping[str, Any],
    *,
    ignore: Iterable[str] = (),
    path: str | os.PathLike[str] | None = None,
) -> None:
    """Raise CheckpointError listing every key where a checkpoint's config differs.

    Nested dicts are compared key by key (reported as dotted keys such as ``optim.lr``);
    tuples and lists compare equal (JSON turns tuples into lists).

    Args:
        meta_config: the config stored in the checkpoint's metadata.
        expected: the config of the model/run about to use the checkpoint.
        ignore: dotted keys allowed to differ (for example ``"dropout"`` when fine-tuning).
        path: the checkpoint file, to name it in the message.
    """
    skipped = set(ignore)
    differences = [
        f"{key} (checkpoint {_show(a)}, expected {_show(b)})"
        for key, a, b in _diff(_plain(meta_config), _plain(expected), prefix="")
        if key not in skipped
    ]
    if differences:
        where = f"checkpoint {Path(path)}" if path is not None else "checkpoint"
        raise CheckpointError(
            f"{where} was saved with a different config: {'; '.join(differences)}. Fix: build "
            "the model from the checkpoint's config (metadata['config']), or start a new run "
            "directory."
        )


_MISSING = object()


def _plain(value: Any) -> Any:
    """Normalise a config value the way a JSON round trip would (tuples -> lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _diff(a: Any, b: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """(dotted key, value in a, value in b) for every leaf where a and b differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            sub = f"{prefix}.{key}" if prefix else key
            out += _diff(a.get(key, _MISSING), b.get(key, _MISSING), sub)
        return out
    return [] if a == b else [(prefix or "<config>", a, b)]


def _show(value: Any) -> str:
    return "<missing>" if value is _MISSING else repr(value)


def checkpoint_file(run_or_file: str | os.PathLike[str]) -> Path:
    """A run directory means its ``checkpoint.npz``; a file path is returned as it is."""
    path = Path(run_or_file)
    return path / "checkpoint.npz" if path.is_dir() else path


def section(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The arrays whose names start with ``prefix + "."``, with that prefix taken off
    (``section(arrays, "model")`` gives a model's state dict)."""
    start = prefix + "."
    return {k[len(start) :]: v for k, v in arrays.items() if k.startswith(start)}


def latest_checkpoint(run_dir: str | os.PathLike[str], pattern: str = "*.npz") -> Path | None:
    """Return the newest checkpoint in ``run_dir``, or None when there is none.

    "Newest" is the highest training step: the ``step`` stored in the metadata when the file has
    one, else the last number in the file name (``step_001200.npz`` -> 1200); ties (and files
    without a step) are broken by modification time. Hidden files, such as the temporary files
    of an interrupted save, are ignored. A corrupted candidate is still returned if it ranks
    first, so loading it fails loudly instead of silently resuming from an older state.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    candidates = [p for p in run_dir.glob(pattern) if p.is_file() and not p.name.startswith(".")]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (_step_of(p), p.stat().st_mtime_ns, p.name))


def _step_of(path: Path) -> int:
    try:
        step = read_metadata(path).get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            return step
    except CheckpointError:
        pass
    numbers = re.findall(r"\d+", path.stem)
    return int(numbers[-1]) if numbers else -1


# --------------------------------------------------------------------------------------------
# Checksum and small helpers
# --------------------------------------------------------------------------------------------


def _checksum(arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 over each array's name, dtype, shape and C-order bytes, in sorted-name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = arrays[name]
        header = json.dumps([name, array.dtype.str, list(array.shape)])
        digest.update(header.encode("utf-8") + b"\n")
        digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    return "sha256:" + digest.hexdigest()


def _json_default(value: Any) -> Any:
    """Let NumPy scalars and small arrays into the JSON metadata."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.dtype.kind in _ALLOWED_KINDS:
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def _library_version() -> str:
    from minitransformer import __version__

    return __version__
