"""The benchmark runs and reports its fields (not a timing test: sizes and seconds are tiny)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import types

import numpy as np
import pytest

from minitransformer import backend, cli
from minitransformer.backend import host
from minitransformer.config import TransformerConfig
from minitransformer.tools import bench
from minitransformer.tools.bench import command as bench_command
from minitransformer.tools.bench import spread


def test_run_in_process_reports_every_field():
    r = bench.run(preset="tiny", seconds=0.5, warmup=0.2, rounds=2, in_process=True)
    assert r["preset"] == "tiny" and r["config"]["d_model"] == 64 and r["config"]["batch"] == 64
    assert r["flops_per_step"] > 0 and r["tokens_per_step"] == 64 * 16
    assert r["gemm_ceiling_gflops"] > 0 and "peak resident" in r["memory_method"]
    ours = r["ours"]
    for key in ("ms_median", "ms_min", "ms_max", "tokens_per_s", "gflops", "peak_mb"):
        assert key in ours
    assert ours["ms_min"] <= ours["ms_median"] <= ours["ms_max"]
    assert 0 < ours["fraction_of_ceiling"] < 10
    assert ours["steps"] >= 2 and ours["warmup_steps"] >= 2
    assert np.isfinite(ours["final_loss"])
    assert ours["threads"]["blas"]
    text = bench.format_report(r)
    assert "ms/step" in text and "GEMM ceiling" in text and "peak" in text


def test_compare_torch_is_skipped_in_process_with_a_reason():
    r = bench.run(
        preset="tiny", seconds=0.3, warmup=0.1, rounds=2, compare="torch", in_process=True
    )
    assert "torch" not in r and "compare_skipped" in r
    assert "skipped" in bench.format_report(r)


def test_unknown_preset_and_compare_are_errors():
    with pytest.raises(ValueError, match="preset"):
        bench.run(preset="huge")
    with pytest.raises(ValueError, match="compare"):
        bench.run(preset="tiny", compare="jax", in_process=True)


def test_step_flops_counts_matmuls():
    cfg = TransformerConfig.preset("tiny", src_vocab=32, tgt_vocab=32)
    B, S, T, D, F, V = 2, 3, 5, 64, 256, 32
    f = bench.step_flops(cfg, B, S, T)
    forward = (
        2
        * (
            (8 * B * S * D * D + 4 * B * S * S * D + 4 * B * S * D * F)
            + (12 * B * T * D * D + 4 * B * S * D * D + 4 * B * T * T * D + 4 * B * T * S * D)
            + 4 * B * T * D * F
        )
        + 2 * B * T * D * V
    )
    assert f == 3 * forward


def test_blas_info_names_the_blas_and_threads():
    info = bench.blas_info()
    assert info["blas"] and "threads" in info


def test_small_products_run_on_one_blas_thread_and_match():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 2), dtype=np.float32)
    threads = host.blas_threads()
    assert np.array_equal(host.matmul(a, b), a @ b)
    assert host.blas_threads() == threads  # restored


def test_cli_bench_subprocess_with_compare(tmp_path, capsys):
    """The CLI end to end: subprocess workers, alternating rounds, JSON output. With
    PyTorch installed the comparison runs (briefly); without it, ours alone (a --compare
    without PyTorch is refused: the test below)."""
    out = tmp_path / "bench.json"
    compare = ["--compare", "torch"] if bench.torch_available() else []
    code = cli.main(["bench", "--preset", "tiny", *compare, "--seconds", "1", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "== tiny" in text and "minitransformer" in text
    results = json.loads(out.read_text())
    r = results["presets"]["tiny"]
    assert r["ours"]["peak_mb"] >= 0
    if compare:
        assert "ratio ours/torch" in text
        assert r["ratio_ours_over_torch"] > 0 and r["torch"]["peak_mb"] >= 0


def test_compare_without_pytorch_fails_at_once_with_the_install_line(monkeypatch, capsys):
    """As --device cuda without CuPy: exit 2 and one line, before anything is timed."""
    monkeypatch.setitem(sys.modules, "torch", None)  # PyTorch not importable
    monkeypatch.setattr(bench_command, "run", lambda *a, **k: pytest.fail("timed anyway"))
    code = cli.main(["bench", "--compare", "torch", "--preset", "tiny", "--seconds", "1"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", out
    assert err == (
        "minitransformer bench: error: --compare torch needs PyTorch, which is not installed. "
        'Fix: pip install -e ".[torch]", or leave --compare out to time ours alone\n'
        "see: minitransformer bench --help\n"
    )
    from minitransformer.tools.bench.__main__ import _run

    assert _run(["--compare", "torch"]) == 2
    assert capsys.readouterr().err.startswith("bench: error: --compare torch needs PyTorch")


def test_decode_benchmark_reports_both_modes():
    d = bench.run_decode(preset="tiny", length=4, batch=2, seconds=0.1)
    assert d["cached_tokens_per_s"] > 0 and d["recompute_tokens_per_s"] > 0
    assert d["speedup"] == pytest.approx(d["cached_tokens_per_s"] / d["recompute_tokens_per_s"])
    assert "cache speed-up" in bench.format_decode(d)


def test_cli_bench_cuda_without_gpu_is_a_clear_error(capsys):
    if backend.cuda_available():
        pytest.skip("a GPU is present")
    code = cli.main(["bench", "--device", "cuda", "--preset", "tiny", "--seconds", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "cuda" in err.lower()


def test_a_device_run_also_times_our_step_on_the_cpu():
    """Off the CPU, the report says whether the device trains faster than this CPU."""
    pytest.importorskip("array_api_strict")
    r = bench.run(
        preset="tiny", seconds=0.4, warmup=0.1, rounds=2, in_process=True, device="strict:device1"
    )
    assert r["ours"]["device"] == "strict:device1" and r["ours_cpu"]["device"] == "cpu"
    assert r["speedup_device_over_cpu"] > 0
    text = bench.format_report(r)
    assert "train on strict:device1 vs cpu" in text and "ours on the cpu" in text
    assert "of GPU memory" not in text  # the strict device lives in host memory


def test_gpu_memory_is_read_from_the_allocators(monkeypatch):
    """On a GPU the peak is device memory: CuPy's pool for ours, PyTorch's caching
    allocator for torch (fakes stand in for both here: the CI has no GPU)."""

    class Pool:
        held = 1 << 20

        def total_bytes(self):
            return self.held

    pool = Pool()
    fake_cupy = types.SimpleNamespace(get_default_memory_pool=lambda: pool)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    meter = bench.memory_meter("ours", "cuda:0")
    meter.start()
    pool.held += 3 << 20  # the steps made the pool grow by 3 MiB
    assert meter.added() == 3.0 and "CuPy" in meter.method

    state = {"reserved": 5 << 20, "peak": 5 << 20}
    cuda = types.SimpleNamespace(
        synchronize=lambda: None,
        reset_peak_memory_stats=lambda: state.update(peak=state["reserved"]),
        memory_reserved=lambda: state["reserved"],
        max_memory_reserved=lambda: state["peak"],
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    meter = bench.memory_meter("torch", "cuda:0")
    meter.start()
    state["peak"] += 7 << 20
    assert meter.added() == 7.0 and "max_memory_reserved" in meter.method
    assert isinstance(bench.memory_meter("ours", "cpu"), bench._PeakMemory)


# ------------------------------------------- the headline ratio's spread and its warnings
# Synthetic round timings only: no test here depends on how fast this machine is.


def _trust(ours_ms, torch_ms, load_before=0.0, load_during=None):
    """``summarize`` on per-round medians of ours and PyTorch, as ``run`` calls it."""
    ratios = {"ratio_ours_over_torch": [a / b for a, b in zip(ours_ms, torch_ms, strict=True)]}
    during = load_during or {"ours": [0.0] * len(ours_ms), "torch": [0.0] * len(torch_ms)}
    return spread.summarize(
        {"ours": list(ours_ms), "torch": list(torch_ms)}, ratios, load_before, during
    )


def _report(ours_ms, torch_ms, **load):
    """A whole report as ``run`` returns it, from synthetic rounds (for format_report)."""
    side = {
        "ms_min": 1.0, "ms_max": 9.0, "steps": 10, "warmup_steps": 2, "warmup_s": 1.0,
        "tokens_per_s": 1e3, "gflops": 1.0, "fraction_of_ceiling": 0.1, "peak_mb": 50.0,
        "threads": {"blas": "openblas", "threads": 2, "source": "test"}, "device": "cpu",
    }  # fmt: skip
    cfg = TransformerConfig.preset("tiny", src_vocab=32, tgt_vocab=32)
    r = {
        "preset": "tiny", "device": "cpu", "flops_per_step": 1e9, "tokens_per_step": 1024,
        "rounds": len(ours_ms), "gemm_ceiling_gflops": 100.0,
        "gemm_ceiling_median_gflops": 100.0, "gemm_ceiling_threads_gflops": 100.0,
        "gemm_ceiling_1thread_gflops": 60.0, "memory_ratio_ours_over_torch": 0.4,
        "config": {"vocab": 32, "d_model": cfg.d_model, "h": cfg.h, "N": cfg.N,
                   "d_ff": cfg.d_ff, "length": 16, "batch": 64, "dropout": 0.0,
                   "label_smoothing": 0.1, "dtype": "float32"},
        "ours": {**side, "ms_median": statistics.median(ours_ms)},
        "torch": {**side, "ms_median": statistics.median(torch_ms)},
    }  # fmt: skip
    r.update(_trust(ours_ms, torch_ms, **load))
    r["ratio_per_round"] = [a / b for a, b in zip(ours_ms, torch_ms, strict=True)]
    return r


def test_steady_rounds_on_an_idle_machine_give_the_ratio_with_its_range_and_no_warning():
    t = _trust([40.0, 41.0, 39.0], [30.0, 31.0, 29.5], load_before=0.1)
    assert t["warnings"] == []
    assert t["ratio_ours_over_torch"] == pytest.approx(41 / 31)  # median of per-round ratios
    low, high = t["ratio_ours_over_torch_range"]
    assert low == pytest.approx(39 / 29.5) and high == pytest.approx(40 / 30)
    assert t["round_spread"]["ours"] == pytest.approx(41 / 39)
    text = bench.format_report(_report([40.0, 41.0, 39.0], [30.0, 31.0, 29.5]))
    assert "ratio ours/torch: 1.32x (rounds 1.32-1.33x)" in text and "WARNING" not in text


def test_a_side_whose_rounds_disagree_is_warned_and_so_is_a_wide_ratio_range():
    """PyTorch's 2-thread step collapsing in one round (2.4 s; 23-29 ms alone)."""
    t = _trust([40.0, 41.0, 40.0], [25.0, 2400.0, 27.0])
    text = " ".join(t["warnings"])
    assert "pytorch eager's rounds disagree" in text and "25.0 to 2,400.0 ms" in text
    assert "ranges 0.02-1.60x" in text and "not a property of the code" in text
    assert "minitransformer's rounds" not in text  # ours was steady


