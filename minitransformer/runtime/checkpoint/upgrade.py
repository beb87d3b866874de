"""Converting a checkpoint of an earlier version (``.npz``, format 1 or 2) to the current
format: :func:`upgrade_checkpoint`, also
``python -m minitransformer.runtime.checkpoint upgrade``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

from ...errors import CheckpointError
from .format import LEGACY_CHECKPOINT_NAME, RESERVED_METADATA_KEYS, save_checkpoint
from .legacy import read_npz
from .reading import open_regular
from .writing import TargetExists


def upgrade_checkpoint(
    path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
) -> Path:
    """Convert a legacy ``.npz`` checkpoint (format 1 or 2) to the current format; return the
    file written (default: ``path`` with the suffix ``.safetensors``; a run directory means its
    ``checkpoint.npz``). Never overwrites a file, not even one written while this runs.

    The arrays are verified against the old checksum; a format-1 file's metadata is not
    covered by it and is taken as it is, so only upgrade a file you trust. A training or
    model checkpoint's arrays must fit its model config (``expect_model_arrays``).

    Raises:
        CheckpointError: the file does not load (missing, not a regular file, not a legacy
            checkpoint), the target already exists (also when another upgrade wrote it a
            moment before: the name is claimed in one step), or it cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        path = path / LEGACY_CHECKPOINT_NAME
    target = Path(out) if out is not None else path.with_suffix(".safetensors")
    with open_regular(path) as file:  # a FIFO or a device is refused before it is read
        if os.path.lexists(target):  # before the work; the write itself claims the name
            _exists(path, target)
        arrays, meta = read_npz(path, file, allow_v1=True)  # a model's: expect_model_arrays
    kept = {k: v for k, v in meta.items() if k not in RESERVED_METADATA_KEYS}
    kept["upgraded_from"] = {"format_version": meta["format_version"], "file": path.name}
    try:
        return save_checkpoint(target, arrays, kept, overwrite=False)
    except TargetExists:
        _exists(path, target)


def _exists(path: Path, target: Path) -> NoReturn:
    raise CheckpointError(
        f"cannot upgrade {path}: {target} already exists. Fix: remove it, or write "
        "elsewhere (--out FILE; from Python: upgrade_checkpoint(path, out=...))."
    )
