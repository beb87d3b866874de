"""The metrics log of a run, ``metrics.jsonl``: one JSON record per line, written by the
Trainer at each log line and evaluation, read by the plots and by a resumed run.

    {"step": 50, "split": "train", "loss": 2.31, "lr": 0.0009, "tokens_per_s": 5400.0, ...}
    {"step": 500, "split": "valid", "loss": 1.02, "token_acc": 0.81, "exact_match": 0.4}

:class:`MetricsLog` appends records; :func:`read_metrics` reads them back, leaving out (and
naming) lines that are not records; :func:`truncate_metrics` cuts a log back to the step of
the checkpoint a run resumes from.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ...checks import is_real
from . import files
from .notes import note


class MetricsLog:
    """Appends records to a metrics log, one JSON line each, flushed at once (a crash loses
    no finished line). ``MetricsLog(os.devnull)`` writes nowhere (a rank that does not write).

    The log is opened with ``O_NOFOLLOW`` (files.py): a ``metrics.jsonl`` that is a symbolic
    link is refused (RunDirectoryError), never appended through.
    """

    def __init__(self, path: str | os.PathLike[str]):
        if os.fspath(path) == os.devnull:
            self._file = open(os.devnull, "a", encoding="utf-8")  # noqa: SIM115
        else:
            path = Path(path)
            self._file = files.open_append(path.parent, path.name)

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` (a step, a split, and numbers or strings) as one line."""
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a metrics log and the numbers of the lines that are not records.

    A record is a JSON object whose ``step`` is a non-negative int, whose ``split`` (if any)
    is a string, and whose other values are finite numbers or strings. Anything else (a
    line cut short by a crash, an edit, binary junk) is left out, and its line number given.
    """
    path = Path(path)
    if not path.exists():
        return [], []
    records, skipped = [], []
    with files.read_text_file(path) as file:  # a FIFO there is refused, never waited on
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                skipped.append(number)
                continue
            if _is_record(record):
                records.append(record)
            else:
                skipped.append(number)
    return records, skipped


def _is_record(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return False
    if not isinstance(record.get("split", ""), str):
        return False
    return all(
        isinstance(v, str) or (is_real(v) and math.isfinite(v))
        for k, v in record.items()
        if k not in ("step", "split")
    )


def truncate_metrics(path: str | os.PathLike[str], step: int) -> None:
    """Keep the log records up to ``step`` (those after it were written after the checkpoint
    a run resumes from) and drop lines that are not records, saying which."""
    path = Path(path)
    records, skipped = read_metrics(path)
    if skipped:
        shown = ", ".join(map(str, skipped[:10])) + (" ..." if len(skipped) > 10 else "")
        note(
            f"{path}: left out {len(skipped)} line(s) that are not metric records "
            f"(line {shown}; cut short by a crash, or edited)"
        )
    kept = [r for r in records if r["step"] <= step]
    if skipped or len(kept) != len(records) or path.exists():  # one atomic replace, no link
        files.write_text(path.parent, path.name, "".join(json.dumps(r) + "\n" for r in kept))