def test_a_ratio_range_over_2x_is_warned_even_when_each_side_is_within_1_5x():
    t = _trust([40.0, 58.0], [58.0, 40.0])  # sides 1.45x apart, ratios 0.69 and 1.45
    assert len(t["warnings"]) == 2 and "ranges 0.69-1.45x" in t["warnings"][0]


def test_a_steady_collapse_under_other_load_is_warned():
    """The issue's case: every round of PyTorch collapsed alike, so rounds agree and the
    ratio is steady at 0.02x; only the other processes' load gives it away."""
    load = {"ours": [0.2, 0.3], "torch": [1.8, 1.9]}
    r = _report([40.0, 41.0], [2400.0, 2410.0], load_before=1.2, load_during=load)
    assert r["ratio_ours_over_torch"] == pytest.approx(0.017, abs=1e-3)
    assert r["other_load_cores"]["before"] == 1.2 and r["other_load_cores"]["rounds"] == load
    assert r["other_load_cores"]["during"] == {"ours": 0.25, "torch": pytest.approx(1.85)}
    [busy, advice] = r["warnings"]
    assert "1.2 before the timing" in busy and "1.9 during pytorch eager's rounds" in busy
    assert "minitransformer's rounds" not in busy  # 0.25 cores is below OTHER_LOAD_MAX
    assert "rerun on an idle machine" in advice
    text = bench.format_report(r)
    assert "0.02x (rounds 0.02-0.02x)" in text
    assert text.count("WARNING:") == 2 and "other processes' load" in text


