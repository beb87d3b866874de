"""The step benchmark: ``run(preset)`` times full training steps of ours, side by side with
PyTorch, and ``format_report`` prints the result.

What is timed: one training step = forward, label-smoothed cross-entropy, backward, Adam
update and ``loss.item()``, float32, on a fixed random batch (no padding). Steps are timed
one by one after a warm-up of a few *seconds* (not a step count: the first steps allocate,
page in and let BLAS spin up its threads). The report gives the median/min/max ms per
step, target tokens/s, the analytic matmul FLOPs of a step (forward x 3; elementwise ops
not counted) and the achieved GFLOP/s as a fraction of a float32 GEMM ceiling measured in
the same run: a probe before each implementation's timing in each round, the best probe
counting (a busy moment only lowers a probe). A step faster than that best was timed in a
quieter moment than any probe: the ceiling was disturbed, and no percentage is given
(spread.py warns).

Each implementation runs in its own subprocess (see worker.py), and ``run`` drives them in
alternating rounds, ours, torch, ours, torch, ..., so drift of a shared machine hits both
alike; the ratio is the median over rounds of (our median / torch's median) in the round,
always given with its range over rounds, and with warnings when rounds disagree or other
processes loaded the machine (see spread.py: a ratio from a busy machine is not quotable).
PyTorch runs twice: on its default threads, and on one thread (``torch.set_num_threads(1)``)
because on a busy shared machine its multi-threaded kernels stall waiting for descheduled
threads (measured here: 3.1 s per tiny step vs 69 ms on an idle machine), which would make
any ratio flatter us; the report gives ours over each, and over the faster of the two.

On the CPU ours runs twice too: with the fast tier on (``minitransformer``, as the CLI
runs) and with the reference ops (``ours, reference``, as the lessons run), so the report
says what the tier is worth. A GPU run also times our step on the CPU of the same machine,
interleaved, and reports train tokens/s on both: the GPU is worth switching to only if that
line says so.
"""

from __future__ import annotations

import importlib.util
import statistics
from typing import Any

from ...errors import install_hint
from .presets import PRESETS, step_flops
from .spread import (
    NAMES,
    LoadMeter,
    ceiling_fraction,
    format_load,
    format_warnings,
    other_load_now,
    summarize,
)
from .worker import _Remote, _Runner, close_workers

NO_TORCH = f"PyTorch is not installed ({install_hint('torch')})"


