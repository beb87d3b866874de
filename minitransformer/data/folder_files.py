"""The small files of a model folder (a Marian / opus-mt folder): read and written safely.

    read_capped(path, cap, fix)        bytes of a regular file, its size checked before reading
    read_json(path, cap, fix)          the same, parsed as JSON with no key given twice
    write_replacing(path, data)        a new temp file beside path, then renamed over it

Reading refuses what is not a regular file and anything larger than ``cap`` (a file that
grows while read included) with a CheckpointError naming the path and ``fix``. Writing goes
to a temporary file created with ``O_EXCL | O_NOFOLLOW`` (never through a link) and renamed
over ``path``: a reader sees the old file or the new one, never half of one. The tokenizer
(sentencepiece.py) and the model folders (nn/safetensors_folder.py) both use them.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from minitransformer.errors import CheckpointError


def read_capped(path: Path, cap: int, fix: str) -> bytes:
    """A regular file's bytes, its size checked against `cap` before anything is read."""
    try:
        st = os.stat(path)
    except OSError as err:  # missing, most often
        raise CheckpointError(f"{path}: cannot be read ({err.strerror}); {fix}") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{path}: not a regular file; {fix}")
    if st.st_size > cap:
        raise CheckpointError(f"{path}: {st.st_size:,} bytes, above the cap of {cap:,}; {fix}")
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise CheckpointError(f"{path}: grew past the cap of {cap:,} bytes while read; {fix}")
    return data


def read_json(path: Path, cap: int, fix: str) -> Any:
    """The JSON value of a capped file (``read_capped``); a key given twice is an error."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(pairs)
        if len(d) != len(pairs):
            raise ValueError("a key appears twice")
        return d

    try:
        data = read_capped(path, cap, fix).decode("utf-8")
        return json.loads(data, object_pairs_hook=no_duplicates)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise CheckpointError(f"{path}: not valid JSON ({err}); {fix}") from None


def write_replacing(path: Path, data: bytes) -> None:
    """Write ``data`` to a new temporary file beside ``path`` (never through a link), then
    rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