def test_unknown_load_gives_no_load_warning():
    t = _trust([40.0, 40.0], [30.0, 30.0], None, {"ours": [None, None], "torch": [None]})
    assert t["warnings"] == [] and t["other_load_cores"]["during"]["ours"] is None


def test_load_meter_subtracts_our_own_processes(monkeypatch):
    """Other load = the machine's busy CPU time minus this process's and the worker's."""
    busy = iter([100.0, 103.0])  # 3 busy CPU seconds in a 2 s window
    monkeypatch.setattr(spread, "busy_cpu_seconds", lambda: next(busy))
    clocks = types.SimpleNamespace(  # a 2 s window in which this process ran 0.5 s
        perf_counter=iter([10.0, 12.0, 20.0, 21.0]).__next__,
        process_time=iter([5.0, 5.5, 6.0, 6.0]).__next__,
    )
    monkeypatch.setattr(spread, "time", clocks)
    meter = spread.LoadMeter()
    meter.start()
    assert meter.stop(ours_cpu_s=1.5) == pytest.approx((3 - 0.5 - 1.5) / 2)
    monkeypatch.setattr(spread, "busy_cpu_seconds", lambda: None)  # no /proc/stat
    meter.start()
    assert meter.stop() is None


def test_bench_command_prints_and_saves_the_warnings(tmp_path, monkeypatch, capsys):
    """``bench`` repeats a preset's warnings at the end and writes them to the JSON."""
    load = {"ours": [0.0, 0.0], "torch": [1.9, 1.9]}
    report = _report([40.0, 41.0], [2400.0, 2410.0], load_before=1.5, load_during=load)
    monkeypatch.setattr(bench_command, "run", lambda *a, **k: report)
    monkeypatch.setattr(bench_command, "torch_available", lambda: True)
    out = tmp_path / "b.json"
    args = argparse.Namespace(
        preset=["tiny"], compare="torch", device="cpu", seconds=1.0, json=str(out),
        data_parallel=None,
    )  # fmt: skip
    assert bench_command.main(args) == 0
    text = capsys.readouterr().out
    assert "bench: WARNING: the numbers of tiny are not reliable" in text
    saved = json.loads(out.read_text())
    assert saved["warnings"]["tiny"] == report["warnings"] and saved["wall_s"] >= 0
    tiny = saved["presets"]["tiny"]
    for key in ("ratio_ours_over_torch_range", "round_ms", "round_spread", "other_load_cores"):
        assert key in tiny


