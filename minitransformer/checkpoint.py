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
* A sha256 checksum over every array's name, dtype, shape and bytes *and over the metadata*
  (all of it but the checksum itself, as canonical JSON) is stored in the metadata and
  verified on load, so an edited ``step`` is caught like a flipped weight. (Version-1 files,
  whose checksum covered the arrays only, still load.)
* Resources are bounded before anything is allocated: every entry's ``.npy`` header is read
  first and the bytes its shape and dtype declare must be the bytes the entry holds; an entry
  may not claim to inflate beyond what deflate can produce. Rejecting any file takes time and
  memory in proportion to its size.
* :func:`check_training_metadata`, :func:`check_like`, :func:`check_arrays_like` and
  :func:`check_array` check a training checkpoint field by field (type, range, shape, dtype,
  finiteness); each problem is one CheckpointError naming the field.

This module stands on the ground: it works on host NumPy arrays only. Convert device arrays
(CuPy) to NumPy before saving.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
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

FORMAT_VERSION = 2
"""Version of the on-disk layout; bump it when the layout changes incompatibly."""

METADATA_KEY = "__metadata__"
"""Name of the archive entry that holds the JSON metadata."""

RESERVED_METADATA_KEYS = ("format_version", "library_version", "created_at", "checksum")
"""Metadata keys that :func:`save_checkpoint` fills in (overwriting any given values)."""

