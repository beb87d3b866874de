"""How far a benchmark's numbers can be trusted: the spread of its rounds, the load other
processes put on the machine, and the warnings the report prints when either is too large.

A ratio such as "ours / PyTorch = 0.02x" says nothing about the code when one side's steps
were slowed down by other jobs: on a shared 2-core machine PyTorch's 2-thread step once took
2.4 s (23-29 ms alone), because each of its products waited for a descheduled thread. So the
report never gives a ratio without its range over rounds, and it warns when

- one implementation's rounds disagree: the slowest round's median step is more than
  ``SIDE_SPREAD_MAX`` times the fastest's (the machine changed under it);
- the per-round ratios span more than ``RATIO_SPREAD_MAX`` (max / min);
- other processes kept more than ``OTHER_LOAD_MAX`` cores busy before the timing or, on
  average, during one implementation's rounds;
- rounds disagree although the other processes' load looked low: the load meter did not
  see what slowed them (below), and the report says so instead of implying an idle machine;
- a step ran faster than the best GEMM ceiling probe: every probe was disturbed, and the
  step gets no percentage of that ceiling (:func:`ceiling_fraction`).

Other load is measured, not guessed from the load average: ``LoadMeter`` reads the machine's
busy CPU time (``host.busy_cpu_seconds``, from /proc/stat on Linux) over a window and
subtracts the CPU time of the benchmark's own processes (this one and the worker timed in
that window), so what remains is everyone else. Elsewhere it reports ``None`` and no load
warning is given. What it cannot see: a step on every core stalls when another process
takes one of them even for a moment (its threads wait for the descheduled one: a little
CPU time, a long stall), and the host of a virtual machine can take CPU time from it unseen.
So a low load proves nothing when the rounds disagree.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence

from ...backend.host import busy_cpu_seconds

SIDE_SPREAD_MAX = 1.5
RATIO_SPREAD_MAX = 2.0
OTHER_LOAD_MAX = 0.5  # cores

NAMES = {
    "ours": "minitransformer",
    "ours_reference": "ours, reference",
    "torch": "pytorch eager",
    "torch1": "pytorch 1 thread",
    "torch_graph": "pytorch cuda graph",
    "ours_cpu": "ours on the cpu",
}


class LoadMeter:
    """Cores kept busy by OTHER processes over a window: ``start()``, then
    ``stop(ours_cpu_s)`` with the CPU seconds the benchmark's worker spent in the window
    (0 when it runs in this process: this process's own CPU time is always subtracted)."""

    def __init__(self) -> None:
        self._start: tuple[float, float | None, float] | None = None

    def start(self) -> None:
        self._start = (time.perf_counter(), busy_cpu_seconds(), time.process_time())

    def stop(self, ours_cpu_s: float = 0.0) -> float | None:
        if self._start is None:
            raise RuntimeError("LoadMeter.stop() before start()")
        t0, busy0, own0 = self._start
        busy, wall = busy_cpu_seconds(), time.perf_counter() - t0
        if busy is None or busy0 is None or wall <= 0:
            return None
        own = time.process_time() - own0
        return max(0.0, (busy - busy0 - own - ours_cpu_s) / wall)


def other_load_now(seconds: float = 0.5) -> float | None:
    """Cores other processes keep busy over the next ``seconds`` (this process sleeps)."""
    meter = LoadMeter()
    meter.start()
    time.sleep(seconds)
    return meter.stop()


def spread(values: Sequence[float]) -> float:
    """max / min of positive values (1.0 for one value; inf if the smallest is 0)."""
    low = min(values)
    return max(values) / low if low > 0 else float("inf")


def ceiling_fraction(gflops: float, probes: Sequence[float]) -> float | None:
    """A step's GFLOP/s as a fraction of the best GEMM ceiling probe, or None when the step
    was faster than every probe (the probes were disturbed: no fraction over 1 is given)."""
    best = max(probes)
    return gflops / best if gflops <= best else None


def summarize(
    round_ms: dict[str, list[float]],
    ratios: dict[str, list[float]],
    load_before: float | None,
    load_during: dict[str, list[float | None]],
    ceiling: tuple[float, dict[str, float]] | None = None,
) -> dict:
    """The report's trust fields from per-round numbers (no timing happens here).

    ``round_ms``: each implementation's median step (ms) in each round; ``ratios``: each
    ratio's per-round values, e.g. ``{"ratio_ours_over_torch": [...]}``; ``load_before``:
    other processes' cores before the timing; ``load_during``: per implementation, other
    processes' cores during each of its rounds (None where unknown); ``ceiling``: (the best
    GEMM ceiling probe, each implementation's step GFLOP/s), where measured.

    Returns ``round_ms``, ``round_spread`` (max/min per implementation), for each ratio its
    median and ``<name>_range`` ([min, max]), ``other_load_cores`` (``before``; ``during``,
    the mean over each implementation's rounds; ``most``, the highest round's; ``rounds``,
    every round's; ``unexplained``, the spread of each implementation whose rounds disagree
    while the load looked low) and ``warnings`` (sentences; empty when the numbers hold).
    """
    out: dict = {"round_ms": round_ms, "round_spread": {}, "warnings": []}
    warnings: list[str] = out["warnings"]
    for impl, ms in round_ms.items():
        s = out["round_spread"][impl] = spread(ms)
        if s > SIDE_SPREAD_MAX:
            warnings.append(
                f"{NAMES.get(impl, impl)}'s rounds disagree: median step {min(ms):,.1f} to "
                f"{max(ms):,.1f} ms ({s:.1f}x, more than {SIDE_SPREAD_MAX}x): something "
                "besides the code changed its speed (other load, clock, memory)"
            )
    for name, values in ratios.items():
        out[name] = statistics.median(values)
        out[name + "_range"] = [min(values), max(values)]
    headline = ratios.get("ratio_ours_over_torch")
    if headline and spread(headline) > RATIO_SPREAD_MAX:
        warnings.append(
            f"the ratio ours/torch ranges {min(headline):.2f}-{max(headline):.2f}x over "
            f"rounds (more than {RATIO_SPREAD_MAX:.0f}x apart): its median is not a "
            "property of the code"
        )
    known = {impl: [v for v in values if v is not None] for impl, values in load_during.items()}
    during = {impl: statistics.mean(v) if v else None for impl, v in known.items()}
    most = {impl: max(v) if v else None for impl, v in known.items()}
    load = out["other_load_cores"] = {
        "before": load_before, "during": during, "most": most, "rounds": load_during,
    }  # fmt: skip
    busy = {impl: v for impl, v in during.items() if v is not None and v > OTHER_LOAD_MAX}
    if busy or (load_before is not None and load_before > OTHER_LOAD_MAX):
        where = ", ".join(f"{v:.1f} during {NAMES.get(i, i)}'s rounds" for i, v in busy.items())
        before = "" if load_before is None else f"{load_before:.1f} before the timing"
        warnings.append(
            f"other processes kept cores of this {os.cpu_count()}-CPU machine busy ("
            + "; ".join(x for x in (before, where) if x)
            + "): multi-threaded steps stall waiting for descheduled threads"
        )
    else:  # the load looked low: rounds that disagree all the same are not explained by it
        load["unexplained"] = {
            impl: s for impl, s in out["round_spread"].items() if s > SIDE_SPREAD_MAX
        }
        if load["unexplained"]:
            warnings.append(_unexplained(load))
    if ceiling is not None:
        best, gflops = ceiling
        above = {impl: g for impl, g in gflops.items() if g > best}
        if above:
            steps = ", ".join(f"{NAMES.get(i, i)} {g:.1f}" for i, g in above.items())
            warnings.append(
                f"the GEMM ceiling was measured on a disturbed machine: its best probe, "
                f"{best:.1f} GFLOP/s, is below the step rate of {steps} GFLOP/s, so no "
                "percentage of the ceiling is given for it"
            )
    if warnings:
        warnings.append(
            "rerun on an idle machine (and with more --seconds: more rounds, more steps in "
            "each) before quoting these numbers; the JSON output (--json) keeps every round"
        )
    return out


def _unexplained(load: dict) -> str:
    """The warning for rounds that disagree while other processes' load looked low."""
    seen = [v for v in (load["before"], *load["most"].values()) if v is not None]
    spreads = ", ".join(f"{NAMES.get(i, i)}'s {s:.1f}x" for i, s in load["unexplained"].items())
    if not seen:  # no /proc/stat: nothing was measured
        return (
            f"other processes' load cannot be measured here, and the rounds disagree "
            f"({spreads}): the machine was busy while they ran"
        )
    return (
        f"other processes' load looked low (at most {max(seen):.1f} cores), yet the rounds "
        f"disagree ({spreads}): the machine was busy all the same, in a way the load meter "
        "cannot see (a step on every core stalls when another process takes one even "
        "briefly; a virtual machine's host can take CPU unseen), so do not read the low "
        "load as an idle machine"
    )


def format_load(load: dict) -> str:
    """The line on other processes' load (``other_load_cores`` of a report): what it
    measures, the mean and highest round of each implementation, and, when rounds disagreed
    while it looked low, that it does not tell the machine was idle."""

    def cores(v: float | None) -> str:
        return "unknown" if v is None else f"{v:.1f}"

    most = load.get("most", {})  # older reports: the mean only
    during = "; ".join(
        f"{NAMES.get(i, i)} {cores(v)}"
        + (f" (at most {cores(most[i])})" if most.get(i) is not None else "")
        for i, v in load["during"].items()
    )
    line = (
        f"   other processes' load (busy CPU time in /proc/stat less the benchmark's own), in "
        f"cores of {os.cpu_count()}: {cores(load['before'])} before the timing; mean over each "
        f"implementation's rounds: {during}"
    )
    if load.get("unexplained"):
        seen = load["before"] is not None or any(v is not None for v in most.values())
        line += "; low, yet" if seen else "; and"
        line += " the rounds disagree: the machine was busy all the same (WARNING)"
    return line


def format_warnings(r: dict) -> list[str]:
    """The report's warning lines (none when the numbers hold)."""
    return [f"   WARNING: {w}" for w in r.get("warnings", [])]