def test_bench_help_says_how_long_it_takes_and_what_seconds_does(capsys):
    assert cli.main(["bench", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "minutes" in text and "--seconds is the timed budget of each preset" in text
    assert "WARNING" in text


def test_pytorchs_decoder_is_told_the_mask_is_causal_only_when_asked(monkeypatch):
    """The eager step leaves ``tgt_is_causal`` None (PyTorch checks the mask itself); the
    CUDA-graph step passes True (a check on the host would break capture). The mask tensor
    itself must never reach ``tgt_is_causal``."""
    torch = pytest.importorskip("torch")
    from minitransformer.tools.bench import models

    seen = []
    forward = torch.nn.TransformerDecoder.forward

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("tgt_is_causal"))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.TransformerDecoder, "forward", spy)
    cfg = TransformerConfig(src_vocab=11, tgt_vocab=11, d_model=8, h=2, N=1, d_ff=16)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 11, (2, 5)), rng.integers(1, 11, (2, 6))
    model, _, (src_, tgt_in, _), _ = models._torch_model(cfg, src, tgt, "cpu")
    model.eval()  # no dropout: the two calls must agree
    eager, causal = model(src_, tgt_in), model(src_, tgt_in, causal=True)
    assert seen == [None, True]
    assert torch.allclose(eager, causal)


def test_our_timed_step_trusts_ids_checked_once_on_the_host(monkeypatch):
    """The bench's step is the Trainer's: ids checked once where they are made, then no
    check (and no device-to-host read) inside the timed step (review gpu-2026-12-06 §4)."""
    import minitransformer.functional as F
    import minitransformer.nn.transformer as transformer
    from minitransformer.config import TransformerConfig
    from minitransformer.tools.bench import models

    cfg = TransformerConfig(src_vocab=16, tgt_vocab=16, d_model=16, h=2, N=1, d_ff=32,
                            max_len=8, dropout=0.0)  # fmt: skip
    ids = np.random.default_rng(0).integers(3, 16, size=(4, 7))
    step, _ = models.ours_step(cfg, ids[:, :6], ids, "cpu")

    def refused(*args, **kwargs):
        raise AssertionError("an id check inside the timed step")

    monkeypatch.setattr(transformer, "check_ids", refused)
    monkeypatch.setattr(F, "cross_entropy", refused)
    assert np.isfinite(step())
