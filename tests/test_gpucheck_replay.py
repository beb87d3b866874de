"""The GPU check's capture-and-replay step (``graph_replay``, issue 49): it runs the one GPU
test that captures and replays (tests/fast/test_cuda_graph_replay.py, ``-m gpu``, the fused
kernels on) and reports ok, failed, or skipped: without a GPU, without time, and where
pytest ran but the test skipped itself (a skip is not a pass)."""

from __future__ import annotations

import pytest

from minitransformer.tools.gpucheck import child, steps


def _context(tmp_path, gpu=True, seconds=600.0):
    return steps.Context(out=tmp_path, quick=False, budget=child.Budget(seconds), gpu=gpu,
                         no_gpu="" if gpu else "CuPy is not installed (test)",
                         log=lambda line: None)  # fmt: skip


@pytest.mark.parametrize(
    ("output", "rc", "status"),
    [
        ("2 passed, 3 deselected in 9.1s\n", 0, "ok"),
        ("1 failed, 1 passed, 3 deselected in 9.1s\n", 1, "failed"),
        ("2 skipped, 3 deselected in 0.1s\n", 0, "skipped"),
        ("5 deselected in 0.1s\n", 0, "skipped"),
    ],
)
def test_the_replay_step_runs_the_gpu_test_and_reports_what_it_did(
    tmp_path, monkeypatch, output, rc, status
):
    calls = []

    def fake(args, timeout, env=None, cwd=None, **kw):
        calls.append((args, env))
        return child.ChildResult(rc, output, "", 2.0)

    monkeypatch.setattr(steps, "run_child", fake)
    r = steps.graph_replay(_context(tmp_path))
    assert r["status"] == status, r
    ((args, env),) = calls
    assert steps.REPLAY_TEST in args and args[args.index("-m", 2) + 1] == "gpu"
    assert env == {"MT_CUDA_KERNELS": "1"}
    assert r["log"] == "graph-replay.log" and (tmp_path / "graph-replay.log").read_text() == output
    if status == "skipped":
        assert r["reason"].startswith("the test did not run on the GPU")


def test_the_replay_step_is_skipped_without_a_gpu_or_without_time(tmp_path, monkeypatch):
    monkeypatch.setattr(steps, "run_child", lambda *a, **k: pytest.fail("no child expected"))
    r = steps.graph_replay(_context(tmp_path, gpu=False))
    assert r == {"status": "skipped", "reason": "no GPU: CuPy is not installed (test)"}
    r = steps.graph_replay(_context(tmp_path, seconds=5.0))
    assert r["status"] == "skipped" and "did not fit in the time budget" in r["reason"]


def test_the_replay_test_is_where_the_step_looks_for_it():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    text = (root / steps.REPLAY_TEST).read_text()
    assert "pytest.mark.gpu" in text and "def test_a_captured_trainer_replays" in text
