"""``run_check``: the GPU check from start to end. It refuses an ``--out`` that holds
anything, and a machine without a GPU unless told a CPU-only report is wanted
(``allow_no_gpu``), both before it writes anything; then it makes the report's folder,
runs the steps in order within the time budget, printing a line as each starts and ends
(with why it was skipped), judges the targets and writes ``gpucheck.json`` and
``gpucheck.md``.

Stopped (Ctrl-C, or SIGTERM turned into an exception by the command line), it lets the
exception go on once the running child is ended (``run_child``) and its temporary folder
removed, noting on the exception what was running (``stopped_during``).
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

from ...config.version import __version__
from ...errors import DeviceError
from ...runtime.runs import RunDirectoryError, files
from . import machine, report, steps, targets
from .child import Budget

STEPS: tuple[str, ...] = (
    "cuda_tests", "graph_replay", "callcount", "bench", "decode", "train", "cpu_budget",
)  # fmt: skip


def refuse_unusable_out(out: str | os.PathLike[str]) -> Path:
    """``out`` as a Path; RunDirectoryError for a path that is a file, a link, or a folder
    that holds anything (the check never writes over what it did not make). Makes nothing."""
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
    return path


def prepare_out(out: str | os.PathLike[str]) -> Path:
    """Make ``out`` (and its parents), refused as ``refuse_unusable_out`` says."""
    path = refuse_unusable_out(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


def refuse_no_gpu(gpu: bool, why: str, allow_no_gpu: bool) -> None:
    """DeviceError when there is no GPU and a CPU-only report was not asked for: without
    a GPU nothing the check is for would be measured, and a report of skipped steps must
    not pass for a success."""
    if not gpu and not allow_no_gpu:
        raise DeviceError(
            f"no GPU here ({why}): nothing on the GPU would be measured; run the check on a "
            f"machine with a GPU, or pass --allow-no-gpu (run_check(..., allow_no_gpu=True) "
            f"in Python) for a report of the CPU-side steps alone"
        )


_DOING = "gpucheck_doing"  # the attribute run_check sets on an exception that stopped it


def stopped_during(stop: BaseException) -> str | None:
    """What the check was doing when ``stop`` ended it ("step 6/7, train copy on cpu"),
    as ``run_check`` noted it; None when it stopped before the first step."""
    return getattr(stop, _DOING, None)


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
    allow_no_gpu: bool = False,
) -> dict[str, Any]:
    """Run every step (or those named in ``only``), write ``out``/gpucheck.json and
    ``out``/gpucheck.md; return the result (what the JSON holds). Without a GPU it raises
    DeviceError, before anything is written, unless ``allow_no_gpu`` (then the GPU steps
    are reported as skipped). A RunDirectoryError for an ``out`` that holds anything."""
    folder = refuse_unusable_out(out)
    t0, started = time.perf_counter(), datetime.datetime.now().astimezone()
    gpu, no_gpu = machine.gpu_status()
    refuse_no_gpu(gpu, no_gpu, allow_no_gpu)
    folder.mkdir(parents=True, exist_ok=True)
    log(
        f"gpucheck: {'a GPU is there' if gpu else 'no GPU: ' + no_gpu}; budget {budget_s:.0f} s"
        + ("; --quick" if quick else "")
    )
    ctx = steps.Context(folder, quick, Budget(budget_s), gpu, no_gpu, log=log)
    try:
        found = _run_steps(ctx, only)
        ctx.step, ctx.doing = "", "writing the report"
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
        # the run directory's writer: a temp file renamed over the name, never via a link
        files.write_text(folder, "gpucheck.json", json.dumps(result, indent=2) + "\n")
        files.write_text(folder, "gpucheck.md", report.render(result))
    except BaseException as stop:  # Ctrl-C, SIGTERM: the running child is already ended
        setattr(stop, _DOING, ", ".join(filter(None, (ctx.step, ctx.doing))) or None)
        raise
    for line in result["skipped"]:
        log(f"gpucheck: skipped: {line}")
    log(
        f"gpucheck: {result['wall_s']:.0f} s; report in {folder / 'gpucheck.md'} and "
        f"{folder / 'gpucheck.json'}"
    )
    return result


def _run_steps(ctx: steps.Context, only: list[str] | None) -> dict[str, dict[str, Any]]:
    """Each step's result, in order (those not in ``only`` skipped); ``ctx.step`` and
    ``ctx.doing`` say which runs, for the message of a stop."""
    found: dict[str, dict[str, Any]] = {}
    for number, name in enumerate(STEPS, 1):
        title = report.TITLES[name].split(". ", 1)[1]
        ctx.step, ctx.doing = f"step {number}/{len(STEPS)}", title
        ctx.log(f"gpucheck: [{number}/{len(STEPS)}] {title} ...")
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
        ctx.log(f"gpucheck: [{number}/{len(STEPS)}] {r['status']}{why}")
    return found
