"""Reading a checkpoint, treating the file as hostile until proven otherwise.

Everything is bounded by what the file may legitimately hold, and checked before anything
is allocated:

* The header's length is read first and capped (``MAX_HEADER_BYTES``); the header is parsed
  here (a duplicate key anywhere is refused by name, so no second ``__metadata__`` can hide),
  every entry's dtype, shape and byte range is checked, the ranges must tile the data exactly
  (no overlap, no gap, nothing outside the file) and the file's size must be header + data.
* The metadata must be the canonical JSON the checksum covers (no padding, no second copy).
* ``expect`` (for instance :func:`layout.expect_model_arrays`) sees the metadata and every
  entry's name, shape and dtype before any array is read, so a file whose arrays do not fit
  the model its config describes is refused without allocating that model's memory.
* Only then are the arrays read, into arrays of the checked sizes, and the checksum (see
  ``format.py``) verified: arrays and metadata are as they were saved.

Nothing in a checkpoint can execute code. Legacy ``.npz`` files go through legacy.py.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

import numpy as np

from .format import (
    _OURS,
    _RESTORE,
    DTYPES,
    FORMAT_TAG,
    FORMAT_VERSION,
    MAX_HEADER_BYTES,
    METADATA_KEY,
    Entries,
    Expect,
    _fail,
    _parse_json,
    _upgrade_fix,
    _version_fail,
    canonical_json,
    checksum,
    nbytes,
)
from .legacy import read_npz, read_npz_metadata

_NPZ_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with entries, an empty zip
_NPY_MAGIC = b"\x93NUMPY"
_META_KEYS = {"format", "format_version", "metadata", "checksum"}
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_checkpoint(
    path: str | os.PathLike[str], *, verify: bool = True, expect: Expect | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint written by :func:`save_checkpoint`; return ``(arrays, metadata)``.

    Args:
        path: the ``.safetensors`` file (or a legacy format-2 ``.npz``).
        verify: recompute the sha256 checksum and compare it with the stored one.
        expect: called as ``expect(path, metadata, entries)`` once the header is read and
            before any array is: it refuses arrays that do not fit (for a model or training
            checkpoint pass ``checkpoint.expect_model_arrays``).

    Raises:
        CheckpointError: the file is missing, not a checkpoint, truncated or corrupted, claims
            more than it holds, has missing, duplicate, unknown or malformed entries or
            metadata, comes from an unknown or retired format version, or fails the checksum.
            The one-line message names the file, the problem and the fix.
    """
    path = Path(path)
    with open_regular(path) as file:
        if _is_npz(path, file):
            return read_npz(path, file, verify=verify, expect=expect)
        meta, entries, stored, data_start = _read_header(path, file)
        if expect is not None:
            expect(path, meta, {k: (v[1], v[0]) for k, v in entries.items()})
        arrays = _read_arrays(path, file, entries, data_start)
    if verify and checksum(arrays, meta) != stored:
        _fail(
            path,
            "checksum mismatch: the arrays or the metadata changed after saving "
            "(corrupted or edited file)",
            _RESTORE,
        )
    return arrays, {**meta, "checksum": stored}


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return only the metadata of a checkpoint (cheap: the header only; not verified).

    Raises:
        CheckpointError: as :func:`load_checkpoint` for the file and its header.
    """
    path = Path(path)
    with open_regular(path) as file:
        if _is_npz(path, file):
            return read_npz_metadata(path, file)
        meta, _, stored, _ = _read_header(path, file)
    return {**meta, "checksum": stored}


def read_entries(path: str | os.PathLike[str]) -> Entries:
    """Every array's name, shape and dtype, from the header alone (nothing is verified)."""
    path = Path(path)
    with open_regular(path) as file:
        if _is_npz(path, file):
            _fail(path, "this is a legacy .npz checkpoint", _upgrade_fix(path))
        _, entries, _, _ = _read_header(path, file)
    return {k: (v[1], v[0]) for k, v in entries.items()}


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # POSIX; elsewhere no FIFO can be named
_FLAGS = os.O_RDONLY | _NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
CHECKPOINT_FIXES = {  # what open_regular's refusals of a checkpoint file advise
    "missing": "check the path (latest_checkpoint(run_dir) finds one)",
    "not regular": "name a checkpoint file written by `minitransformer train` (a run "
    "directory's checkpoint.safetensors) or by save_checkpoint",
    "unreadable": "check the file's permissions",
}


