"""Checkpoints of earlier versions: ``.npz`` zip archives, read by a hardened reader
(upgrade.py converts one to the current format).

* **Format 2** (checksum over the arrays and the metadata) still loads. The zip's central
  directory is checked before any entry is inflated: every name must be a ``.npy`` entry and
  occur once (a second ``__metadata__`` is refused by name), flags the reader cannot honour
  (encryption: bit 0 or 6; patched data: bit 5) and compression methods other than stored
  and deflate are refused, the metadata entry may not exceed ``MAX_HEADER_BYTES``, and no
  entry may claim more bytes than its compressed size can give. Each array's ``.npy`` header
  (a bounded read) must declare exactly the bytes the entry holds, and ``expect`` sees every
  name, shape and dtype before any array is inflated (for a file whose metadata has a
  ``model_config``, ``expect_model_arrays`` unless the caller passes its own). The checksum
  is then computed while streaming the entries (memory: one chunk, time: the inflated size),
  so an entry the checksum does not cover is refused without ever being held in memory, and
  only a verified file is read into arrays.
* **Format 1** (checksum over the arrays only: an edited tokenizer or step went unnoticed) is
  refused. A file one trusts is converted with
  ``python -m minitransformer.runtime.checkpoint upgrade FILE`` (``upgrade_checkpoint``,
  upgrade.py), which verifies what its checksum covers and writes ``FILE`` with the
  ``.safetensors`` suffix beside it.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

import numpy as np

from ...errors import CheckpointError
from .format import (
    _CODES,
    _RESTORE,
    MAX_HEADER_BYTES,
    METADATA_KEY,
    Expect,
    _fail,
    _parse_json,
    _upgrade_fix,
    _version_fail,
    canonical_json,
    nbytes,
)
from .layout import expect_model_arrays

_DEFLATE_MAX_RATIO = 1032  # deflate never inflates one byte to more than this
_CHUNK = 1 << 20
_MAX_NPY_HEADER = 65_536  # what np.save writes is under 200 bytes
_UNHONOURED_FLAGS = {0x1: "encrypted", 0x40: "strongly encrypted", 0x20: "patched data"}
_ZIP_ERRORS = (
    zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error, ValueError,
    NotImplementedError, RuntimeError, KeyError, OverflowError, UnicodeDecodeError,
)  # fmt: skip


def _broken(path: Path, exc: BaseException) -> NoReturn:
    _fail(path, f"the archive is truncated or corrupted ({str(exc)[:200]})", _RESTORE)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def read_npz(
    path: Path,
    file: BinaryIO,
    *,
    verify: bool = True,
    expect: Expect | None = None,
    allow_v1: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, metadata)`` of a legacy checkpoint ``path``, read from ``file`` (opened by
    ``reading.open_regular``: a regular file); format 1 only with ``allow_v1``."""
    try:
        with zipfile.ZipFile(file) as archive:
            infos = _entries(path, archive)
            meta = _metadata(path, archive, infos)
            if meta["format_version"] == 1 and not allow_v1:
                _fail(
                    path,
                    "it is a format-1 checkpoint, whose checksum does not cover its metadata "
                    "(an edited tokenizer or step would go unnoticed)",
                    _upgrade_fix(path),
                )
            headers = {
                k: _npy_header(path, archive, k, v) for k, v in infos.items() if k != METADATA_KEY
            }
            if expect is None and "model_config" in meta:
                expect = expect_model_arrays  # every model checkpoint: its arrays are known
            if expect is not None:
                expect(path, meta, {k: (h[0], h[1]) for k, h in headers.items()})
            stored = meta.get("checksum")
            if verify:
                if not isinstance(stored, str):
                    _fail(path, "the metadata has no checksum", "re-save it with save_checkpoint")
                covered = meta if meta["format_version"] >= 2 else None
                if _streamed_checksum(path, archive, infos, headers, covered) != stored:
                    _fail(
                        path,
                        "checksum mismatch: the arrays or the metadata changed after saving, "
                        "or entries were added (corrupted or edited file)",
                        _RESTORE,
                    )
            arrays = {k: _read_array(path, archive, infos[k], *headers[k]) for k in headers}
    except CheckpointError:
        raise
    except _ZIP_ERRORS as exc:
        _broken(path, exc)
    return arrays, meta


def read_npz_metadata(path: Path, file: BinaryIO) -> dict[str, Any]:
    """The metadata of legacy checkpoint ``path`` (format 1 or 2; nothing else is read), from
    ``file`` (a regular file, opened by ``reading.open_regular``)."""
    try:
        with zipfile.ZipFile(file) as archive:
            return _metadata(path, archive, _entries(path, archive))
    except CheckpointError:
        raise
    except _ZIP_ERRORS as exc:
        _broken(path, exc)


