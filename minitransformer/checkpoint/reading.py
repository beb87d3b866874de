"""Reading a checkpoint, treating the file as hostile until proven otherwise.

* Loading always uses ``np.load(..., allow_pickle=False)``, and files that are not zip archives
  are refused before NumPy sees them, so nothing in a checkpoint can execute code.
* Resources are bounded before anything is allocated: every entry's ``.npy`` header is read
  first and the bytes its shape and dtype declare must be the bytes the entry holds; an entry
  may not claim to inflate beyond what deflate can produce. Rejecting any file takes time and
  memory in proportion to its size.
* The checksum (see ``format.py``) is verified: arrays and metadata are as they were saved.

Plus where a run's checkpoint is: ``checkpoint_file``, ``latest_checkpoint``, ``section``.
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ..errors import CheckpointError
from .format import (
    ALLOWED_KINDS,
    FORMAT_VERSION,
    METADATA_KEY,
    READABLE_VERSIONS,
    _checksum,
    _library_version,
)

_DEFLATE_MAX_RATIO = 1032  # deflate never inflates one byte to more than this
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with entries, an empty zip
_NPY_MAGIC = b"\x93NUMPY"


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
    if value.dtype.kind not in ALLOWED_KINDS:
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
    if type(version) is not int or version not in READABLE_VERSIONS:
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
# Where a run's checkpoint is
# --------------------------------------------------------------------------------------------


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
