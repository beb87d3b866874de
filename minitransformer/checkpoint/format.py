"""The checkpoint file format: named NumPy arrays plus JSON metadata in one ``.npz`` file,
written atomically.

A checkpoint is an ordinary ``.npz`` archive (readable with ``np.load``) whose entries are the
caller's arrays (dotted parameter names such as ``model.encoder.layers.0.attn.w_q.weight`` and
optimizer state such as ``optim.m.<name>``) plus one extra entry, ``__metadata__``: the UTF-8
bytes of a JSON object stored as a ``uint8`` array. Arrays and metadata therefore live in one
file and are published together by a single ``os.replace``.

* Writing goes to a temporary file in the target's directory, is flushed and ``fsync``-ed, then
  ``os.replace``-d over the target (and the directory is ``fsync``-ed where the OS allows). A
  crash at any moment leaves either the old checkpoint or the new one, never a mix.
* A sha256 checksum over every array's name, dtype, shape and bytes *and over the metadata*
  (all of it but the checksum itself, as canonical JSON) is stored in the metadata and
  verified on load (``reading.py``), so an edited ``step`` is caught like a flipped weight.
  (Version-1 files, whose checksum covered the arrays only, still load.)

This module stands on the ground: it works on host NumPy arrays only. Convert device arrays
(CuPy) to NumPy before saving.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import zipfile
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..version import __version__

FORMAT_VERSION = 2
"""Version of the on-disk layout; bump it when the layout changes incompatibly."""

METADATA_KEY = "__metadata__"
"""Name of the archive entry that holds the JSON metadata."""

RESERVED_METADATA_KEYS = ("format_version", "library_version", "created_at", "checksum")
"""Metadata keys that :func:`save_checkpoint` fills in (overwriting any given values)."""

READABLE_VERSIONS = (1, 2)  # 1: the checksum covers the arrays only
ALLOWED_KINDS = "biufc"  # bool, signed int, unsigned int, float, complex


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
        if array.dtype.kind not in ALLOWED_KINDS:
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
    if isinstance(value, np.ndarray) and value.dtype.kind in ALLOWED_KINDS:
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def _library_version() -> str:
    return __version__
