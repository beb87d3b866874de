"""The GPU check (``python -m minitransformer.tools.gpucheck``) on the CPU: no GPU is exit 1
unless --allow-no-gpu; with it a --quick run writes valid JSON and markdown with every GPU
step skipped and why; an --out that holds anything is refused; bad flags exit 2; the targets
are judged right on a made-up full result; the parsers read the tools' output; a child past
its timeout is stopped (Ctrl-C, SIGTERM: test_gpucheck_signals.py). On a GPU: exact resume.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tiny_runs import KNOBS, SIZE

from minitransformer import backend
from minitransformer.errors import DeviceError
from minitransformer.runtime.runs import RunDirectoryError
from minitransformer.tools import bench
from minitransformer.tools.gpucheck import __main__ as cli
from minitransformer.tools.gpucheck import check, child, judge, machine, parse, render, steps

GPU_STEPS = ("cuda_tests", "graph_replay", "bench", "decode", "callcount")


def _strict_json(text: str) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def no_gpu(monkeypatch):
    """The check as it runs on a machine without a GPU (also where this one has one)."""
    monkeypatch.setattr(machine, "gpu_status", lambda: (False, "CuPy is not installed (test)"))


def test_quick_run_without_a_gpu_skips_every_gpu_step_and_writes_the_report(tmp_path, no_gpu):
    lines: list[str] = []
    t0 = time.perf_counter()
    result = check.run_check(
        tmp_path / "gc", quick=True, argv=["--quick"], log=lines.append, allow_no_gpu=True
    )
    assert time.perf_counter() - t0 < 60  # two tiny CPU training runs in child processes
    saved = _strict_json((tmp_path / "gc" / "gpucheck.json").read_text())
    assert saved["steps"].keys() == set(check.STEPS) and saved["gpu"] is False
    for name in GPU_STEPS:
        assert saved["steps"][name]["status"] == "skipped", name
        assert saved["steps"][name]["reason"] == "no GPU: CuPy is not installed (test)"
    train = saved["steps"]["train"]
    assert train["status"] == "ok" and set(train["runs"]) == {"copy/cpu", "translate-en-es/cpu"}
    assert all(r["tokens_per_s"] > 0 for r in train["runs"].values())
    assert train["cuda_skipped"].startswith("no GPU")
    assert {t["status"] for t in saved["targets"]} == {"not measured"}
    md = (tmp_path / "gc" / "gpucheck.md").read_text()
    assert md.startswith("# GPU check: no GPU") and "## Targets (issue 15)" in md
    for name in GPU_STEPS:
        assert f"- {name}: no GPU: CuPy is not installed (test)" in md
    assert any(line.startswith("gpucheck: skipped: bench: no GPU") for line in lines)
    assert result["wall_s"] == saved["wall_s"]
    assert not [p for p in (tmp_path / "gc").iterdir() if p.name.startswith("train-")]


def test_an_out_that_holds_anything_is_refused_and_left_as_it_was(tmp_path, monkeypatch, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep")
    monkeypatch.setattr(machine, "gpu_status", lambda: pytest.fail("asked before --out"))
    assert cli.main(["--out", str(full), "--quick"]) == 2
    err = capsys.readouterr().err
    assert "gpucheck: error: --out" in err and "is not empty" in err and f"{full}-2" in err
    assert [p.name for p in full.iterdir()] == ["mine.txt"]
    with pytest.raises(RunDirectoryError, match="is a file"):
        check.prepare_out(full / "mine.txt")
    assert check.prepare_out(tmp_path / "new" / "deeper").is_dir()  # new folders are made


def test_without_a_gpu_it_refuses_at_once_unless_allowed(tmp_path, no_gpu, capsys):
    """Exit 1 and one line naming the flag, before any step and before --out is made (or
    touched). With --allow-no-gpu: exit 0 and a report (see the --steps test)."""
    new = tmp_path / "new" / "gc"
    assert cli.main(["--out", str(new), "--quick"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and not (tmp_path / "new").exists()  # no step ran, nothing made
    assert captured.err == (
        "gpucheck: error: no GPU here (CuPy is not installed (test)): nothing on the GPU "
        "would be measured; run the check on a machine with a GPU, or pass --allow-no-gpu "
        "(run_check(..., allow_no_gpu=True) in Python) for a report of the CPU-side steps "
        "alone\n"
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(DeviceError, match=r"allow_no_gpu=True"):
        check.run_check(tmp_path / "empty", log=lambda m: None)
    assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--quick"], "--out"),
        (["--out", "x", "--budget-s", "-5"], "positive number of seconds"),
        (["--out", "x", "--budget-s", "soon"], "expected a number of seconds, got 'soon'"),
        (["--out", "x", "--bogus"], "unrecognized arguments: --bogus"),
        (["--out", "x", "--steps", "tests"], "unknown step tests: name one or more of cuda_tests"),
        (["--out", "x", "--steps", ","], "unknown step ','"),
    ],
)
def test_bad_flags_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2 and message in capsys.readouterr().err


def test_steps_runs_only_the_steps_named_and_reports_the_others_skipped(tmp_path, no_gpu):
    argv = ["--out", str(tmp_path / "gc"), "--quick", "--steps", "cpu_budget", "--allow-no-gpu"]
    assert cli.main(argv) == 0  # no GPU, but a CPU-only report was asked for
    saved = _strict_json((tmp_path / "gc" / "gpucheck.json").read_text())
    assert saved["gpu"] is False and (tmp_path / "gc" / "gpucheck.md").is_file()
    assert saved["steps"]["train"] == {
        "status": "skipped",
        "reason": "not asked for (--steps cpu_budget)",
        "seconds": saved["steps"]["train"]["seconds"],
    }
    assert saved["steps"]["cpu_budget"]["reason"] == "--quick"


def test_a_step_that_does_not_fit_in_the_budget_is_skipped_saying_so(tmp_path, no_gpu):
    ctx = steps.Context(tmp_path, True, child.Budget(0.0), False, "none", log=lambda m: None)
    r = steps.train(ctx)
    assert r["status"] == "skipped" and "did not fit in the time budget" in r["reason"]


def test_budget_grants_what_is_left_and_none_below_the_least():
    now = [0.0]
    b = child.Budget(100, clock=lambda: now[0])
    assert b.grant(30, least=10) == 30
    now[0] = 85.0
    assert b.grant(30, least=10) == pytest.approx(15) and b.grant(30, least=20) is None


def test_a_child_past_its_timeout_is_stopped():
    t0 = time.perf_counter()
    r = child.run_child(["-c", "import time; time.sleep(60)"], timeout=0.5)
    assert r.timed_out and time.perf_counter() - t0 < 15
    ok = child.run_child(["-c", "import minitransformer, sys; print(sys.argv)"], timeout=60)
    assert ok.rc == 0 and "['-c']" in ok.stdout


def _fake_child(args, timeout, env=None, cwd=None, interrupt_first=False):
    """What the tools would print and write on a GPU machine, made up (no child runs)."""
    kernels = (env or {}).get("MT_CUDA_KERNELS")
    if args[:2] == ["-m", "minitransformer.tools.bench"]:
        preset = args[args.index("--preset") + 1]
        ours = 10.0 if kernels == "1" else 20.0
        r = {
            "rounds": 2,
            "warnings": [],
            "ratio_ours_over_torch": ours / 12.5,
            "ratio_ours_over_torch_range": [0.7, 0.9],
            "ratio_ours_over_torch_graph": 2.0,
            "ratio_ours_over_torch_graph_range": [1.9, 2.1],
            **{
                i: {"ms_median": ms, "tokens_per_s": 1e3 / ms}
                for i, ms in (("ours", ours), ("torch", 12.5), ("torch_graph", 5.0))
            },
        }
        found = {"presets": {preset: r}}
        if preset == "small":
            found["decode"] = {"preset": "small", "length": 64, "speedup": 4.0 + int(kernels)}
        Path(args[args.index("--json") + 1]).write_text(json.dumps(found))
        return child.ChildResult(0, "bench out", "", 1.0)
    if args[:2] == ["-m", "minitransformer"]:  # train: the metrics log of its --out
        run = Path(args[args.index("--out") + 1])
        run.mkdir(parents=True)
        rate = 900.0 if "cpu" in args else 3000.0
        lines = [{"step": s, "split": "train", "tokens_per_s": rate} for s in (20, 40, 60)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        return child.ChildResult(0, "", "", 1.0)
    if args[:2] == ["-m", "minitransformer.tools.callcount"]:
        return child.ChildResult(0, f"{300 if kernels == '1' else 1300} CuPy calls", "", 1.0)
    if args[:2] == ["-m", "pytest"]:
        assert "gpu" in args or args[-1] == "tests/test_callcount.py", args
        return child.ChildResult(0, f"....\n4 passed, 9 deselected (k{kernels}) in 1s\n", "", 1)
    raise AssertionError(f"unexpected child {args}")


def test_with_a_gpu_every_step_reads_its_figures(tmp_path, monkeypatch):
    """The GPU steps' plumbing on made-up tool output: before/after interleaved, every
    preset, the decoding figures of the small runs, the targets judged."""
    calls = []
    monkeypatch.setattr(machine, "gpu_status", lambda: (True, ""))
    monkeypatch.setattr(machine, "machine_facts", lambda gpu: {"gpu": "Fake GPU"})
    monkeypatch.setattr(
        steps, "run_child", lambda args, *a, **k: calls.append(args) or _fake_child(args, *a, **k)
    )
    result = check.run_check(tmp_path / "gc", log=lambda m: None)
    bench_runs = [a[a.index("--preset") + 1] for a in calls if "minitransformer.tools.bench" in a]
    assert bench_runs == [p for p in steps.BENCH_PRESETS for _ in range(2)]
    s = result["steps"]
    assert {n: s[n]["status"] for n in check.STEPS} == dict.fromkeys(check.STEPS, "ok")
    assert s["bench"]["runs"]["base-64x64/after"]["ratio_ours_over_torch"] == 0.8
    assert s["decode"]["modes"]["after"]["speedup"] == 5.0
    assert s["callcount"]["runs"]["before"]["cupy_calls"] == 1300
    status = {t["target"]: t["status"] for t in result["targets"]}
    assert status["ours / PyTorch eager ≤ 1.0 at base"] == "pass"
    assert status["kernel launches per tiny training step ≤ 400 (CUPTI)"] == "pass"
    tests = s["cuda_tests"]["runs"]  # -m gpu with the kernels off, then on, both logs kept
    assert [tests[m]["command"].split()[0] for m in ("before", "after")] == [
        "MT_CUDA_KERNELS=0",
        "MT_CUDA_KERNELS=1",
    ]
    for flag in "01":
        assert f"(k{flag})" in (tmp_path / "gc" / f"tests-k{flag}.log").read_text()
    assert status["train copy: more tokens/s on cuda than on this machine's CPU"] == "pass"
    assert (
        "| base-64x64/before | ok | 20.00 | 12.50 | 5.00 | 1.60x | 2.00x | — |"
        in (tmp_path / "gc" / "gpucheck.md").read_text()
    )


# ------------------------------------------------------------------ the figures read


def test_parsers_read_pytest_callcount_and_the_metrics_log(tmp_path):
    out = "....F\nFAILED tests/a.py::t[cuda:0] - boom\n1 failed, 4 passed, 9 deselected in 2s\n"
    assert parse.pytest_counts(out) == {"passed": 4, "failed": 1, "deselected": 9}
    assert parse.pytest_failures(out) == ["tests/a.py::t[cuda:0]"]
    assert parse.callcount_figures('{"cupy_calls": 377}\n')["cupy_calls"] == 377
    text = "one tiny training step on cuda:0: 1,234 CuPy calls (kernel launches and more)"
    assert parse.callcount_figures(text)["cupy_calls"] == 1234
    cpu_only = "one tiny training step: 6070 Python calls (NumPy), 1400 array calls (strict)"
    assert parse.callcount_figures(cpu_only) is None  # not a count of CuPy calls
    log = tmp_path / "metrics.jsonl"
    rows = [(10, 100.0), (20, 300.0), (30, 500.0)]
    log.write_text("".join(json.dumps({"step": s, "split": "train", "tokens_per_s": t}) + "\n"
                           for s, t in rows))  # fmt: skip
    found = parse.train_tokens_per_s(log)
    assert found["tokens_per_s"] == 400.0 and found["first_window_left_out"]


def _full_result() -> dict:
    def ratio(value: float) -> dict:
        return {"status": "ok", "reason": None, "ours_ms": 1.0, "torch_ms": 1.0 / value,
                "torch_graph_ms": 0.5, "ratio_ours_over_torch": value,
                "ratio_ours_over_torch_range": [value - 0.1, value + 0.1],
                "ratio_ours_over_torch_graph": 2 * value, "ours_graph_ms": 0.55,
                "ratio_ours_graph_over_torch": value / 4,
                "ratio_ours_graph_over_torch_graph": 1.1, "warnings": []}  # fmt: skip

    def ok(**kw) -> dict:
        return {"status": "ok", "reason": None, **kw}

    after = {"tiny": 0.8, "small": 1.2, "base": 0.6, "base-64x64": 0.5}
    runs = {f"{p}/{m}": ratio(v * (1.5 if m == "before" else 1.0))
            for p, v in after.items() for m in ("before", "after")}  # fmt: skip
    runs["base-64x64/before"] = steps.skipped("did not fit in the time budget")
    found = {
        "cuda_tests": ok(counts={"passed": 300}, failures=[]),
        "bench": ok(runs=runs),
        "train": ok(runs={
            "copy/cpu": ok(tokens_per_s=1000.0), "copy/cuda/before": ok(tokens_per_s=500.0),
            "copy/cuda/after": ok(tokens_per_s=4000.0),
            "translate-en-es/cpu": ok(tokens_per_s=2000.0),
            "translate-en-es/cuda/after": ok(tokens_per_s=1500.0),
        }),
        "decode": ok(modes={"before": {"speedup": 2.0}, "after": {"speedup": 3.5}}),
        "callcount": ok(runs={"before": ok(cupy_calls=1400), "after": ok(cupy_calls=350)}),
        "cpu_budget": ok(counts={"passed": 3}),
    }  # fmt: skip
    return {"argv": ["--out", "x"], "started": "today", "wall_s": 400.0, "budget_s": 480.0,
            "machine": {"gpu": "NVIDIA H100 80GB HBM3", "cupy": "14.0.0", "cpu": "Xeon"},
            "steps": found, "targets": judge(found)}  # fmt: skip


def test_targets_are_judged_right_on_a_full_result():
    status = {t["target"]: (t["status"], t["value"]) for t in _full_result()["targets"]}
    assert status["ours / PyTorch eager ≤ 1.0 at tiny"] == ("pass", "0.80x (rounds 0.70-0.90); "
                                                            "before 1.20x")  # fmt: skip
    assert status["ours / PyTorch eager ≤ 1.0 at small"][0] == "fail"
    assert status["ours / PyTorch eager ≤ 1.0 at base"][0] == "pass"
    assert status["stretch: ours / PyTorch eager ≤ 0.7 at tiny, small and base"][0] == "fail"
    floor = status["ours / PyTorch as one CUDA graph (the floor)"]
    assert floor == ("reported", "tiny 1.60x, small 2.40x, base 1.20x, base-64x64 1.00x")
    graphed = status["ours as one CUDA graph (--cuda-graph) / PyTorch eager ≤ 0.7"]
    assert graphed == ("pass", "tiny 0.20x (/PyTorch's graph 1.10x), small 0.30x (/PyTorch's "
                       "graph 1.10x), base 0.15x (/PyTorch's graph 1.10x)")  # fmt: skip
    copy = status["train copy: more tokens/s on cuda than on this machine's CPU"]
    assert copy == ("pass", "4,000 vs 1,000 tok/s = 4.00x; before 0.50x")
    assert status["train translate-en-es: more tokens/s on cuda than on this machine's CPU"][
        0] == "fail"  # fmt: skip
    decode = status["cached greedy decoding ≥ 3x recomputing at small, 64 tokens, cuda"]
    assert decode == ("pass", "3.5x; before 2.0x")
    assert status["kernel launches per tiny training step ≤ 400 (CUPTI)"] == (
        "pass",
        "350; before 1,400",
    )
    cpu = "no regression on the CPU: the call-budget test (tests/test_callcount.py)"
    assert status[cpu] == ("pass", "3 passed")


def test_the_report_renders_a_full_result():
    result = _full_result()
    result["skipped"] = check.report.skipped_list(result)
    md = render(result)
    assert md.startswith("# GPU check: NVIDIA H100 80GB HBM3")
    assert (
        "| ours / PyTorch eager ≤ 1.0 at small | 1.20x (rounds 1.10-1.30); before 1.80x | fail |"
        in md
    )
    assert "| tiny/after | ok | 1.00 | 1.25 | 0.50 | 0.80x | 1.60x | 0.55 | 0.20x | — |" in md
    assert "| copy/cuda/after | ok | 4,000 | — |" in md
    assert "- bench base-64x64/before: did not fit in the time budget" in md
    assert result["skipped"] == ["bench base-64x64/before: did not fit in the time budget"]
    assert "300 passed" in md and "3 passed" in md


# ------------------------------------------------------------------ bench's new flags


def test_torch_graph_needs_cuda_and_the_64x64_preset_is_asked_for_by_name(capsys):
    with pytest.raises(ValueError, match="torch-graph needs --device cuda"):
        bench.run(preset="tiny", compare="torch-graph", in_process=True)
    parser = bench.add_arguments(bench.options.argparse.ArgumentParser())
    args = parser.parse_args(["--compare", "torch-graph", "--preset", "tiny"])
    assert bench.main(args) == 2
    assert "needs --device cuda" in capsys.readouterr().err
    p = bench.PRESETS["base-64x64"]
    assert (p.name, p.batch, p.length) == ("base", 64, 64)
    assert "base-64x64" not in bench.presets.DEFAULT_PRESETS


# ------------------------------------------------------------------ on a GPU only


@pytest.mark.gpu
@pytest.mark.parametrize("kernels", ["0", "1"])
def test_exact_resume_on_cuda(tmp_path, kernels_switch, kernels):
    """Train 10 steps with dropout on cuda:0 in one go, or 4, stop, resume to 10: the same
    losses and weights, bit for bit (the CPU version: tests/test_train.py), with the fused
    kernels off and on (the switch re-read: see kernels_switch)."""
    from minitransformer import fast
    from minitransformer.function import TWINS
    from minitransformer.ops.layernorm import LayerNorm
    from minitransformer.train import TrainConfig, Trainer

    kernels_switch(kernels)

    def cfg(out, steps):
        return TrainConfig(task="copy", device="cuda:0", steps=steps, batch_size=8, warmup=10,
                           peak_lr=3e-3, dropout=0.1, out=str(out), progress=False,
                           plots=False, log_every=2, eval_every=1000, eval_samples=8,
                           checkpoint_every=1000, final_eval_samples=8,
                           task_knobs=dict(KNOBS), model_overrides=dict(SIZE))  # fmt: skip

    whole = Trainer(cfg(tmp_path / "whole", 10))
    array_type = type(next(iter(whole.model.parameters())).data)
    fused = TWINS.get((LayerNorm, array_type)) is not None
    assert fused is (kernels == "1") is fast.cuda_kernels_enabled()  # the switch is what runs
    whole.train()
    Trainer(cfg(tmp_path / "split", 4)).train()
    resumed = Trainer.resume(tmp_path / "split", steps=10)
    resumed.train()
    assert len(whole.losses) == 10 and resumed.losses == whole.losses
    for name, value in whole.model.state_dict().items():
        np.testing.assert_array_equal(
            backend.to_numpy(resumed.model.state_dict()[name]), backend.to_numpy(value), name
        )


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_gpucheck_reads_the_launches_from_callcounts_own_output(monkeypatch, capsys):
    """callcount --device cuda prints its counts as a JSON line; gpucheck takes CUPTI's kernel
    launches from it, or the CuPy calls when CUPTI could not count."""
    from minitransformer.tools import callcount

    counts = {
        "device": "cuda:0", "cuda_kernels": True, "cupy_version": "14.2.0", "cupy_calls": 512,
        "cupy_calls_by_name": {"matmul": 300}, "allocations": 400, "kernel_launches": 377,
        "driver_calls": 900, "kernel_launches_why_not": None,
    }  # fmt: skip
    monkeypatch.setattr(callcount, "count_cuda_step_calls", lambda device: dict(counts))
    probe = {k: {"kernels": 10} for k in ("matmul", "add", "sum")}
    monkeypatch.setattr(callcount, "probe_launches", lambda device: probe)
    monkeypatch.setattr(callcount, "call_costs", lambda device: {"add": 11.5})
    assert callcount._main_cuda("cuda:0") == 0
    out = capsys.readouterr().out
    assert "the counter's probe, 10 calls each: matmul 10 kernels" in out
    found = parse.callcount_figures(out)
    assert found["cupy_calls"] == 377 and found["cupy_calls_seen"] == 512
    assert found["probe"] == probe and found["call_us"] == {"add": 11.5}
    counts.update(kernel_launches=None, kernel_launches_why_not="libcupti not found")
    assert callcount._main_cuda("cuda:0") == 0
    assert parse.callcount_figures(capsys.readouterr().out)["cupy_calls"] == 512
