"""The targets of issue 15, judged from a GPU check's results: each is "pass", "fail",
"not measured" (with why) or "reported" (a figure with no threshold, such as the floor).

The figures judged are the "after" ones (MT_CUDA_KERNELS=1, what would be switched on);
the "before" ones are given beside them.
"""

from __future__ import annotations

from typing import Any

RATIO_MAX, RATIO_STRETCH = 1.0, 0.7  # ours / PyTorch eager, time per step
DECODE_MIN = 3.0  # cached / recomputing greedy tokens/s
LAUNCHES_MAX = 400  # kernels the GPU runs per tiny training step (CUPTI)


def _run(step: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The run ``key`` of a step when it measured something, else None."""
    r = step.get("runs", {}).get(key)
    return r if r is not None and r.get("status") == "ok" else None


def _why(step: dict[str, Any], key: str | None = None) -> str:
    r = step.get("runs", {}).get(key) if key else None
    return (r or step).get("reason") or "not run"


def _row(target: str, value: str, status: str, why: str | None = None) -> dict[str, Any]:
    return {"target": target, "value": value, "status": status, "why": why}


def _missing(target: str, why: str) -> dict[str, Any]:
    """A target not measured; "no GPU: <the long reason>" is cut to "no GPU" (the report's
    Skipped section gives the whole reason once per step)."""
    return _row(target, "", "not measured", "no GPU" if why.startswith("no GPU") else why)


def _ratio_rows(bench: dict[str, Any]) -> list[dict[str, Any]]:
    rows, after = [], {}
    for preset in ("tiny", "small", "base"):
        target = f"ours / PyTorch eager ≤ {RATIO_MAX:.1f} at {preset}"
        a, b = _run(bench, f"{preset}/after"), _run(bench, f"{preset}/before")
        if a is None or "ratio_ours_over_torch" not in a:
            rows.append(_missing(target, _why(bench, f"{preset}/after")))
            continue
        ratio = after[preset] = a["ratio_ours_over_torch"]
        low, high = a["ratio_ours_over_torch_range"]
        value = f"{ratio:.2f}x (rounds {low:.2f}-{high:.2f})"
        if b is not None and "ratio_ours_over_torch" in b:
            value += f"; before {b['ratio_ours_over_torch']:.2f}x"
        rows.append(_row(target, value, "pass" if ratio <= RATIO_MAX else "fail"))
    stretch = f"stretch: ours / PyTorch eager ≤ {RATIO_STRETCH:.1f} at tiny, small and base"
    if len(after) == 3:
        value = ", ".join(f"{p} {r:.2f}x" for p, r in after.items())
        ok = all(r <= RATIO_STRETCH for r in after.values())
        rows.append(_row(stretch, value, "pass" if ok else "fail"))
    else:
        rows.append(_missing(stretch, "the ratio was not measured at every preset"))
    floor = [
        f"{p} {r['ratio_ours_over_torch_graph']:.2f}x"
        for p in ("tiny", "small", "base", "base-64x64")
        if (r := _run(bench, f"{p}/after")) and "ratio_ours_over_torch_graph" in r
    ]
    name = "ours / PyTorch as one CUDA graph (the floor)"
    rows.append(_row(name, ", ".join(floor), "reported") if floor else _missing(name, _why(bench)))
    graphed = {
        p: r for p in ("tiny", "small", "base")
        if (r := _run(bench, f"{p}/after")) and "ratio_ours_graph_over_torch" in r
    }  # fmt: skip
    name = f"ours as one CUDA graph (--cuda-graph) / PyTorch eager ≤ {RATIO_STRETCH:.1f}"
    if len(graphed) == 3:
        value = ", ".join(
            f"{p} {r['ratio_ours_graph_over_torch']:.2f}x "
            f"(/PyTorch's graph {r['ratio_ours_graph_over_torch_graph']:.2f}x)"
            for p, r in graphed.items()
        )
        ok = all(r["ratio_ours_graph_over_torch"] <= RATIO_STRETCH for r in graphed.values())
        rows.append(_row(name, value, "pass" if ok else "fail"))
    else:
        rows.append(_missing(name, "our step was not captured at every preset"))
    return rows


def _train_rows(train: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for task in ("copy", "translate-en-es"):
        target = f"train {task}: more tokens/s on cuda than on this machine's CPU"
        cpu, gpu = _run(train, f"{task}/cpu"), _run(train, f"{task}/cuda/after")
        if cpu is None or gpu is None:
            why = train.get("cuda_skipped") or _why(train, f"{task}/cuda/after")
            rows.append(_missing(target, why if gpu is None else _why(train, f"{task}/cpu")))
            continue
        speedup = gpu["tokens_per_s"] / cpu["tokens_per_s"]
        value = f"{gpu['tokens_per_s']:,.0f} vs {cpu['tokens_per_s']:,.0f} tok/s = {speedup:.2f}x"
        if before := _run(train, f"{task}/cuda/before"):
            value += f"; before {before['tokens_per_s'] / cpu['tokens_per_s']:.2f}x"
        rows.append(_row(target, value, "pass" if speedup > 1.0 else "fail"))
    return rows


def _decode_row(decode: dict[str, Any]) -> dict[str, Any]:
    target = f"cached greedy decoding ≥ {DECODE_MIN:.0f}x recomputing at small, 64 tokens, cuda"
    modes = decode.get("modes", {})
    if "after" not in modes:
        return _missing(target, decode.get("reason") or "the run after did not decode")
    speedup = modes["after"]["speedup"]
    value = f"{speedup:.1f}x"
    if "before" in modes:
        value += f"; before {modes['before']['speedup']:.1f}x"
    return _row(target, value, "pass" if speedup >= DECODE_MIN else "fail")


def _launch_row(callcount: dict[str, Any]) -> dict[str, Any]:
    target = f"kernel launches per tiny training step ≤ {LAUNCHES_MAX} (CUPTI)"
    after, before = _run(callcount, "after"), _run(callcount, "before")
    if after is None:
        return _missing(target, _why(callcount, "after"))
    value = f"{after['cupy_calls']:,}"
    if before is not None:
        value += f"; before {before['cupy_calls']:,}"
    return _row(target, value, "pass" if after["cupy_calls"] <= LAUNCHES_MAX else "fail")


def _cpu_row(cpu_budget: dict[str, Any]) -> dict[str, Any]:
    target = "no regression on the CPU: the call-budget test (tests/test_callcount.py)"
    if cpu_budget.get("status") == "skipped" or not cpu_budget:
        return _missing(target, cpu_budget.get("reason") or "not run")
    passed = cpu_budget["status"] == "ok"
    counts = ", ".join(f"{n} {w}" for w, n in cpu_budget.get("counts", {}).items())
    return _row(target, counts, "pass" if passed else "fail")


def judge(steps: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target of the issue, judged from the steps' results (missing steps count as
    not run)."""
    return [
        *_ratio_rows(steps.get("bench", {})),
        *_train_rows(steps.get("train", {})),
        _decode_row(steps.get("decode", {})),
        _launch_row(steps.get("callcount", {})),
        _cpu_row(steps.get("cpu_budget", {})),
        _missing(
            "no regression on the CPU: bench --compare torch figures hold",
            "not part of this check: compare `minitransformer bench --compare torch` on the "
            "CPU with docs/speed.md's table",
        ),
    ]
