"""The benchmark runs and reports its fields (not a timing test: sizes and seconds are tiny)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from minitransformer import backend, bench, cli, host
from minitransformer.config import TransformerConfig
from minitransformer.kernels import numpy as numpy_kernels


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
    assert np.array_equal(numpy_kernels.matmul(a, b), a @ b)
    assert host.blas_threads() == threads  # restored


def test_cli_bench_subprocess_with_compare(tmp_path, capsys):
    """The CLI end to end: subprocess workers, alternating rounds, JSON output. With
    PyTorch installed the comparison runs (briefly); without it, a clear skip message."""
    out = tmp_path / "bench.json"
    code = cli.main(
        ["bench", "--preset", "tiny", "--compare", "torch", "--seconds", "1", "--json", str(out)]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "== tiny" in text and "minitransformer" in text
    results = json.loads(out.read_text())
    r = results["presets"]["tiny"]
    assert r["ours"]["peak_mb"] >= 0
    if bench.torch_available():
        assert "ratio ours/torch" in text
        assert r["ratio_ours_over_torch"] > 0 and r["torch"]["peak_mb"] >= 0
    else:
        assert "skipped" in text


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
    import types

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