def _entries(path: Path, archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """Array name -> its central-directory record, each checked; nothing is inflated."""
    infos: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        name = info.filename
        if not name.endswith(".npy") or len(name) == 4:
            _fail(path, f"entry {name[:100]!r} is not a .npy array", "load a checkpoint file")
        key = name[:-4]
        if key in infos:
            _fail(path, f"entry {name[:100]!r} occurs twice", _RESTORE)
        for bit, what in _UNHONOURED_FLAGS.items():
            if info.flag_bits & bit:
                bit_no = bit.bit_length() - 1
                problem = f"entry {name[:100]!r} is {what} (zip flag bit {bit_no})"
                _fail(path, f"{problem}, which save_checkpoint never writes", _RESTORE)
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            _fail(
                path,
                f"entry {name[:100]!r} uses compression method {info.compress_type}, which "
                "save_checkpoint never writes",
                _RESTORE,
            )
        stored = info.compress_type == zipfile.ZIP_STORED
        limit = info.compress_size if stored else info.compress_size * _DEFLATE_MAX_RATIO + 64
        if info.file_size > limit or (stored and info.file_size != info.compress_size):
            _fail(
                path,
                f"entry {name[:100]!r} claims {info.file_size:,} bytes from "
                f"{info.compress_size:,} stored bytes (more than the file can hold)",
                _RESTORE,
            )
        infos[key] = info
    if METADATA_KEY not in infos:
        _fail(
            path,
            f"no {METADATA_KEY} entry, so this is not a minitransformer checkpoint",
            "load a file written by save_checkpoint",
        )
    return infos


def _npy_header(
    path: Path, archive: zipfile.ZipFile, name: str, info: zipfile.ZipInfo
) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """(shape, dtype, fortran order, header bytes) of an entry, from a bounded read; the
    bytes they declare must be the bytes the entry holds."""
    with archive.open(info) as member:
        start = member.read(10)
        if len(start) < 10 or not start.startswith(b"\x93NUMPY") or start[6] not in (1, 2):
            _fail(path, f"entry {name!r} is not a .npy array", "load a checkpoint file")
        if start[6] == 1:
            length = int.from_bytes(start[8:10], "little")
        else:
            start += member.read(2)
            length = int.from_bytes(start[8:12], "little")
        if length > _MAX_NPY_HEADER:
            _fail(path, f"entry {name!r} has a {length:,}-byte .npy header", _RESTORE)
        raw = start + member.read(length)
    try:
        buffer = io.BytesIO(raw)
        version = np.lib.format.read_magic(buffer)
        read = np.lib.format.read_array_header_1_0
        if version == (2, 0):
            read = np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(buffer)
    except (ValueError, TypeError, SyntaxError, OverflowError, EOFError) as exc:
        _fail(path, f"entry {name!r} has a malformed .npy header ({str(exc)[:200]})", _RESTORE)
    if dtype.hasobject or dtype.newbyteorder("=") not in _CODES:
        _fail(
            path,
            f"entry {name!r} has dtype {dtype} (objects would need pickle, which is never "
            "loaded because unpickling can run code)",
            "only load checkpoints written by save_checkpoint from a trusted source",
        )
    if len(raw) + nbytes(shape, dtype) != info.file_size:
        _fail(
            path,
            f"entry {name!r} declares shape {shape} of {dtype} ({nbytes(shape, dtype):,} "
            f"bytes) but holds {info.file_size - len(raw):,} bytes",
            _RESTORE,
        )
    return shape, dtype, fortran, len(raw)


def _metadata(
    path: Path, archive: zipfile.ZipFile, infos: Mapping[str, zipfile.ZipInfo]
) -> dict[str, Any]:
    """The ``__metadata__`` entry (size capped before it is inflated), decoded and checked."""
    info = infos[METADATA_KEY]
    if info.file_size > MAX_HEADER_BYTES + _MAX_NPY_HEADER:
        _fail(
            path,
            f"its {METADATA_KEY} entry holds {info.file_size:,} bytes, above the cap of "
            f"{MAX_HEADER_BYTES:,} (no checkpoint of this library needs more)",
            _RESTORE,
        )
    shape, dtype, _, header = _npy_header(path, archive, METADATA_KEY, info)
    if dtype != np.uint8 or len(shape) != 1:
        _fail(path, f"malformed {METADATA_KEY} entry", "re-save the checkpoint")
    raw = _read_array(path, archive, info, shape, dtype, False, header).tobytes()
    meta = _parse_json(path, raw, "metadata")
    if not isinstance(meta, dict):
        _fail(path, "the metadata is not a JSON object", "re-save the checkpoint")
    version = meta.get("format_version")
    if type(version) is not int or version not in (1, 2):
        _version_fail(path, version)
    return meta


def _read_array(
    path: Path,
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    shape: tuple[int, ...],
    dtype: np.dtype,
    fortran: bool,
    header: int,
) -> np.ndarray:
    """One entry's data into an array of its declared (checked) size; the CRC is checked."""
    array = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    view = (array.T if fortran else array).reshape(-1).view(np.uint8)
    with archive.open(info) as member:
        member.read(header)
        filled = 0
        while filled < view.size:
            got = member.readinto(memoryview(view[filled:]))
            if not got:
                _fail(path, f"entry {info.filename!r} is truncated", _RESTORE)
            filled += got
        member.read(1)  # reach the end, where zipfile checks the CRC
    return array


def _streamed_checksum(
    path: Path,
    archive: zipfile.ZipFile,
    infos: Mapping[str, zipfile.ZipInfo],
    headers: Mapping[str, tuple[tuple[int, ...], np.dtype, bool, int]],
    meta: Mapping[str, Any] | None,
) -> str:
    """format.checksum of the archive's arrays, one chunk in memory at a time (an array in
    Fortran order, which np.save keeps and the checksum reads in C order, is read whole)."""
    digest = hashlib.sha256()
    for name in sorted(headers):
        shape, dtype, fortran, header = headers[name]
        digest.update(json.dumps([name, dtype.str, list(shape)]).encode("utf-8") + b"\n")
        if fortran:
            array = _read_array(path, archive, infos[name], *headers[name])
            digest.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
            continue
        with archive.open(infos[name]) as member:
            member.read(header)
            while chunk := member.read(_CHUNK):
                digest.update(chunk)
    if meta is not None:
        digest.update(b"metadata\n" + canonical_json(meta).encode("utf-8"))
    return "sha256:" + digest.hexdigest()