_READABLE_VERSIONS = (1, 2)  # 1: the checksum covers the arrays only
_DEFLATE_MAX_RATIO = 1032  # deflate never inflates one byte to more than this
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
    meta.pop("checksum", None)
    meta.update(
        format_version=FORMAT_VERSION,
        library_version=_library_version(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    try:  # the JSON round trip gives exactly what load_checkpoint will see and verify
        plain = json.loads(json.dumps(meta, default=_json_default, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"cannot save checkpoint {path}: metadata is not JSON-serializable ({exc}). "
            "Fix: store only str/int/float/bool/None/list/dict values "
            "(convert dataclasses with dataclasses.asdict)."
        ) from exc
    plain["checksum"] = _checksum(checked, plain)
    meta_bytes = json.dumps(plain, ensure_ascii=False).encode("utf-8")

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
        covered = meta if meta["format_version"] >= 2 else None
        if _checksum(arrays, covered) != stored:
            _fail(
                path,
                "checksum mismatch: the arrays or the metadata changed after saving "
                "(corrupted or edited file)",
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


def _check_entry_size(path: Path, archive: Any, name: str) -> None:
    """Before allocating: the bytes an entry's ``.npy`` header declares (shape x itemsize)
    must be the bytes the entry holds, and those no more than its compressed bytes can give."""
    files = archive._files  # the member NumPy reads for ``name`` (a dict from NumPy 2.3 on)
    if isinstance(files, Mapping):
        key = files.get(name, name + ".npy")
    else:
        key = name if name in files else name + ".npy"
    try:
        info = archive.zip.getinfo(key)
        if info.compress_type == zipfile.ZIP_STORED:
            limit = info.compress_size
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            limit = info.compress_size * _DEFLATE_MAX_RATIO + 64
        else:
            _fail(
                path,
                f"entry {name!r} uses compression method {info.compress_type}, which "
                "save_checkpoint never writes",
                "load a file written by save_checkpoint",
            )
        if info.file_size > limit:
            _fail(
                path,
                f"entry {name!r} claims {info.file_size:,} bytes from "
                f"{info.compress_size:,} stored bytes (more than the file can hold)",
                "restore an earlier checkpoint or retrain",
            )
        with archive.zip.open(key) as member:
            if member.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                return  # not an array at all: _read_entry says so
        with archive.zip.open(key) as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(member)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(member)
            else:
                _fail(
                    path,
                    f"entry {name!r} is a .npy of version {version}, which "
                    "save_checkpoint never writes",
                    "load a file written by save_checkpoint",
                )
            header = member.tell()
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        _fail(
            path,
            f"entry {name!r} is truncated or corrupted ({exc})",
            "restore an earlier checkpoint (see latest_checkpoint) or retrain",
        )
    except (ValueError, TypeError, OverflowError, KeyError) as exc:
        _fail(
            path,
            f"entry {name!r} has a malformed .npy header ({str(exc)[:200]})",
            "restore an earlier checkpoint (see latest_checkpoint) or retrain",
        )
    if dtype.hasobject:
        return  # _read_entry refuses it by name (it would need pickle)
    declared = math.prod(shape) * dtype.itemsize
    if header + declared != info.file_size:
        _fail(
            path,
            f"entry {name!r} declares shape {shape} of {dtype} ({declared:,} bytes) but "
            f"holds {info.file_size - header:,} bytes",
            "restore an earlier checkpoint or retrain",
        )


def _read_entry(path: Path, archive: Any, name: str) -> np.ndarray:
    """Read one array entry, refusing anything that is not a plain numeric .npy array."""
    _check_entry_size(path, archive, name)
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
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, too deep, a huge int
        _fail(path, f"the metadata is not valid JSON ({str(exc)[:200]})", "re-save the checkpoint")
    if not isinstance(meta, dict):
        _fail(path, "the metadata is not a JSON object", "re-save the checkpoint")
    version = meta.get("format_version")
    if type(version) is not int or version not in _READABLE_VERSIONS:
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
# Field-by-field checks of a training checkpoint (every field is untrusted input)
# --------------------------------------------------------------------------------------------


def _field_fail(path: Path, field: str, problem: str) -> NoReturn:
    _fail(
        path,
        f"field {field!r} {problem}",
        "use an intact checkpoint written by `minitransformer train` (an edited, truncated or "
        "foreign file is refused)",
    )


def _kind(value: Any) -> str:
    """The JSON kind of a value: bool, int, number, str, null, list, object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _is_count(value: Any) -> bool:
    """A counter a fresh object starts from: int 0, or a non-empty list of int 0."""
    if _kind(value) == "int":
        return value == 0
    return _kind(value) == "list" and bool(value) and all(_is_count(v) for v in value)


def check_like(
    path: str | os.PathLike[str],
    field: str,
    value: Any,
    reference: Any,
    *,
    counters_of: Any = None,
) -> None:
    """Raise CheckpointError unless ``value`` has the structure of ``reference``.

    ``reference`` is what a freshly built object reports (its ``state_dict()``), so nothing
    here knows field names: objects need the same keys, lists the same length, every leaf
    the same JSON kind (an int where an int is, a number where a float is), numbers must be
    finite and ints not negative where the reference's are not.

    With ``counters_of`` (the same fresh state), every value that is not a counter there
    (an int 0 or a list of them, such as a step count) must also *equal* the fresh one, so
    hyperparameters that the run's config fixes cannot be edited; ``lr`` is free (the
    schedule sets it).
    """
    path = Path(path)
    kind, want = _kind(value), _kind(reference)
    if want == "number" and kind == "int":
        kind = "number"
    if kind != want:
        _field_fail(path, field, f"is a JSON {kind}, expected a {want} ({_short(value)})")
    if kind == "object":
        missing = [k for k in reference if k not in value]
        if missing:
            _field_fail(path, field, f"lacks {', '.join(map(repr, missing))}")
        unknown = [k for k in value if k not in reference]
        if unknown:
            _field_fail(path, field, f"has unknown key(s) {', '.join(map(repr, unknown[:5]))}")
        for key in reference:
            fixed = None
            if isinstance(counters_of, Mapping) and key != "lr" and not _is_count(reference[key]):
                fixed = counters_of[key]
            sub = f"{field}.{key}"
            check_like(path, sub, value[key], reference[key])
            if fixed is not None and _plain(value[key]) != _plain(fixed):
                _field_fail(path, sub, f"is {_short(value[key])}, but this run has {_short(fixed)}")
    elif kind == "list":
        if len(value) != len(reference):
            _field_fail(path, field, f"has {len(value)} entries, expected {len(reference)}")
        for i, (v, r) in enumerate(zip(value, reference, strict=True)):
            check_like(path, f"{field}[{i}]", v, r)
    elif kind in ("int", "number"):
        if not math.isfinite(value):
            _field_fail(path, field, f"is {value}, not a finite number")
        if reference >= 0 and value < 0:
            _field_fail(path, field, f"is negative ({value})")


def check_array(
    path: str | os.PathLike[str],
    name: str,
    array: np.ndarray,
    *,
    dtype: str | None = None,
    shape: tuple[int, ...] | None = None,
) -> None:
    """A float array of the given dtype and shape with no NaN or Inf, else CheckpointError."""
    path = Path(path)
    if array.dtype.kind != "f" or (dtype is not None and array.dtype != np.dtype(dtype)):
        _field_fail(path, name, f"has dtype {array.dtype}, expected {dtype or 'a float dtype'}")
    if shape is not None and tuple(array.shape) != tuple(shape):
        _field_fail(path, name, f"has shape {tuple(array.shape)}, expected {tuple(shape)}")
    if not np.isfinite(array).all():
        _field_fail(path, name, "holds NaN or Inf")


def check_arrays_like(
    path: str | os.PathLike[str],
    section_name: str,
    arrays: Mapping[str, np.ndarray],
    layout: Mapping[str, tuple[tuple[int, ...], str]],
) -> None:
    """``arrays`` must have exactly the names of ``layout`` ({name: (shape, dtype)}, what a
    freshly built model or optimizer reports), each with that shape and dtype, all finite.

    Every missing, unexpected or mis-shaped name is listed in one CheckpointError.
    """
    missing = [k for k in layout if k not in arrays]
    unexpected = [k for k in arrays if k not in layout]
    misshaped = [
        f"{k}: checkpoint {tuple(arrays[k].shape)} vs model {tuple(layout[k][0])}"
        for k in layout
        if k in arrays and tuple(arrays[k].shape) != tuple(layout[k][0])
    ]
    if missing or unexpected or misshaped:
        parts = [f"mis-shaped: {'; '.join(misshaped[:5])}"] if misshaped else []
        parts += [f"missing keys: {missing[:5]}"] if missing else []
        parts += [f"unexpected keys: {unexpected[:5]}"] if unexpected else []
        _field_fail(
            Path(path),
            section_name,
            "does not fit the model ("
            + " | ".join(parts)
            + f"; {len(misshaped)} mis-shaped, {len(missing)} missing, "
            f"{len(unexpected)} unexpected)",
        )
    for name, (shape, dtype) in layout.items():
        check_array(path, f"{section_name}.{name}", arrays[name], dtype=dtype, shape=shape)


def _annotation_kinds(annotation: str) -> set[str]:
    """JSON kinds a dataclass field annotation allows ("int | None" -> {"int", "null"})."""
    kinds = set()
    for part in str(annotation).split("|"):
        part = part.strip().split("[")[0]
        kinds |= {
            "int": {"int"},
            "float": {"int", "number"},
            "str": {"str"},
            "bool": {"bool"},
            "None": {"null"},
            "dict": {"object"},
            "list": {"list"},
            "tuple": {"list"},
        }.get(part, {"any"})
    return kinds


def check_dataclass_fields(path: str | os.PathLike[str], field: str, value: Any, cls: type) -> None:
    """``value`` is a JSON object whose keys are fields of dataclass ``cls`` and whose values
    have the JSON kinds the fields' annotations allow (finite numbers; scalars inside dicts)."""
    path = Path(path)
    if _kind(value) != "object":
        _field_fail(path, field, f"is a JSON {_kind(value)}, expected an object")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        _field_fail(
            path,
            field,
            f"has options this version does not know ({', '.join(unknown)}); "
            "resume it with the version that wrote it",
        )
    for key, item in value.items():
        kinds = _annotation_kinds(fields[key].type)
        sub = f"{field}.{key}"
        if "any" not in kinds and _kind(item) not in kinds:
            _field_fail(
                path,
                sub,
                f"is a JSON {_kind(item)} ({_short(item)}), expected {' or '.join(sorted(kinds))}",
            )
        leaves = item.values() if isinstance(item, Mapping) else [item]
        for leaf in leaves:
            if _kind(leaf) not in ("int", "number", "str", "bool", "null"):
                _field_fail(path, sub, f"holds a JSON {_kind(leaf)}, expected plain values")
            if _kind(leaf) == "number" and not math.isfinite(leaf):
                _field_fail(path, sub, f"is {leaf}, not a finite number")


def check_tokenizer(path: str | os.PathLike[str], value: Any, field: str = "tokenizer") -> None:
    """A tokenizer as Vocab.to_dict / BPE.to_dict write it: only strings where strings are."""
    path = Path(path)
    if _kind(value) != "object":
        _field_fail(path, field, f"is a JSON {_kind(value)}, expected an object")
    kind = value.get("type")
    allowed = {"bpe": {"type", "merges", "vocab", "split_punctuation"}, "vocab": {"type", "tokens"}}
    if kind not in allowed:
        _field_fail(
            path,
            f"{field}.type",
            f"names an unknown tokenizer type {_short(kind)}; expected 'vocab' or 'bpe'",
        )
    unknown = sorted(set(value) - allowed[kind])
    if unknown:
        _field_fail(path, field, f"has unknown key(s) {', '.join(map(repr, unknown[:5]))}")
    if kind == "bpe":
        merges = value.get("merges")
        if _kind(merges) != "list" or not all(
            _kind(m) == "list" and len(m) == 2 and all(_kind(x) == "str" for x in m) for m in merges
        ):
            _field_fail(path, f"{field}.merges", "must be a list of [str, str] pairs")
        if _kind(value.get("split_punctuation", False)) != "bool":
            _field_fail(path, f"{field}.split_punctuation", "must be true or false")
        check_tokenizer(path, value.get("vocab"), f"{field}.vocab")
    else:
        tokens = value.get("tokens")
        if _kind(tokens) != "list" or not all(_kind(t) == "str" and t for t in tokens):
            _field_fail(path, f"{field}.tokens", "must be a list of non-empty strings")


def check_model_config(path: str | os.PathLike[str], value: Any) -> Any:
    """The stored model config, type-checked and validated; returns the TransformerConfig."""
    from .config import TransformerConfig

    path = Path(path)
    check_dataclass_fields(path, "model_config", value, TransformerConfig)
    try:
        return TransformerConfig.from_dict(value)
    except (ValueError, TypeError) as err:
        _field_fail(path, "model_config", f"is not a valid model ({' '.join(str(err).split())})")


def check_training_metadata(
    path: str | os.PathLike[str], meta: Mapping[str, Any], train_config_cls: type
) -> Any:
    """The top-level fields of a training checkpoint (``Trainer.save``); returns the stored
    TrainConfig, resolved. The sections the Trainer's parts restore themselves (optimizer,
    schedule, stream, rng) are only required to be objects here: the resuming code compares
    them with what its freshly built parts report (:func:`check_like`)."""
    path = Path(path)
    for key in (
        "step",
        "elapsed",
        "losses",
        "model_config",
        "train_config",
        "tokenizer",
        "optimizer",
        "schedule",
        "stream",
        "rng",
    ):
        if key not in meta:
            _fail(
                path,
                f"the checkpoint lacks {key!r} (an incomplete or foreign training checkpoint)",
                "resume from a file written by Trainer.save",
            )
    for key in ("optimizer", "schedule", "stream", "rng"):
        if _kind(meta[key]) != "object":
            _field_fail(path, key, f"is a JSON {_kind(meta[key])}, expected an object")
    check_dataclass_fields(path, "train_config", meta["train_config"], train_config_cls)
    try:
        cfg = train_config_cls(**meta["train_config"]).resolved()
    except (ValueError, TypeError, RuntimeError) as err:
        _field_fail(
            path, "train_config", f"is not a valid training setup ({' '.join(str(err).split())})"
        )
    step = meta["step"]
    if _kind(step) != "int" or not 0 <= step <= cfg.steps:
        _field_fail(
            path, "step", f"is {_short(step)}, expected an int in 0..{cfg.steps} (the run's steps)"
        )
    elapsed = meta["elapsed"]
    if _kind(elapsed) not in ("int", "number") or not (math.isfinite(elapsed) and elapsed >= 0):
        _field_fail(path, "elapsed", f"is {_short(elapsed)}, expected seconds >= 0")
    losses = meta["losses"]
    if _kind(losses) != "list" or len(losses) != step:
        _field_fail(
            path,
            "losses",
            f"must list one loss per step ({step}), got "
            f"{len(losses) if _kind(losses) == 'list' else _kind(losses)}",
        )
    for i, loss in enumerate(losses):
        if _kind(loss) not in ("int", "number") or not math.isfinite(loss):
            _field_fail(path, f"losses[{i}]", f"is {_short(loss)}, expected a finite number")
    check_model_config(path, meta["model_config"])
    check_tokenizer(path, meta["tokenizer"])
    return cfg


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------------
# Checksum and small helpers
# --------------------------------------------------------------------------------------------


def _checksum(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any] | None = None) -> str:
    """sha256 over each array's name, dtype, shape and C-order bytes, in sorted-name order,
    then (format 2) over the metadata without its checksum, as canonical JSON (sorted keys)."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = arrays[name]
        header = json.dumps([name, array.dtype.str, list(array.shape)])
        digest.update(header.encode("utf-8") + b"\n")
        digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    if meta is not None:
        rest = {k: v for k, v in meta.items() if k != "checksum"}
        canonical = json.dumps(rest, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        digest.update(b"metadata\n" + canonical.encode("utf-8"))
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
