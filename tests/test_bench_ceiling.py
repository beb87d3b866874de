"""``bench`` never claims more than its GEMM ceiling allows, and its load line does not
imply an idle machine that was busy (issue 48, item 4; the first-hour review's F9).

On a busy machine ``bench`` printed ``128.4 GFLOP/s = 128% of ceiling`` (the ceiling was
probed once per round, every probe disturbed) and ``other processes' load ... 0.0-0.2``
while PyTorch's rounds differed 14.5x. Now the ceiling is probed before every timing and
the best probe counts; a step faster than it gets no percentage and a warning; and rounds
that disagree while the load looks low get a warning saying the load meter did not see
what slowed them.

The workers and the load meter are stand-ins: nothing here is timed.
"""

from __future__ import annotations

import pytest
from test_bench import _report

from minitransformer.tools import bench
from minitransformer.tools.bench import spread, steps
from minitransformer.tools.bench.presets import PRESETS, step_flops

# ------------------------------------------------------------------ the ceiling


@pytest.mark.parametrize(
    ("gflops", "probes", "expected"),
    [
        (50.0, [100.0], 0.5),
        (100.0, [100.0, 40.0], 1.0),
        (60.0, [40.0, 80.0, 20.0], 0.75),
        (100.1, [100.0], None),
        (128.4, [100.3, 97.0, 88.1], None),
        (1e-3, [5.0], 2e-4),
    ],
)
def test_the_fraction_of_the_ceiling_is_never_over_one(gflops, probes, expected):
    fraction = spread.ceiling_fraction(gflops, probes)
    assert fraction == (None if expected is None else pytest.approx(expected))


class _Worker:
    """A stand-in for a bench worker: each step takes ``STEP_S[impl]`` seconds, and the GEMM
    ceiling probes give ``PROBES`` in turn. ``calls`` records the order of the work."""

    STEP_S: dict[str, float] = {}
    PROBES: list[float] = []
    calls: list[str] = []

    def __init__(self, impl, preset, device):
        self.impl = impl

    def warmup(self, seconds):
        return {"steps": 2, "seconds": 0.1}

    def time(self, seconds):
        _Worker.calls.append(f"time {self.impl}")
        return {"times": [self.STEP_S[self.impl]] * 3, "loss": 1.0, "cpu_s": 0.0}

    def ceiling(self, seconds):
        _Worker.calls.append("probe")
        g = self.PROBES[sum(c == "probe" for c in _Worker.calls) - 1]
        return {"gflops": g, "gflops_threads": g, "gflops_1thread": g}

    def info(self):
        blas = {"blas": "openblas", "threads": 2, "source": "stand-in"}
        return {"peak_mb": 10.0, "memory_method": "stand-in", "threads": blas}


class _Meter:
    """A stand-in LoadMeter: other processes' cores in each timed window, in turn."""

    loads: list[float] = []

    def start(self):
        pass

    def stop(self, ours_cpu_s=0.0):
        return _Meter.loads.pop(0) if _Meter.loads else 0.0


def _run(monkeypatch, step_gflops, probes, loads=(), rounds=2):
    """``bench.run`` on the tiny preset with stand-in workers whose steps run at
    ``step_gflops`` (per implementation), the ceiling probes giving ``probes``."""
    preset = PRESETS["tiny"]
    flops = step_flops(preset.config(), preset.batch, preset.length, preset.length)
    _Worker.STEP_S = {impl: flops / (g * 1e9) for impl, g in step_gflops.items()}
    _Worker.PROBES, _Worker.calls, _Meter.loads = list(probes), [], list(loads)
    monkeypatch.setattr(steps, "_Remote", _Worker)
    monkeypatch.setattr(steps, "torch_available", lambda: True)
    monkeypatch.setattr(steps, "LoadMeter", _Meter)
    monkeypatch.setattr(steps, "other_load_now", lambda seconds=0.5: 0.0)
    return bench.run("tiny", seconds=1.0, compare="torch", warmup=0.0, rounds=rounds)


IMPLS = ["ours", "ours-ref", "torch", "torch1"]


def test_the_ceiling_is_probed_before_every_timing(monkeypatch):
    r = _run(monkeypatch, dict.fromkeys(IMPLS, 10.0), [50.0] * 8)
    timings = [f"time {impl}" for impl in IMPLS]
    assert _Worker.calls == [x for _ in range(2) for impl in timings for x in ("probe", impl)]
    assert r["gemm_ceiling_probes"] == 8
    assert "GEMM ceiling (float32 1024^3, 8 probes between the timings)" in bench.format_report(r)


