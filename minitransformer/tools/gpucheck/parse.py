"""Reading the figures out of what each child process left: pytest's summary line, a
training run's metrics log, the benchmark's JSON, the call counter's output.

Pure functions of text and dicts, so the tests can feed them made-up output.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from ...runtime.runs import read_metrics

_PYTEST_WORDS = ("passed", "failed", "skipped", "deselected", "xfailed", "xpassed", "errors")


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line ("3 passed, 1 failed, 2 deselected in 4s")."""
    counts: dict[str, int] = {}
    for line in reversed(output.strip().splitlines()):
        found = re.findall(
            r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?)", line
        )
        if found:
            for number, word in found:
                word = "errors" if word.startswith("error") else word
                counts[word] = counts.get(word, 0) + int(number)
            break
    return {w: counts[w] for w in _PYTEST_WORDS if w in counts}


def pytest_failures(output: str, most: int = 20) -> list[str]:
    """The ids of the tests pytest lists as FAILED or ERROR in its short summary."""
    found = [
        line.split(" ", 1)[1].split(" - ")[0]
        for line in output.splitlines()
        if line.startswith(("FAILED ", "ERROR "))
    ]
    return found[:most]


def train_tokens_per_s(metrics: str | Path) -> dict[str, Any]:
    """Tokens/s of a short training run from its metrics log: the median of its log
    windows after the first (the first holds the start-up: memory pools, kernel builds),
    or the only one. ``{"tokens_per_s": None}`` when the log has no training record."""
    records, _ = read_metrics(metrics)
    windows = [
        r["tokens_per_s"]
        for r in records
        if r.get("split") == "train" and isinstance(r.get("tokens_per_s"), float)
    ]
    timed = windows[1:] or windows
    return {
        "tokens_per_s": statistics.median(timed) if timed else None,
        "windows_tokens_per_s": windows,
        "first_window_left_out": len(windows) > 1,
    }


def bench_figures(results: dict[str, Any], preset: str) -> dict[str, Any]:
    """One preset's figures from the benchmark's JSON (``bench --json``): ms per step of
    each implementation, the ratios with their ranges over rounds, the warnings."""
    r = results["presets"][preset]
    out: dict[str, Any] = {"rounds": r.get("rounds"), "warnings": r.get("warnings", [])}
    for impl in ("ours", "torch", "torch_graph", "ours_graph"):
        if impl in r:
            out[f"{impl}_ms"] = r[impl]["ms_median"]
            out[f"{impl}_tokens_per_s"] = r[impl]["tokens_per_s"]
    for ratio in ("ratio_ours_over_torch", "ratio_ours_over_torch_graph",
                  "ratio_ours_graph_over_torch", "ratio_ours_graph_over_torch_graph"):  # fmt: skip
        if ratio in r:
            out[ratio] = r[ratio]
            out[ratio + "_range"] = r[ratio + "_range"]
    for key in ("compare_skipped", "torch_graph_skipped"):
        if key in r:
            out[key] = r[key]
    return out


def decode_figures(results: dict[str, Any]) -> dict[str, Any] | None:
    """The decoding figures of a benchmark run at small (None when it has none)."""
    d = results.get("decode")
    if not d:
        return None
    keys = (
        "preset",
        "length",
        "batch",
        "cached_tokens_per_s",
        "recompute_tokens_per_s",
        "speedup",
        "cached_ms_median",
        "recompute_ms_median",
    )
    return {k: d[k] for k in keys if k in d}


def callcount_figures(output: str) -> dict[str, Any] | None:
    """The launches of one tiny training step from ``python -m minitransformer.tools.callcount
    --device cuda:0``'s output: from its JSON object line, ``cupy_calls`` is the kernels the
    GPU ran (CUPTI's ``kernel_launches``; else the ``cupy_calls`` the profiler saw) with the
    other figures beside it; without a JSON line, the first number before "CuPy calls",
    "cupy calls" or "launches" in its text. None when neither is there."""
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                found = json.loads(line)
            except ValueError:
                continue
            if not isinstance(found, dict):
                continue
            for key in ("kernel_launches", "cupy_calls", "launches"):
                if isinstance(found.get(key), int):
                    more = {k: found.get(k) for k in _CALLCOUNT_MORE if k in found}
                    if "cupy_calls" in more:
                        more["cupy_calls_seen"] = more.pop("cupy_calls")
                    return {"cupy_calls": found[key], "source": f"JSON {key!r}", **more}
    m = re.search(
        r"(\d[\d,]*)\s+(?:CuPy calls|cupy calls|launches|kernel launches)", output, flags=re.I
    )
    if m is None:
        return None
    return {"cupy_calls": int(m.group(1).replace(",", "")), "source": f"text {m.group(0)!r}"}


_CALLCOUNT_MORE = (
    "kernel_launches",
    "copies",
    "cupy_calls",
    "allocations",
    "driver_api_launches",
    "runtime_api_launches",
    "probe",
    "call_us",
)
