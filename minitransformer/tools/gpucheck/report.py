"""The GPU check's result as markdown (``gpucheck.md``): the machine, the targets with
pass/fail, each step's figures, and every step or run that was skipped, with why.

``render(result)`` is a pure function of the result dict that ``gpucheck.json`` holds.
"""

from __future__ import annotations

from typing import Any

TITLES = {
    "cuda_tests": "1. the GPU tests (pytest -m gpu), kernels off and on",
    "graph_replay": "2. a step captured as a CUDA graph and replayed, against eager, bit for bit",
    "callcount": "3. kernel launches and CuPy calls of one tiny training step",
    "bench": "4. bench --device cuda --compare torch-graph (before / after)",
    "decode": "5. greedy decoding at small, 64 tokens: cached vs recomputing",
    "train": "6. train tokens/s, cuda vs this machine's CPU",
    "cpu_budget": "7. the CPU call budget (tests/test_callcount.py)",
}
MACHINE = (
    ("gpu", "GPU"),
    ("gpu_memory_gib", "GPU memory (GiB)"),
    ("compute_capability", "compute capability"),
    ("driver", "NVIDIA driver"),
    ("driver_cuda", "CUDA (driver)"),
    ("runtime_cuda", "CUDA (runtime)"),
    ("cupy", "CuPy"),
    ("torch", "PyTorch"),
    ("numpy", "NumPy"),
    ("python", "Python"),
    ("cpu", "CPU"),
    ("cpus", "CPUs"),
    ("platform", "platform"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows] + [""]


def _bench(step: dict[str, Any]) -> list[str]:
    rows = []
    for key, r in step.get("runs", {}).items():
        if r["status"] != "ok":
            rows.append([key, r["status"], *[None] * 7, r.get("reason")])
            continue
        eager, graph = r.get("ratio_ours_over_torch"), r.get("ratio_ours_over_torch_graph")
        ours_graph = r.get("ratio_ours_graph_over_torch")
        note = "; ".join(
            r.get("warnings", [])
            + [r[k] for k in ("compare_skipped", "torch_graph_skipped") if k in r]
        )
        rows.append(
            [
                key,
                "ok",
                r.get("ours_ms"),
                r.get("torch_ms"),
                r.get("torch_graph_ms"),
                None if eager is None else f"{eager:.2f}x",
                None if graph is None else f"{graph:.2f}x",
                r.get("ours_graph_ms"),
                None if ours_graph is None else f"{ours_graph:.2f}x",
                note or None,
            ]
        )
    head = [
        "preset / mode",
        "status",
        "ours ms/step",
        "PyTorch eager ms",
        "PyTorch graph ms",
        "ours / eager",
        "ours / graph",
        "ours as one graph ms (--cuda-graph)",
        "ours as one graph / eager",
        "notes",
    ]
    return _table(head, rows)


def _train(step: dict[str, Any]) -> list[str]:
    rows = [
        [key, r["status"], r.get("tokens_per_s"), r.get("reason")]
        for key, r in step.get("runs", {}).items()
    ]
    lines = _table(["task / device", "status", "tokens/s", "notes"], rows)
    if "cuda_skipped" in step:
        lines.insert(0, f"cuda runs skipped: {step['cuda_skipped']}\n")
    return lines


def _decode(step: dict[str, Any]) -> list[str]:
    rows = [
        [
            mode,
            d.get("cached_tokens_per_s"),
            d.get("recompute_tokens_per_s"),
            f"{d['speedup']:.1f}x" if "speedup" in d else None,
        ]
        for mode, d in step.get("modes", {}).items()
    ]
    return _table(["mode", "cached tok/s", "recomputing tok/s", "speed-up"], rows) if rows else []


def _callcount(step: dict[str, Any]) -> list[str]:
    rows = [
        [
            mode,
            r["status"],
            r.get("kernel_launches"),
            r.get("copies"),
            r.get("cupy_calls_seen"),
            r.get("allocations"),
            r.get("reason"),
        ]
        for mode, r in step.get("runs", {}).items()
    ]
    head = ["mode", "status", "kernels run", "copies", "CuPy calls seen", "allocations", "notes"]
    notes = []
    for mode, r in step.get("runs", {}).items():
        if r.get("probe"):
            probe = ", ".join(f"{k} {v.get('kernels')}" for k, v in r["probe"].items())
            notes.append(f"- {mode}: the counter's probe (kernels for 10 calls each): {probe}")
        if r.get("call_us"):
            costs = ", ".join(f"{k} {v} µs" for k, v in r["call_us"].items())
            notes.append(f"- {mode}: host time per CuPy call: {costs}")
    return (_table(head, rows) if rows else []) + notes + ([""] if notes else [])


def _tests(step: dict[str, Any]) -> list[str]:
    lines = []
    for key, r in (step.get("runs") or {"": step}).items():
        if "counts" in r:
            counts = ", ".join(f"{n} {w}" for w, n in r["counts"].items()) or "no summary"
            log = f" (log: `{r['log']}`)" if r.get("log") else ""
            lines.append(f"- {key + ': ' if key else ''}`{r.get('command', 'pytest')}`: "
                         f"{counts}{log}")  # fmt: skip
        lines += [f"  - FAILED {name}" for name in r.get("failures", [])]
    return lines + [""] if lines else []


FIGURES = {
    "cuda_tests": _tests,
    "graph_replay": _tests,
    "bench": _bench,
    "train": _train,
    "decode": _decode,
    "callcount": _callcount,
    "cpu_budget": _tests,
}


def skipped_list(result: dict[str, Any]) -> list[str]:
    """Every step, and every run inside a step, that was skipped: "name: why"."""
    found = []
    for name, step in result["steps"].items():
        if step["status"] == "skipped":
            found.append(f"{name}: {step['reason']}")
            continue
        for key, run in step.get("runs", {}).items():
            if run.get("status") == "skipped":
                found.append(f"{name} {key}: {run['reason']}")
        if "cuda_skipped" in step:
            found.append(f"{name} on cuda: {step['cuda_skipped']}")
    return found


def render(result: dict[str, Any]) -> str:
    """``gpucheck.md`` from the result dict."""
    m = result["machine"]
    gpu = m.get("gpu") or "no GPU"
    lines = [
        f"# GPU check: {gpu}",
        "",
        f"`python -m minitransformer.tools.gpucheck {' '.join(result['argv'])}` on "
        f"{result['started']}, {result['wall_s']:.0f} s of a {result['budget_s']:.0f} s budget"
        + (" (--quick: small sizes, figures not quotable)" if result.get("quick") else "")
        + ". Before = MT_CUDA_KERNELS=0 (the array-API path), after = MT_CUDA_KERNELS=1 "
        "(the fused kernels). Both sides compute in plain FP32 (TF32 off in PyTorch).",
        "",
        "## Machine",
        "",
        *_table(["", ""], [[label, m[key]] for key, label in MACHINE if m.get(key) is not None]),
        "## Targets (issue 15)",
        "",
        *_table(
            ["target", "measured", "status"],
            [[t["target"], t["value"] or t.get("why"), t["status"]] for t in result["targets"]],
        ),
        "## Steps",
        "",
    ]
    for name, step in result["steps"].items():
        title = TITLES.get(name, name)
        status = step["status"] + (f" ({step['seconds']:.0f} s)" if step.get("seconds") else "")
        lines += [f"### {title}: {status}", ""]
        if step.get("reason"):
            lines += [step["reason"], ""]
        lines += FIGURES.get(name, lambda s: [])(step)
    skipped = skipped_list(result)
    lines += ["## Skipped", ""] + ([f"- {s}" for s in skipped] or ["nothing"]) + [""]
    return "\n".join(lines)
