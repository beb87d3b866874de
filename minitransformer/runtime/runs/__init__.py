"""Run directories: one training run per directory, one writer at a time, resumable.

- ``files.py``: every write inside a run directory, never through a symbolic link.
- ``outputs.py``: a command's outputs outside a run (``scale --out``, ``bench --json``),
  checked before any work.
- ``lock.py``: opening a run directory for writing (the lock, no silent overwrite, stale temp
  files, no links; ``check_out``, the same refusals checked ahead), and ``resume_command``.
- ``metrics.py``: the metrics log, ``metrics.jsonl`` (the one writer and the one reader).
- ``resume.py``: a checkpoint, checked field by field, restored into a freshly built Trainer;
  ``warn_if_unfinished``, for a model loaded from a run that stopped early.
- ``notes.py``: the one-line notes a run prints on stderr.

This package does not import the Trainer: ``Trainer.resume`` builds itself from what
``read_resume_point`` gives it, then calls ``restore``.
"""

from . import files
from .files import RunDirectoryError
from .lock import (
    LOCK_NAME,
    RUN_FILES,
    RUN_MARKERS,
    RunLock,
    check_out,
    holds_run,
    open_run,
    remove_stale_temp_files,
    resume_command,
    shell_path,
)
from .metrics import MetricsLog, read_metrics, truncate_metrics
from .notes import note
from .resume import ResumePoint, read_resume_point, restore, warn_if_unfinished

__all__ = [
    "LOCK_NAME",
    "RUN_FILES",
    "RUN_MARKERS",
    "MetricsLog",
    "ResumePoint",
    "RunDirectoryError",
    "RunLock",
    "check_out",
    "holds_run",
    "note",
    "open_run",
    "read_metrics",
    "files",
    "read_resume_point",
    "remove_stale_temp_files",
    "restore",
    "resume_command",
    "shell_path",
    "truncate_metrics",
    "warn_if_unfinished",
]
