"""The measurements of the GPU check, one function per step, each returning its result:
``{"status": "ok" | "failed" | "skipped", "reason": why (or None), "seconds": ..., figures}``.

1. ``cuda_tests``  the GPU tests (``pytest -m gpu``: every cuda:0 variant and every GPU-only
                   test), twice: MT_CUDA_KERNELS=0 ("before") and =1 ("after"); in parallel
                   workers with a per-test timeout where pytest-xdist and pytest-timeout are
                   installed; each run's whole log in ``tests-k0.log`` / ``tests-k1.log``
2. ``graph_replay`` a training step captured as a CUDA graph and replayed against eager
                   steps, bit for bit (``tests/fast/test_cuda_graph_replay.py -m gpu``,
                   kernels on: two shapes, an evaluation, a save and a resume; its log in
                   ``graph-replay.log``); skipped where the test skipped itself
3. ``callcount``   one tiny step's CuPy calls, the kernels and copies the GPU ran (CUPTI), the
                   counter's probe and the host µs per call: ``python -m
                   minitransformer.tools.callcount --device cuda:0``, before and after
4. ``bench``       ``bench --device cuda --compare torch-graph`` at each preset, twice:
                   before and after, interleaved: tiny before, tiny after, small before, ...
5. ``decode``      cached vs recomputing greedy decoding at small, 64 tokens, on cuda: the
                   figures the benchmark's small runs measured (bench runs it after small)
6. ``train``       ``train copy`` and ``train translate-en-es`` tokens/s: the CPU, then
                   cuda before and after (a short run each, in a temporary folder in --out
                   that goes when the run ends, or is stopped)
7. ``cpu_budget``  the CPU's call budget still holds: ``pytest tests/test_callcount.py``

Without a GPU (where the check runs only with ``--allow-no-gpu``) the GPU steps are
skipped ("no GPU: ..."); a step that does not fit in what is left of the time budget is
skipped saying so; a child that runs past its timeout is stopped, and so is the running one
when the check is stopped (Ctrl-C, SIGTERM: ``run_child``), its temporary folder removed on
the way out.

The order puts first what a first GPU run must show (the tests, the launches), so a short
budget cuts the longest measurements.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import install_hint
from ...runtime.runs import files
from . import parse
from .child import PACKAGE_ROOT, Budget, ChildResult, run_child

MODES = (("before", "0"), ("after", "1"))  # MT_CUDA_KERNELS: the array-API path, the kernels
BENCH_PRESETS = ("tiny", "small", "base", "base-64x64")
BENCH_SECONDS = {"tiny": 4.0, "small": 4.0, "base": 6.0, "base-64x64": 6.0}
TRAIN_TASKS = ("copy", "translate-en-es")
QUICK_SIZE = [
    "--model",
    "d_model=16",
    "--model",
    "h=2",
    "--model",
    "N=1",
    "--model",
    "d_ff=32",
    "--batch-size",
    "8",
    "--knob",
    "n_train=64",
    "--knob",
    "n_valid=4",
    "--knob",
    "n_test=4",
]
QUICK_KNOBS = {"copy": ["--knob", "max_len=6"], "translate-en-es": ["--knob", "n_merges=50"]}


@dataclasses.dataclass
class Context:
    """What every step needs: the report's folder, the mode, the budget, the GPU."""

    out: Path
    quick: bool
    budget: Budget
    gpu: bool
    no_gpu: str  # why there is no GPU ("" when there is one)
    log: Callable[[str], None] = print
    tests_root: Path | None = dataclasses.field(default_factory=lambda: _tests_root())
    step: str = ""  # the step in progress ("step 6/7"), set by run_check
    doing: str = ""  # what runs in it ("train copy on cpu"): both for a stop's message

    def start(self, what: str) -> None:
        """Say ``gpucheck: WHAT ...`` and keep ``what`` as the run in progress."""
        self.doing = what
        self.log(f"gpucheck: {what} ...")


def _tests_root() -> Path | None:
    """The repository root when this package sits in a clone (tests/ and pyproject.toml
    beside it), else None (an installed copy)."""
    clone = (PACKAGE_ROOT / "tests").is_dir() and (PACKAGE_ROOT / "pyproject.toml").is_file()
    return PACKAGE_ROOT if clone else None


