"""The checkpoint file format: named NumPy arrays plus JSON metadata in one ``.safetensors``
file, written atomically.

A checkpoint (format 3) is an ordinary safetensors file, readable by every tool that reads
them (``safetensors.numpy.load_file``, PyTorch, JAX ...)::

    8 bytes    N, the header's length (unsigned little-endian)
    N bytes    the header: JSON {name: {"dtype", "shape", "data_offsets"}, ...,
               "__metadata__": {"format": "minitransformer", "format_version": "3",
                                "metadata": <canonical JSON>, "checksum": "sha256:..."}}
    the rest   every array's raw little-endian bytes, back to back

The arrays are the caller's (dotted parameter names such as
``model.encoder.layers.0.attn.w_q.weight``, optimizer state such as ``optim.m.0``); the
metadata (configs, tokenizer, step, losses ...) is one JSON object stored as canonical JSON
(sorted keys, no spaces) under ``"metadata"``. Uncompressed, with a bounded header and nothing
that could run code, a file can never make its reader allocate more than the file's size.

* Writing (writing.py) goes to a temporary file in the target's directory (opened with
  ``O_CREAT | O_EXCL | O_NOFOLLOW``: never through a link, never over another file), is
  flushed and ``fsync``-ed, then ``os.replace``-d over the target (or, with
  ``overwrite=False``, linked to it, which fails if the name is taken), and the directory is
  ``fsync``-ed where the OS allows. A crash at any moment leaves either the old checkpoint or
  the new one; an OS error is one CheckpointError naming the path and the fix.
* A sha256 checksum over every array's name, dtype, shape and bytes *and over the metadata*
  is stored beside it and verified on load (``reading.py``): an edited ``step`` or tokenizer
  is caught like a flipped weight.

Format 2 (``.npz`` archives, checksum over arrays and metadata) still loads through a
hardened reader; format 1 (checksum over the arrays only) is refused, and
``python -m minitransformer.runtime.checkpoint upgrade FILE`` converts a file one trusts
(legacy.py).

This module stands on the ground: it works on host NumPy arrays only. Convert device arrays
(CuPy) to NumPy before saving.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

import numpy as np

from ...config.version import __version__
from ...errors import CheckpointError
from .writing import write_atomically

FORMAT_VERSION = 3
"""Version of the on-disk layout; bump it when the layout changes incompatibly."""

CHECKPOINT_NAME = "checkpoint.safetensors"
"""The file a training run writes in its directory (``checkpoint_file(run_dir)``)."""

LEGACY_CHECKPOINT_NAME = "checkpoint.npz"
"""What runs wrote before format 3; found by ``checkpoint_file`` when it is the only one."""

METADATA_KEY = "__metadata__"
"""The safetensors header key (and the legacy archive entry) that holds the metadata."""

RESERVED_METADATA_KEYS = ("format_version", "library_version", "created_at", "checksum")
"""Metadata keys that :func:`save_checkpoint` fills in (overwriting any given values)."""

FORMAT_TAG = "minitransformer"
"""``__metadata__["format"]`` of a file written here."""

MAX_HEADER_BYTES = 64 * 2**20
"""Cap on a header (and on a legacy file's metadata entry), checked before it is read.

What a legitimate training checkpoint puts there: one loss per step, at most 25 bytes each
as JSON, for at most config.train.MAX_STEPS = 1,000,000 steps (25 MB); the largest tokenizer
a task can build, the 50,000-merge BPE of ``translate-en-es`` or the 100,000-symbol vocabulary
of ``copy`` (each under 2 MB: a merge is ``["ab","cd"],``, a symbol ``"99999",``); configs,
optimizer scalars and one small entry per array (about 100 bytes each, a few hundred arrays).
That is under 32 MiB; 64 MiB leaves room for twice that and still parses in well under a
second with about that much memory."""

DTYPES: dict[str, np.dtype] = {
    code: np.dtype(kind).newbyteorder("<")
    for code, kind in {
        "BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16",
        "U32": "uint32", "I32": "int32", "U64": "uint64", "I64": "int64",
        "F16": "float16", "F32": "float32", "F64": "float64", "C64": "complex64",
    }.items()
}  # fmt: skip
"""safetensors dtype code -> the little-endian NumPy dtype it stores."""

_CODES = {dtype.newbyteorder("="): code for code, dtype in DTYPES.items()}


# --------------------------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------------------------


def save_checkpoint(
    path: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    metadata: Mapping[str, Any] | None = None,
    *,
    overwrite: bool = True,
) -> Path:
    """Write ``arrays`` and ``metadata`` to ``path`` atomically; return the path written.

    Args:
        path: target file, conventionally ``<run>/checkpoint.safetensors``; parent
            directories are created.
        arrays: name -> host NumPy array of a numeric or bool dtype (0-d arrays are fine).
        metadata: JSON-serializable dict (tuples come back as lists, NumPy scalars as Python
            numbers). The keys ``format_version``, ``library_version``, ``created_at`` and
            ``checksum`` are filled in here and overwrite any given values.
        overwrite: replace a file already at ``path`` (a run saving its checkpoint again).
            False claims the name in one step instead: a file or link already there, even
            one another process wrote a moment before, is refused and left as it is.

    Raises:
        CheckpointError: an array is not a NumPy array, has a dtype safetensors cannot store,
            or uses a reserved name; the metadata is not JSON-serializable or too large; the
            folder cannot be made or written (read-only, full, a file or a dangling link on
            the way), or ``overwrite=False`` and ``path`` exists. The previous file at
            ``path``, if any, is then left untouched, and the temp file removed (where the
            folder still allows it).
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
    header = _header(checked, plain)
    if len(header) > MAX_HEADER_BYTES:
        raise CheckpointError(
            f"cannot save checkpoint {path}: its header would be {len(header):,} bytes, above "
            f"the cap of {MAX_HEADER_BYTES:,} that load_checkpoint reads. Fix: keep large "
            "data in arrays, not in the metadata."
        )
    write_atomically(path, _write(header, checked), overwrite=overwrite)
    return path


def _check_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validate names and dtypes; return little-endian C-contiguous NumPy arrays."""
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
        if array.dtype.newbyteorder("=") not in _CODES:
            raise CheckpointError(
                f"cannot save checkpoint {path}: arrays[{name!r}] has dtype {array.dtype}, which "
                "a safetensors file cannot hold (object and string arrays would need pickle). "
                "Fix: convert it to bool, (u)int8..64, float16/32/64 or complex64, or put it in "
                "the JSON metadata."
            )
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        checked[name] = array if array.flags.c_contiguous else array.copy(order="C")
    return checked


def _header(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> bytes:
    """The length prefix and the JSON header of ``arrays`` (in the order they will be written)
    and ``meta``, padded with spaces to a multiple of 8 bytes as safetensors does."""
    entries: dict[str, Any] = {
        METADATA_KEY: {
            "format": FORMAT_TAG,
            "format_version": str(FORMAT_VERSION),
            "metadata": canonical_json(meta),
            "checksum": checksum(arrays, meta),
        }
    }
    offset = 0
    for name, array in arrays.items():
        code = _CODES[array.dtype.newbyteorder("=")]
        entries[name] = {
            "dtype": code,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    text = json.dumps(entries, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def _write(header: bytes, arrays: Mapping[str, np.ndarray]) -> Callable[[BinaryIO], None]:
    """What writes the file's bytes: the header, then every array."""

    def write(file: BinaryIO) -> None:
        file.write(header)
        for array in arrays.values():
            _write_array(file, array)

    return write


def _write_array(file: Any, array: np.ndarray) -> None:
    """One array's raw bytes (C order, little-endian: _check_arrays made them so)."""
    if array.size:
        file.write(array.reshape(-1).view(np.uint8).data)


# --------------------------------------------------------------------------------------------
# Checksum and small helpers
# --------------------------------------------------------------------------------------------


def canonical_json(meta: Mapping[str, Any]) -> str:
    """``meta`` without its checksum as canonical JSON: sorted keys, no spaces, UTF-8 text.
    What the checksum covers, and (format 3) exactly what the file stores."""
    rest = {k: v for k, v in meta.items() if k != "checksum"}
    return json.dumps(rest, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def checksum(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any] | None = None) -> str:
    """sha256 over each array's name, dtype, shape and C-order bytes, in sorted-name order,
    then (formats 2 and 3) over the metadata without its checksum, as canonical JSON.
    (Format 1 files, whose checksum stopped before the metadata, pass ``meta=None``.)"""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = arrays[name]
        header = json.dumps([name, array.dtype.str, list(array.shape)])
        digest.update(header.encode("utf-8") + b"\n")
        digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    if meta is not None:
        digest.update(b"metadata\n" + canonical_json(meta).encode("utf-8"))
    return "sha256:" + digest.hexdigest()


def nbytes(shape: tuple[int, ...] | list[int], dtype: np.dtype) -> int:
    """Bytes of an array of ``shape`` and ``dtype``, in Python ints (no overflow)."""
    return math.prod(shape) * np.dtype(dtype).itemsize


def _json_default(value: Any) -> Any:
    """Let NumPy scalars and small arrays into the JSON metadata."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def _library_version() -> str:
    return __version__


# --------------------------------------------------------------------------------------------
# What a reader says when a file is refused (reading.py, legacy.py, schema.py, layout.py)
# --------------------------------------------------------------------------------------------

Entries = dict[str, tuple[tuple[int, ...], np.dtype]]
"""name -> (shape, dtype) of every array in a file, known before any is read."""

Expect = Callable[[Path, Mapping[str, Any], Entries], None]
"""``expect(path, metadata, entries)``: raises CheckpointError when the arrays a file declares
are not the ones its metadata (or the caller) expects; called before any array is read."""


def _fail(path: Path, problem: str, fix: str) -> NoReturn:
    """Raise the one-line CheckpointError: file, problem, fix."""
    raise CheckpointError(f"cannot load checkpoint {path}: {problem}. Fix: {fix}.")


_RESTORE = "restore an earlier checkpoint (see latest_checkpoint) or retrain"
_OURS = "load a file written by save_checkpoint"


def _upgrade_fix(path: Path) -> str:
    return (
        f"if you trust it, convert it with `python -m minitransformer.runtime.checkpoint upgrade "
        f"{path}` (from Python: checkpoint.upgrade_checkpoint(path)), which writes a "
        ".safetensors file next to it"
    )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json object_pairs_hook: a key that occurs twice is refused (JSON would keep the last)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen[key] = value
    return seen


class _Duplicate(ValueError):
    pass


def _parse_json(path: Path, text: bytes | str, what: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _Duplicate as dup:
        _fail(path, f"the {what} names {str(dup)!r} twice", _OURS)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, too deep, a huge int
        _fail(path, f"the {what} is not valid JSON ({str(exc)[:200]})", _OURS)


def _version_fail(path: Path, version: Any) -> NoReturn:
    """An unknown format version: newer (upgrade the library) or unknown."""
    number = version if type(version) is int else None
    if isinstance(version, str) and version.isdigit() and len(version) < 10:
        number = int(version)
    if number is not None and number > FORMAT_VERSION:
        fix = f"upgrade minitransformer (this is {_library_version()})"
    else:
        fix = "load it with the minitransformer version that wrote it, or re-save it"
    shown = number if number is not None else repr(version)[:40]
    _fail(
        path,
        f"unknown checkpoint format version {shown} (this library writes version "
        f"{FORMAT_VERSION} and reads 2 and 3)",
        fix,
    )