@pytest.mark.parametrize(
    ("probes", "faster"),
    [
        ([100.0, 90.0, 80.0, 97.0, 88.0, 60.0, 99.0, 95.0], 128.4),  # the review's case
        ([30.0] * 8, 30.5),
        ([5.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 7.0),
    ],
)
def test_a_step_above_every_probe_gets_no_percentage_and_a_warning(monkeypatch, probes, faster):
    best = max(probes)
    speeds = {"ours": faster, "ours-ref": best / 2, "torch": best / 4, "torch1": best / 8}
    r = _run(monkeypatch, speeds, probes)
    assert r["gemm_ceiling_gflops"] == best
    assert r["ours"]["fraction_of_ceiling"] is None
    assert r["ours_reference"]["fraction_of_ceiling"] == pytest.approx(0.5)
    text = bench.format_report(r)
    assert "(above the disturbed ceiling: no %)" in text
    percentages = [int(w[:-1]) for w in text.split() if w.endswith("%") and w[:-1].isdigit()]
    assert percentages and max(percentages) <= 100, text
    warning = [w for w in r["warnings"] if "GEMM ceiling was measured on a disturbed" in w]
    assert warning and f"its best probe, {best:.1f} GFLOP/s" in warning[0]
    assert f"minitransformer {faster:.1f} GFLOP/s" in warning[0]
    assert "rerun on an idle machine" in r["warnings"][-1]  # the advice comes last


def test_a_quiet_probe_keeps_the_percentages_and_adds_no_warning(monkeypatch):
    probes = [40.0, 41.0, 100.0, 39.0, 40.0, 42.0, 40.0, 41.0]  # one undisturbed moment
    r = _run(monkeypatch, {"ours": 60.0, "ours-ref": 50.0, "torch": 70.0, "torch1": 30.0}, probes)
    assert r["ours"]["fraction_of_ceiling"] == pytest.approx(0.6)
    assert not any("ceiling" in w for w in r["warnings"])
    assert "60.0 GFLOP/s = 60% of ceiling" in bench.format_report(r)


# ------------------------------------------------------------------ the load line


def _trust(torch_ms, load_before, torch_load, ours_load=0.0):
    ours_ms = [40.0] * len(torch_ms)
    ratios = {"ratio_ours_over_torch": [a / b for a, b in zip(ours_ms, torch_ms, strict=True)]}
    during = {"ours": [ours_load] * len(ours_ms), "torch": list(torch_load)}
    return spread.summarize({"ours": ours_ms, "torch": list(torch_ms)}, ratios, load_before, during)


@pytest.mark.parametrize("torch_ms", [[1149.0, 16674.0], [25.0, 2400.0, 27.0], [30.0, 48.0]])
@pytest.mark.parametrize(("before", "torch_load"), [(0.0, [0.0, 0.2]), (0.2, [0.5, 0.5])])
def test_rounds_that_disagree_under_a_low_load_say_the_machine_was_busy(
    torch_ms, before, torch_load
):
    torch_load = (torch_load * 2)[: len(torch_ms)]
    t = _trust(torch_ms, before, torch_load)
    most = max(before, *torch_load)
    side = max(torch_ms) / min(torch_ms)
    [unexplained] = [w for w in t["warnings"] if "looked low" in w]
    assert f"looked low (at most {most:.1f} cores)" in unexplained
    assert f"pytorch eager's {side:.1f}x" in unexplained and "idle machine" in unexplained
    assert t["other_load_cores"]["unexplained"] == {"torch": pytest.approx(side)}
    assert t["other_load_cores"]["most"]["torch"] == max(torch_load)
    line = spread.format_load(t["other_load_cores"])
    assert "busy CPU time in /proc/stat less the benchmark's own" in line
    mean = sum(torch_load) / len(torch_load)
    assert f"pytorch eager {mean:.1f} (at most {max(torch_load):.1f})" in line
    assert line.endswith(
        "low, yet the rounds disagree: the machine was busy all the same (WARNING)"
    )


def test_unmeasurable_load_with_disagreeing_rounds_says_so():
    t = _trust([25.0, 2400.0], None, [None, None], ours_load=None)
    [unexplained] = [w for w in t["warnings"] if "the rounds disagree (" in w]
    assert unexplained.startswith("other processes' load cannot be measured here, and the ")
    assert "pytorch eager's 96.0x" in unexplained and "looked low" not in unexplained
    line = spread.format_load(t["other_load_cores"])
    assert "unknown before the timing" in line
    assert line.endswith("; and the rounds disagree: the machine was busy all the same (WARNING)")


@pytest.mark.parametrize(("torch_ms", "torch_load"), [([40.0, 41.0], [0.0, 0.2]),
                                                      ([25.0, 2400.0], [1.8, 1.9])])  # fmt: skip
def test_steady_rounds_or_a_seen_load_give_no_unexplained_warning(torch_ms, torch_load):
    t = _trust(torch_ms, 0.0, torch_load)
    assert not any("looked low" in w for w in t["warnings"])
    assert "yet the rounds disagree" not in spread.format_load(t["other_load_cores"])


def test_an_older_report_without_the_new_fields_still_prints():
    r = _report([40.0, 41.0], [30.0, 31.0])
    del r["other_load_cores"]["most"], r["other_load_cores"]["unexplained"]
    text = bench.format_report(r)
    assert "GEMM ceiling (float32 1024^3, between rounds)" in text
    assert "mean over each implementation's rounds: minitransformer 0.0; pytorch eager 0.0" in text