def skipped(reason: str, **more: Any) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason, **more}


def _no_time(ctx: Context) -> str:
    return (
        f"did not fit in the time budget (--budget-s {ctx.budget.total:.0f}; "
        f"{ctx.budget.left():.0f} s were left)"
    )


def _child_failed(r: ChildResult, timeout: float) -> dict[str, Any]:
    if r.timed_out:
        return skipped(f"stopped at its timeout, {timeout:.0f} s (the time budget)")
    return {"status": "failed", "reason": f"exit status {r.rc}: {r.tail()}"}


def _pytest(
    ctx: Context,
    args: list[str],
    wanted: float,
    env: dict[str, str] | None = None,
    log: str | None = None,
) -> dict[str, Any]:
    """Run pytest in the repository with ``args`` (and ``env``); its counts and failures,
    its whole output kept in ``ctx.out/log`` when ``log`` is given."""
    if ctx.tests_root is None:
        return skipped(
            "no tests/ folder beside the package (an installed copy): run the "
            "check from a clone of the repository"
        )
    if importlib.util.find_spec("pytest") is None:
        return skipped(f"pytest is not installed ({install_hint('dev')})")
    timeout = ctx.budget.grant(wanted, least=20)
    if timeout is None:
        return skipped(_no_time(ctx))
    r = run_child(
        ["-m", "pytest", "-p", "no:cacheprovider", *args],
        timeout,
        env=env,
        cwd=ctx.tests_root,
        interrupt_first=True,  # SIGINT at the timeout: pytest still prints its summary
    )
    out: dict[str, Any] = {
        "counts": parse.pytest_counts(r.stdout),
        "failures": parse.pytest_failures(r.stdout),
        "seconds": r.seconds,
        "command": " ".join(f"{k}={v}" for k, v in (env or {}).items())
        + (" " if env else "")
        + "python -m pytest "
        + " ".join(args),
    }
    if log is not None:
        files.write_text(ctx.out, log, r.stdout + r.stderr)
        out["log"] = log
    if r.timed_out:
        return _child_failed(r, timeout) | out
    if r.rc == 0:
        return {"status": "ok", "reason": None, **out}
    return {"status": "failed", "reason": f"pytest exit status {r.rc}: {r.tail(2)}", **out}


