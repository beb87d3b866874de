"""``run_check``: the GPU check from start to end. It makes the report's folder (refusing
one that holds anything), runs the steps in order within the time budget, printing a line
as each starts and ends (with why it was skipped), judges the targets and writes
``gpucheck.json`` and ``gpucheck.md``.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runs import RunDirectoryError, files
from ..version import __version__
from . import machine, report, steps, targets
from .child import Budget

STEPS: tuple[str, ...] = ("cuda_tests", "callcount", "bench", "decode", "train", "cpu_budget")


def prepare_out(out: str | os.PathLike[str]) -> Path:
    """Make ``out`` (and its parents); refuse a path that is a file, a link, or a folder
    that holds anything: the check never writes over what it did not make."""
    path = Path(out)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise RunDirectoryError(
            f"--out {out}: is {'a link' if path.is_symlink() else 'a file'}; name a new "
            f"directory, e.g. --out {out}-gpucheck"
        )
    if path.is_dir() and any(path.iterdir()):
        raise RunDirectoryError(
            f"--out {out} is not empty: the GPU check writes only into a new or empty "
            f"directory (it never overwrites what it did not make); name another, e.g. "
            f"--out {out}-2, or move its files away yourself"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def run_check(
    out: str | os.PathLike[str],
    quick: bool = False,
    budget_s: float = 480.0,
    argv: list[str] | None = None,
    log: Callable[[str], None] = print,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """Run every step (or those named in ``only``), write ``out``/gpucheck.json and
    ``out``/gpucheck.md; return the result (what the JSON holds)."""
    folder = prepare_out(out)
    t0, started = time.perf_counter(), datetime.datetime.now().astimezone()
    gpu, no_gpu = machine.gpu_status()
    log(
        f"gpucheck: {'a GPU is there' if gpu else 'no GPU: ' + no_gpu}; budget {budget_s:.0f} s"
        + ("; --quick" if quick else "")
    )
    ctx = steps.Context(folder, quick, Budget(budget_s), gpu, no_gpu, log=log)
    found: dict[str, dict[str, Any]] = {}
    for number, name in enumerate(STEPS, 1):
        title = report.TITLES[name].split(". ", 1)[1]
        log(f"gpucheck: [{number}/{len(STEPS)}] {title} ...")
        t = time.perf_counter()
        if only is not None and name not in only:
            r = steps.skipped(f"not asked for (--steps {','.join(only)})")
        elif name == "decode":
            r = steps.decode(ctx, found.get("bench", {}))
        else:
            r = getattr(steps, name)(ctx)
        r.setdefault("seconds", time.perf_counter() - t)
        found[name] = r
        why = f": {r['reason']}" if r.get("reason") else ""
        log(f"gpucheck: [{number}/{len(STEPS)}] {r['status']}{why}")
    result: dict[str, Any] = {
        "minitransformer": __version__,
        "argv": list(argv or []),
        "started": started.isoformat(timespec="seconds"),
        "quick": quick,
        "budget_s": budget_s,
        "machine": machine.machine_facts(gpu),
        "gpu": gpu,
        "no_gpu": no_gpu or None,
        "steps": found,
        "targets": targets.judge(found),
    }
    result["wall_s"] = time.perf_counter() - t0
    result["skipped"] = report.skipped_list(result)
    result = _finite(result)
    # the run directory's writer: a temp file renamed over the name, never through a link
    files.write_text(folder, "gpucheck.json", json.dumps(result, indent=2) + "\n")
    files.write_text(folder, "gpucheck.md", report.render(result))
    for line in result["skipped"]:
        log(f"gpucheck: skipped: {line}")
    log(
        f"gpucheck: {result['wall_s']:.0f} s; report in {folder / 'gpucheck.md'} and "
        f"{folder / 'gpucheck.json'}"
    )
    return result