def open_regular(
    path: str | os.PathLike[str],
    refuse: Callable[[str, str], NoReturn] | None = None,
    fixes: Mapping[str, str] = CHECKPOINT_FIXES,
) -> BinaryIO:
    """``path`` opened for reading, checked to be a regular file on the open descriptor.

    The type is checked before a byte is read and without waiting: the file is opened with
    ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer; a terminal does
    not become the process's), then ``fstat``-ed, so what is checked is what is read (no
    race with a swap). A FIFO, a device such as ``/dev/zero`` (also through a link), a
    socket or a directory is refused: ``refuse(problem, fix)`` raises (by default a
    CheckpointError naming ``path``), ``fix`` taken from ``fixes`` ("missing", "not
    regular", "unreadable"). A missing or unreadable file is refused the same way.
    """
    path = Path(path)
    if refuse is None:
        refuse = lambda problem, fix: _fail(path, problem, fix)  # noqa: E731
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        refuse("file not found", fixes["missing"])
    except OSError as exc:  # a socket (ENXIO), no permission, a name too long ...
        kind = _kind(path)
        if kind is not None:
            refuse(f"it is not a regular file but {kind}", fixes["not regular"])
        refuse(f"it cannot be read ({exc.strerror or exc})", fixes["unreadable"])
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((k for test, k in _KINDS if test(mode)), "another kind of file")
            refuse(f"it is not a regular file but {kind}", fixes["not regular"])
        if _NONBLOCK:
            os.set_blocking(fd, True)  # a regular file: reads as usual from here on
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _kind(path: Path) -> str | None:
    """What ``path`` is when it is there but not a regular file (None otherwise)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((kind for test, kind in _KINDS if test(mode)), None)


def _is_npz(path: Path, file: BinaryIO) -> bool:
    """True for a zip archive (a legacy checkpoint); refuses what is neither zip nor ours."""
    magic = file.read(9)
    file.seek(0)
    if magic.startswith(_NPZ_MAGICS):
        return True
    if magic[8:] == b"{":  # a header length, then JSON: _read_header checks the length
        return False
    if magic.startswith(_NPY_MAGIC):
        kind = "a single .npy array, not a checkpoint"
    elif magic[:1] == b"\x80":
        kind = "a Python pickle, which is never loaded because unpickling can run code"
    elif not magic:
        kind = "empty (0 bytes)"
    elif len(magic) < 9:
        kind = f"truncated or corrupted ({len(magic)} bytes, no header)"
    else:
        kind = "not a .safetensors checkpoint (nor a legacy .npz one)"
    _fail(path, f"the file is {kind}", _OURS)


# --------------------------------------------------------------------------------------------
# The safetensors header, bounded and checked before any array is read
# --------------------------------------------------------------------------------------------


def _read_header(
    path: Path, file: BinaryIO
) -> tuple[dict[str, Any], dict[str, tuple[np.dtype, tuple[int, ...], int, int]], str, int]:
    """(metadata, {name: (dtype, shape, start, end)}, stored checksum, data start)."""
    size = os.fstat(file.fileno()).st_size
    prefix = file.read(8)
    if len(prefix) < 8:
        _fail(path, f"the file is truncated or corrupted ({size} bytes, no header)", _RESTORE)
    length = int.from_bytes(prefix, "little")
    if length > MAX_HEADER_BYTES:
        _fail(
            path,
            f"its header claims {length:,} bytes, above the cap of {MAX_HEADER_BYTES:,} "
            "(no checkpoint of this library needs more)",
            _OURS,
        )
    if 8 + length > size:
        _fail(
            path,
            f"the file is truncated or corrupted: its header claims {length:,} bytes but the "
            f"file has {size:,}",
            _RESTORE,
        )
    raw = file.read(length)
    header = _parse_json(path, raw, "header")
    if not isinstance(header, dict):
        _fail(path, "the header is not a JSON object", _OURS)
    if len(raw) - len(raw.rstrip(b" ")) >= 8:
        _fail(path, "the header is padded with more than 7 spaces", _OURS)
    meta, stored = _read_meta(path, header.pop(METADATA_KEY, None))
    data_size = size - 8 - length
    entries = {name: _entry(path, name, value) for name, value in header.items()}
    end = 0
    for name, (_, _, start, stop) in sorted(entries.items(), key=lambda kv: kv[1][2:]):
        if start != end:
            problem = "overlaps the array before it" if start < end else "leaves a gap"
            _fail(path, f"array {name!r} {problem} (bytes {start:,}..{stop:,})", _RESTORE)
        end = stop
    if end != data_size:
        where = "past the end of the file" if end > data_size else "short of the file's end"
        _fail(
            path,
            f"the file is truncated or corrupted: its arrays end {where} (the header "
            f"describes {end:,} bytes of data, the file holds {data_size:,})",
            _RESTORE,
        )
    return meta, entries, stored, 8 + length


def _read_meta(path: Path, value: Any) -> tuple[dict[str, Any], str]:
    """The ``__metadata__`` table: exactly our four keys; the JSON it holds, checked."""
    if not isinstance(value, dict) or value.get("format") != FORMAT_TAG:
        _fail(
            path,
            f"no {METADATA_KEY} of format {FORMAT_TAG!r}, so this is not a minitransformer "
            "checkpoint (a safetensors file from another tool?)",
            _OURS,
        )
    unknown = sorted(set(value) - _META_KEYS)
    if unknown or not all(isinstance(v, str) for v in value.values()):
        _fail(path, f"{METADATA_KEY} has unknown or non-text entries {unknown[:5]}", _OURS)
    version = value.get("format_version")
    if version != str(FORMAT_VERSION):
        _version_fail(path, version)
    text, stored = value.get("metadata"), value.get("checksum")
    if text is None or stored is None:
        _fail(path, f"{METADATA_KEY} lacks 'metadata' or 'checksum'", _OURS)
    meta = _parse_json(path, text, "metadata")
    if not isinstance(meta, dict):
        _fail(path, "the metadata is not a JSON object", _OURS)
    if meta.get("format_version") != FORMAT_VERSION or canonical_json(meta) != text:
        _fail(
            path,
            "the metadata is not in the canonical form save_checkpoint writes (padded, "
            "reordered or edited)",
            _RESTORE,
        )
    return meta, stored


def _entry(path: Path, name: str, value: Any) -> tuple[np.dtype, tuple[int, ...], int, int]:
    """One array's header entry, checked: (dtype, shape, start, end)."""
    if not name or "\x00" in name:
        _fail(path, f"array name {name!r} is empty or holds a NUL", _OURS)
    if not isinstance(value, dict) or set(value) != _ENTRY_KEYS:
        _fail(path, f"array {name!r} has a malformed header entry", _OURS)
    dtype = DTYPES.get(value["dtype"]) if isinstance(value["dtype"], str) else None
    if dtype is None:
        _fail(path, f"array {name!r} has unsupported dtype {str(value['dtype'])[:20]!r}", _OURS)
    shape, offsets = value["shape"], value["data_offsets"]
    if not (isinstance(shape, list) and len(shape) <= 32 and all(_count(n) for n in shape)):
        _fail(path, f"array {name!r} has a malformed shape {str(shape)[:60]}", _OURS)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_count, offsets))):
        _fail(path, f"array {name!r} has malformed data_offsets {str(offsets)[:60]}", _OURS)
    start, stop = offsets
    if stop - start != nbytes(shape, dtype):
        _fail(
            path,
            f"array {name!r} declares shape {tuple(shape)} of {dtype.name} "
            f"({nbytes(shape, dtype):,} bytes) but spans {stop - start:,} bytes",
            _RESTORE,
        )
    return dtype, tuple(shape), start, stop


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _read_arrays(
    path: Path, file: BinaryIO, entries: Mapping[str, Any], data_start: int
) -> dict[str, np.ndarray]:
    """Each array read into an array of its checked size (all of them fit in the file)."""
    arrays = {}
    for name, (dtype, shape, start, stop) in entries.items():
        array = np.empty(shape, dtype=dtype)
        file.seek(data_start + start)
        if file.readinto(memoryview(array.reshape(-1).view(np.uint8))) != stop - start:
            _fail(path, f"array {name!r} is truncated (the file changed while read)", _RESTORE)
        arrays[name] = array
    return arrays