def gpu_test_args() -> list[str]:
    """pytest's arguments for the GPU tests: ``-m gpu``, verbose (every test's outcome in
    the log), short tracebacks, at most 60 failures (a sticky CUDA error poisons a
    process); ``-n 8 --dist loadfile`` (fewer on fewer cores) where pytest-xdist is installed and
    ``--timeout 120`` where pytest-timeout is (a hung CUDA call ends its test, not the run)."""
    args = ["tests", "-m", "gpu", "-v", "-rfE", "--tb=short", "--maxfail=60"]
    if importlib.util.find_spec("xdist") is not None:
        n = min(8, os.cpu_count() or 1)
        if n > 1:
            args += ["-n", str(n), "--dist", "loadfile"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        args += ["--timeout=120", "--timeout-method=thread"]
    return args


def cuda_tests(ctx: Context) -> dict[str, Any]:
    """Step 1: the GPU tests (``-m gpu``), with the fused kernels off, then on; each run's
    log in ``tests-k0.log`` / ``tests-k1.log``."""
    if not ctx.gpu:
        return skipped(f"no GPU: {ctx.no_gpu}")
    runs: dict[str, dict[str, Any]] = {}
    for (mode, flag), wanted in zip(MODES, (60, 45) if ctx.quick else (150, 100), strict=True):
        ctx.start(f"GPU tests, {mode} (MT_CUDA_KERNELS={flag})")
        env = {"MT_CUDA_KERNELS": flag}
        runs[mode] = _pytest(ctx, gpu_test_args(), wanted, env=env, log=f"tests-k{flag}.log")
    return {**_overall(runs), "runs": runs}


REPLAY_TEST = "tests/fast/test_cuda_graph_replay.py"  # issue 49: capture and replay vs eager


def graph_replay(ctx: Context) -> dict[str, Any]:
    """Step 2: the capture-and-replay test on the GPU (``REPLAY_TEST -m gpu``, the fused
    kernels on, which a capture needs): a Trainer replaying CUDA graphs against an eager one
    fed the same padded batches, losses and weights bit for bit. "skipped" (not "ok") when
    pytest ran but the test skipped itself; its log in ``graph-replay.log``."""
    if not ctx.gpu:
        return skipped(f"no GPU: {ctx.no_gpu}")
    ctx.start("capture and replay against eager steps (MT_CUDA_KERNELS=1)")
    args = [REPLAY_TEST, "-m", "gpu", "-v", "-rfEs", "--tb=short"]
    env = {"MT_CUDA_KERNELS": "1"}
    r = _pytest(ctx, args, wanted=60 if ctx.quick else 120, env=env, log="graph-replay.log")
    if r["status"] == "ok" and not r.get("counts", {}).get("passed"):
        counts = ", ".join(f"{n} {w}" for w, n in r.get("counts", {}).items()) or "nothing ran"
        return r | {"status": "skipped", "reason": f"the test did not run on the GPU ({counts})"}
    return r


def cpu_budget(ctx: Context) -> dict[str, Any]:
    """Step 7: the CPU call-budget test (tests/test_callcount.py)."""
    if ctx.quick:
        return skipped("--quick")
    return _pytest(ctx, ["-q", "tests/test_callcount.py"], wanted=90)


def bench(ctx: Context) -> dict[str, Any]:
    """Step 2: the step benchmark against PyTorch, before and after, interleaved; the
    decoding figures of the small runs are kept for step 4 (``"decode"``)."""
    if not ctx.gpu:
        return skipped(f"no GPU: {ctx.no_gpu}")
    folder = ctx.out / "bench"
    folder.mkdir()
    runs: dict[str, dict[str, Any]] = {}
    decode: dict[str, Any] = {}
    for preset in BENCH_PRESETS[:1] if ctx.quick else BENCH_PRESETS:
        seconds = 1.0 if ctx.quick else BENCH_SECONDS[preset]
        for mode, flag in MODES:
            key = f"{preset}/{mode}"
            timeout = ctx.budget.grant(wanted=150, least=20)
            if timeout is None:
                runs[key] = skipped(_no_time(ctx))
                continue
            ctx.start(f"bench {preset}, {mode} (MT_CUDA_KERNELS={flag})")
            path = folder / f"{preset}-{mode}.json"
            args = [
                "-m",
                "minitransformer.tools.bench",
                "--device",
                "cuda",
                "--compare",
                "torch-graph",
                "--gpu-only",
                "--preset",
                preset,
                "--seconds",
                str(seconds),
                "--json",
                str(path),
            ]
            r = run_child(args, timeout, env={"MT_CUDA_KERNELS": flag})
            files.write_text(ctx.out, f"bench/{preset}-{mode}.log", r.stdout + r.stderr)
            if r.rc != 0 or not path.is_file():
                runs[key] = _child_failed(r, timeout) | {"seconds": r.seconds}
                continue
            results = json.loads(path.read_text(encoding="utf-8"))
            runs[key] = {
                "status": "ok",
                "reason": None,
                "seconds": r.seconds,
                **parse.bench_figures(results, preset),
            }
            if (found := parse.decode_figures(results)) is not None:
                decode[mode] = found
    return {**_overall(runs), "runs": runs, "decode": decode}


def decode(ctx: Context, bench_result: dict[str, Any]) -> dict[str, Any]:
    """Step 4: cached vs recomputing greedy decoding, from the benchmark's small runs."""
    if not ctx.gpu:
        return skipped(f"no GPU: {ctx.no_gpu}")
    found = bench_result.get("decode") or {}
    if not found:
        why = "--quick (the benchmark ran tiny only)" if ctx.quick else "it did not run"
        return skipped(f"measured by the benchmark's small runs, and {why}")
    return {"status": "ok", "reason": None, "modes": found}


def train(ctx: Context) -> dict[str, Any]:
    """Step 3: tokens/s of short training runs, on the CPU and on cuda (before, after)."""
    sides = [("cpu", "cpu", None)]
    if ctx.gpu:
        sides += [(f"cuda/{mode}", "cuda", flag) for mode, flag in MODES]
    steps, every = ("4", "2") if ctx.quick else ("60", "20")
    runs: dict[str, dict[str, Any]] = {}
    for task in TRAIN_TASKS:
        for side, device, flag in sides:
            key = f"{task}/{side}"
            timeout = ctx.budget.grant(wanted=120, least=15)
            if timeout is None:
                runs[key] = skipped(_no_time(ctx))
                continue
            ctx.start(f"train {task} on {side}")
            with tempfile.TemporaryDirectory(dir=ctx.out, prefix=f"train-{task}-") as tmp:
                args = [
                    "-m",
                    "minitransformer",
                    "train",
                    task,
                    "--device",
                    device,
                    "--steps",
                    steps,
                    "--log-every",
                    every,
                    "--eval-every",
                    "1000000",
                    "--checkpoint-every",
                    "1000000",
                    "--eval-samples",
                    "2",
                    "--final-eval-samples",
                    "2",
                    "--no-progress",
                    "--no-plots",
                    "--out",
                    str(Path(tmp) / "run"),
                ]
                if ctx.quick:
                    args += QUICK_SIZE + QUICK_KNOBS[task]
                env = {"MT_CUDA_KERNELS": flag} if flag is not None else None
                r = run_child(args, timeout, env=env)
                figures = parse.train_tokens_per_s(Path(tmp) / "run" / "metrics.jsonl")
            if r.rc != 0 or figures["tokens_per_s"] is None:
                runs[key] = _child_failed(r, timeout) | {"seconds": r.seconds}
            else:
                runs[key] = {"status": "ok", "reason": None, "seconds": r.seconds, **figures}
    result = {**_overall(runs), "runs": runs, "steps": int(steps)}
    if not ctx.gpu:
        result["cuda_skipped"] = f"no GPU: {ctx.no_gpu}"
    return result


def callcount(ctx: Context) -> dict[str, Any]:
    """Step 5: the CuPy calls of one tiny training step, before and after."""
    if not ctx.gpu:
        return skipped(f"no GPU: {ctx.no_gpu}")
    runs: dict[str, dict[str, Any]] = {}
    for mode, flag in MODES:
        timeout = ctx.budget.grant(wanted=90, least=10)
        if timeout is None:
            runs[mode] = skipped(_no_time(ctx))
            continue
        ctx.start(f"callcount, {mode} (MT_CUDA_KERNELS={flag})")
        args = ["-m", "minitransformer.tools.callcount", "--device", "cuda:0"]
        r = run_child(args, timeout, env={"MT_CUDA_KERNELS": flag})
        found = parse.callcount_figures(r.stdout) if r.rc == 0 else None
        if found is None:
            runs[mode] = (
                _child_failed(r, timeout)
                if r.rc != 0
                else skipped("callcount printed no count of CuPy calls: " + r.tail(2))
            )
            runs[mode] = runs[mode] | {"seconds": r.seconds}
        else:
            runs[mode] = {"status": "ok", "reason": None, "seconds": r.seconds, **found}
    return {**_overall(runs), "runs": runs}


def _overall(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A step's status from its runs': failed if one failed, ok if one ran, else skipped."""
    statuses = {r["status"] for r in runs.values()}
    seconds = sum(r.get("seconds", 0.0) for r in runs.values())
    if "failed" in statuses:
        bad = [k for k, r in runs.items() if r["status"] == "failed"]
        return {"status": "failed", "reason": "failed: " + ", ".join(bad), "seconds": seconds}
    if "ok" in statuses:
        part = [k for k, r in runs.items() if r["status"] == "skipped"]
        why = ("skipped: " + ", ".join(part)) if part else None
        return {"status": "ok", "reason": why, "seconds": seconds}
    reasons = sorted({r["reason"] for r in runs.values()})
    return {"status": "skipped", "reason": "; ".join(reasons) or "nothing ran", "seconds": seconds}