def torch_available() -> bool:
    """Whether PyTorch can be imported (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def run(
    preset: str = "tiny",
    seconds: float = 20.0,
    compare: str | None = None,
    device: str = "cpu",
    warmup: float | None = None,
    rounds: int | None = None,
    in_process: bool = False,
    log: Any = None,
    cpu_side: bool = True,
) -> dict[str, Any]:
    """Benchmark one preset; return the report as a dict (see ``format_report``).

    ``seconds`` is the timed budget of the preset (shared by the implementations);
    ``warmup`` defaults to min(3 s, seconds / 4) per implementation. ``compare="torch"``
    adds PyTorch, alternating with ours round by round; ``compare="torch-graph"`` (a GPU
    only) adds PyTorch eager and, as the floor, PyTorch's step replayed as one CUDA graph (a
    graph that cannot be captured is reported as skipped, with PyTorch's error).
    ``in_process=True`` runs ours in this process (for tests; PyTorch is then not compared).
    ``cpu_side=False``: on a GPU, do not also time our step on this machine's CPU.
    """
    if preset not in PRESETS:
        raise ValueError(f"bench: unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    p = PRESETS[preset]
    cfg = p.config()
    warmup = min(3.0, seconds / 4) if warmup is None else warmup
    # worker name -> (implementation, device); run round by round in this order
    plan = {"ours": ("ours", device)}
    if device == "cpu" and not in_process:  # both of ours: the fast tier and the reference
        plan["ours_reference"] = ("ours-ref", device)
    skipped = graph_skipped = None
    if compare == "torch-graph" and not device.startswith("cuda"):
        raise ValueError(
            "bench: --compare torch-graph needs --device cuda (CUDA graphs run on an NVIDIA "
            "GPU only); on the CPU use --compare torch"
        )
    if compare in ("torch", "torch-graph"):
        if in_process:
            skipped = "in-process run: PyTorch is compared only in subprocesses"
        elif not torch_available():
            skipped = NO_TORCH
        else:
            plan["torch"] = ("torch", device)
            if device == "cpu":  # one CPU thread is a fair rival on a busy machine only
                plan["torch1"] = ("torch1", device)
            if compare == "torch-graph":
                plan["torch_graph"] = ("torch-graph", device)
                plan["ours_graph"] = ("ours-graph", device)  # ours, replayed likewise
    elif compare is not None:
        raise ValueError(
            f"bench: --compare {compare!r} is not supported; use 'torch' or 'torch-graph'"
        )
    if device != "cpu" and cpu_side:  # is the device worth switching to? our step on the CPU
        plan["ours_cpu"] = ("ours", "cpu")
    say = log or (lambda msg: None)

    workers: dict[str, Any] = {}
    load_before = other_load_now(0.5)  # before any worker exists: the machine as we found it
    meter = LoadMeter()
    try:
        for name, (impl, dev) in plan.items():
            say(f"  starting {impl} on {dev} ({preset}) ...")
            try:
                workers[name] = (
                    _Runner(impl, preset, dev) if in_process else _Remote(impl, preset, dev)
                )
            except RuntimeError as err:
                if name not in ("torch_graph", "ours_graph"):
                    raise
                why = f"{impl}: {err}"  # the graphs are optional: say why one is missing
                graph_skipped = why if graph_skipped is None else f"{graph_skipped}; {why}"
                say(f"  {impl}: skipped: {err}")
        impls = list(workers)
        rounds = rounds or max(2, min(8, int(seconds / 1.5)))
        per_round = seconds / (rounds * len(impls))
        load_during: dict[str, list[float | None]] = {impl: [] for impl in impls}
        warm = {impl: w.warmup(seconds=warmup) for impl, w in workers.items()}
        say(f"  timing {rounds} rounds ({preset}) ...")
        probe_s = min(0.6, max(0.2, per_round / 2)) / len(impls)  # one probe per timing
        times: dict[str, list[list[float]]] = {impl: [] for impl in impls}
        ceilings, ceiling_detail, losses = [], [], {}
        for _ in range(rounds):
            for impl, w in workers.items():  # ours, torch, ours, torch, ...
                c = workers["ours"].ceiling(seconds=probe_s)  # the ceiling just before it
                ceilings.append(c["gflops"])
                ceiling_detail.append(c)
                meter.start()
                r = w.time(seconds=per_round)
                load_during[impl].append(meter.stop(0.0 if in_process else r["cpu_s"]))
                times[impl].append(r["times"])
                losses[impl] = r["loss"]
        infos = {impl: w.info() for impl, w in workers.items()}
    except BaseException:  # a stop (Ctrl-C, SIGTERM) or an error: no worker may outlive it
        close_workers(workers.values(), kill=True)
        raise
    close_workers(workers.values())

    flops = step_flops(cfg, p.batch, p.length, p.length)
    tokens = p.batch * p.length
    report: dict[str, Any] = {
        "preset": preset,
        "device": device,
        "config": {
            "vocab": p.vocab,
            "d_model": cfg.d_model,
            "h": cfg.h,
            "N": cfg.N,
            "d_ff": cfg.d_ff,
            "dropout": cfg.dropout,
            "length": p.length,
            "batch": p.batch,
            "label_smoothing": cfg.label_smoothing,
            "dtype": "float32",
        },
        "flops_per_step": flops,
        "tokens_per_step": tokens,
        "gemm_ceiling_gflops": max(ceilings),
        "gemm_ceiling_probes": len(ceilings),
        "gemm_ceiling_median_gflops": statistics.median(ceilings),
        "gemm_ceiling_threads_gflops": statistics.median(
            c["gflops_threads"] for c in ceiling_detail
        ),
        "gemm_ceiling_1thread_gflops": statistics.median(
            c["gflops_1thread"] for c in ceiling_detail
        ),
        "rounds": rounds,
        "memory_method": infos["ours"]["memory_method"]
        + (
            ": the worker process's peak resident memory from after its imports to the end"
            " of the timed steps (model, optimizer state, gradients, activations, BLAS buffers)"
            if not device.startswith("cuda")
            else ": what the steps made the allocator hold on the GPU"
        )
        + (" [in-process run]" if in_process else ""),
    }
    for impl in impls:
        flat = [t for r in times[impl] for t in r]
        med = statistics.median(flat)
        report[impl] = {
            "ms_median": 1e3 * med,
            "ms_min": 1e3 * min(flat),
            "ms_max": 1e3 * max(flat),
            "steps": len(flat),
            "warmup_steps": warm[impl]["steps"],
            "warmup_s": warm[impl]["seconds"],
            "tokens_per_s": tokens / med,
            "gflops": flops / med / 1e9,
            "peak_mb": infos[impl]["peak_mb"],
            "threads": infos[impl]["threads"],
            "final_loss": losses[impl],
            "device": plan[impl][1],
            "memory_method": infos[impl]["memory_method"],
        }
    for impl in impls:  # of the best probe (busy moments only lower one); None: above it
        report[impl]["fraction_of_ceiling"] = ceiling_fraction(report[impl]["gflops"], ceilings)
    round_ms = {impl: [1e3 * statistics.median(t) for t in times[impl]] for impl in impls}
    ratios: dict[str, list[float]] = {}
    if "torch" in impls:
        ours, torch_default = round_ms["ours"], round_ms["torch"]
        torch_one = round_ms.get("torch1", torch_default)
        ratios["ratio_ours_over_torch"] = [a / b for a, b in zip(ours, torch_default, strict=True)]
        if "torch1" in impls:
            ratios["ratio_ours_over_torch_1thread"] = [
                a / b for a, b in zip(ours, torch_one, strict=True)
            ]
        ratios["ratio_ours_over_best_torch"] = [
            a / min(b, c) for a, b, c in zip(ours, torch_default, torch_one, strict=True)
        ]
        if "torch_graph" in impls:
            ratios["ratio_ours_over_torch_graph"] = [
                a / b for a, b in zip(ours, round_ms["torch_graph"], strict=True)
            ]
            for name in ("torch", "torch_graph"):
                if "ours_graph" in impls:
                    ratios[f"ratio_ours_graph_over_{name}"] = [
                        a / b for a, b in zip(round_ms["ours_graph"], round_ms[name], strict=True)
                    ]
        report["memory_ratio_ours_over_torch"] = report["ours"]["peak_mb"] / max(
            report["torch"]["peak_mb"], 1e-9
        )
    if "ours_reference" in impls:
        ratios["ratio_ours_over_reference"] = [
            a / b for a, b in zip(round_ms["ours"], round_ms["ours_reference"], strict=True)
        ]
    gflops = {impl: report[impl]["gflops"] for impl in impls}
    report.update(summarize(round_ms, ratios, load_before, load_during, (max(ceilings), gflops)))
    if "torch" in impls:
        report["ratio_per_round"] = ratios["ratio_ours_over_torch"]
    if "ours_cpu" in impls:  # speed-up of the device over the CPU, round by round
        report["speedup_device_over_cpu"] = statistics.median(
            statistics.median(c) / statistics.median(d)
            for c, d in zip(times["ours_cpu"], times["ours"], strict=True)
        )
    if skipped:
        report["compare_skipped"] = skipped
    if graph_skipped:
        report["torch_graph_skipped"] = graph_skipped
    return report


# --------------------------------------------------------------------------- printing


def format_report(r: dict[str, Any]) -> str:
    """The result of ``run`` as the lines the ``bench`` command prints."""
    c = r["config"]
    lines = [
        f"== {r['preset']}  (vocab {c['vocab']}, d_model {c['d_model']}, h {c['h']}, "
        f"N {c['N']}, d_ff {c['d_ff']}, length {c['length']}, batch {c['batch']}, "
        f"dropout {c['dropout']}, label smoothing {c['label_smoothing']}, {c['dtype']}, "
        f"device {r['device']})",
        f"   analytic matmul FLOPs per step {r['flops_per_step'] / 1e9:.3f} GFLOP; "
        f"{r['tokens_per_step']} target tokens per step; {r['rounds']} alternating rounds",
        f"   GEMM ceiling (float32 1024^3, {_probes(r)}): best {r['gemm_ceiling_gflops']:.1f} "
        f"GFLOP/s, median {r['gemm_ceiling_median_gflops']:.1f} (medians: all BLAS threads "
        f"{r['gemm_ceiling_threads_gflops']:.1f}, one thread "
        f"{r['gemm_ceiling_1thread_gflops']:.1f}); % of ceiling is of the best",
    ]
    for impl, name in NAMES.items():
        if impl not in r:
            continue
        s = r[impl]
        lines.append(
            f"   {name:16s} {s['ms_median']:9.1f} ms/step (min {s['ms_min']:.1f}, max "
            f"{s['ms_max']:.1f}; {s['steps']} steps after {s['warmup_steps']} warm-up in "
            f"{s['warmup_s']:.1f} s)  {s['tokens_per_s']:,.0f} tok/s  "
            f"{s['gflops']:.1f} GFLOP/s {_of_ceiling(s['fraction_of_ceiling'])}  "
            f"peak +{s['peak_mb']:.0f} MiB"
            + (" of GPU memory" if s.get("device", "cpu").startswith("cuda") else "")
        )
        lines.append(f"   {'':16s} threads: {threads_text(s['threads'])}")
    if "ratio_ours_over_torch" in r:
        per = ", ".join(f"{x:.2f}" for x in r["ratio_per_round"])
        lines.append(
            f"   ratio ours/torch: {_ratio(r, 'ratio_ours_over_torch')} time per step, the "
            f"median of {len(r['ratio_per_round'])} rounds ({per}); peak memory "
            f"{r['memory_ratio_ours_over_torch']:.2f}x"
        )
        if "ratio_ours_over_torch_1thread" in r:
            lines.append(
                f"   ratio ours/torch on 1 thread: {_ratio(r, 'ratio_ours_over_torch_1thread')}; "
                "ours/(the faster torch in each round): "
                f"{_ratio(r, 'ratio_ours_over_best_torch')}"
            )
    if "ratio_ours_over_reference" in r:
        lines.append(
            "   ratio ours (fast tier, as the CLI runs)/ours (reference ops, as the lessons "
            f"run): {_ratio(r, 'ratio_ours_over_reference')}"
        )
    if "ratio_ours_over_torch_graph" in r:
        lines.append(
            "   ratio ours/(torch as one CUDA graph, the floor): "
            f"{_ratio(r, 'ratio_ours_over_torch_graph')}"
        )
    if "ratio_ours_graph_over_torch" in r:
        lines.append(
            f"   ours as one CUDA graph: {r['ours_graph']['ms_median']:.2f} ms; /torch eager "
            f"{_ratio(r, 'ratio_ours_graph_over_torch')}; /torch as one CUDA graph "
            f"{_ratio(r, 'ratio_ours_graph_over_torch_graph')}"
        )
    if "torch_graph_skipped" in r:
        lines.append(f"   torch-graph: skipped: {r['torch_graph_skipped']}")
    if "speedup_device_over_cpu" in r:
        lines.append(
            f"   train on {r['device']} vs cpu: {r['ours']['tokens_per_s']:,.0f} vs "
            f"{r['ours_cpu']['tokens_per_s']:,.0f} tok/s = {r['speedup_device_over_cpu']:.2f}x "
            f"({'worth switching' if r['speedup_device_over_cpu'] > 1 else 'the CPU is faster'})"
        )
    if "compare_skipped" in r:
        lines.append(f"   compare torch: skipped: {r['compare_skipped']}")
    if "other_load_cores" in r:
        lines.append(format_load(r["other_load_cores"]))
    return "\n".join(lines + format_warnings(r))


def _probes(r: dict[str, Any]) -> str:
    """How the ceiling was probed: "8 probes between the timings" (older reports: rounds)."""
    probes = r.get("gemm_ceiling_probes")
    return "between rounds" if probes is None else f"{probes} probes between the timings"


def _of_ceiling(fraction: float | None) -> str:
    """``= 45% of ceiling``, or what a step above the (disturbed) ceiling gets instead."""
    if fraction is None:
        return "(above the disturbed ceiling: no %)"
    return f"= {100 * fraction:.0f}% of ceiling"


def _ratio(r: dict[str, Any], name: str) -> str:
    """A ratio with its range over rounds: "1.05x (rounds 0.92-1.15x)"."""
    low, high = r[name + "_range"]
    return f"{r[name]:.2f}x (rounds {low:.2f}-{high:.2f}x)"


def threads_text(t: dict[str, Any]) -> str:
    """An implementation's threads and BLAS (its ``info()["threads"]``) in one phrase."""
    if "torch" in t:
        return f"torch {t['torch']}, {t['threads']} threads, {t['blas']}"
    text = f"{t.get('blas')}, {t.get('threads')} threads (via {t.get('source')})"
    if t.get("env"):
        text += ", env " + " ".join(f"{k}={v}" for k, v in t["env"].items())
    if t.get("compiled"):
        text += f"; compiled kernels: {t['compiled']}"
    return text
