"""Where a run's checkpoint is: ``checkpoint_file`` (a run directory's file),
``latest_checkpoint`` (the newest of several) and ``section`` (one prefix of its arrays)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ...errors import CheckpointError
from .format import CHECKPOINT_NAME, LEGACY_CHECKPOINT_NAME
from .reading import read_metadata


def checkpoint_file(run_or_file: str | os.PathLike[str]) -> Path:
    """A run directory means its ``checkpoint.safetensors`` (or, when only that exists, the
    ``checkpoint.npz`` an older version wrote); a file path is returned as it is."""
    path = Path(run_or_file)
    if not path.is_dir():
        return path
    current, legacy = path / CHECKPOINT_NAME, path / LEGACY_CHECKPOINT_NAME
    return legacy if legacy.exists() and not current.exists() else current


def section(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The arrays whose names start with ``prefix + "."``, with that prefix taken off
    (``section(arrays, "model")`` gives a model's state dict)."""
    start = prefix + "."
    return {k[len(start) :]: v for k, v in arrays.items() if k.startswith(start)}


def latest_checkpoint(run_dir: str | os.PathLike[str], pattern: str | None = None) -> Path | None:
    """Return the newest checkpoint in ``run_dir``, or None when there is none.

    Candidates are the files matching ``pattern`` (default: ``*.safetensors`` and ``*.npz``).
    "Newest" is the highest training step: the ``step`` stored in the metadata when the file
    has one, else the last number in the file name (``step_001200.safetensors`` -> 1200); ties
    (and files without a step) are broken by modification time. Hidden files, such as the
    temporary files of an interrupted save, are ignored. A corrupted candidate is still
    returned if it ranks first, so loading it fails loudly instead of silently resuming from
    an older state.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    patterns = [pattern] if pattern else ["*.safetensors", "*.npz"]
    candidates = [
        p
        for glob in patterns
        for p in run_dir.glob(glob)
        if p.is_file() and not p.name.startswith(".")
    ]
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
