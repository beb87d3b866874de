"""Data parallelism (minitransformer/runtime/distributed.py): the shard arithmetic in one process,
then real 2-rank jobs under MPICH's mpiexec: the same losses as one process, step for
step; rank 0 alone writes; every rank stops together (NaN, SIGTERM); a killed rank ends
the job; the errors a user meets are one clear line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tiny_runs import DP_TINY as TINY
from tiny_runs import MPIEXEC, needs_mpi
from tiny_runs import rank_pids as _rank_pids

from minitransformer import functional as F
from minitransformer.data.batching import make_batch
from minitransformer.runtime import checkpoint, distributed
from minitransformer.train import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("MT_LESSON_FAST", None)
    return env


def _train(args: list[str], ranks: int | None, timeout: float = 40) -> subprocess.CompletedProcess:
    """``minitransformer train ARGS`` in one process (ranks None) or under mpiexec."""
    cmd = [sys.executable, "-m", "minitransformer", "train", *args]
    if ranks is not None:
        cmd = [str(MPIEXEC), "-n", str(ranks), *cmd, "--data-parallel"]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout)


def _losses(run: Path) -> list[float]:
    return checkpoint.load_checkpoint(run / "checkpoint.safetensors")[1]["losses"]


def _weights(run: Path) -> dict[str, np.ndarray]:
    arrays, _ = checkpoint.load_checkpoint(run / "checkpoint.safetensors")
    return {k: v for k, v in arrays.items() if k.startswith("model.")}


# ------------------------------------------------------------------ one process, no MPI
def _tiny_trainer() -> Trainer:
    cfg = TrainConfig(task="copy", batch_size=7, dropout=0.0, out="unused",
                      task_knobs=dict(n_train=100),
                      model_overrides=dict(d_model=16, N=1, d_ff=32, h=2))  # fmt: skip
    return Trainer(cfg)


def _grad(trainer: Trainer, batch, scale: float = 1.0) -> np.ndarray:
    trainer.optimizer.zero_grad()
    logits = trainer.model(batch.src, batch.tgt_in)
    loss = F.cross_entropy(logits, batch.tgt_out, label_smoothing=0.1, ignore_index=0)
    (loss * scale).backward()
    return np.array(trainer.optimizer.gather_grads()[0], dtype=np.float64)


@pytest.mark.parametrize("ranks", [2, 3, 7])
def test_token_weighted_shard_gradients_sum_to_the_whole_batch_gradient(ranks):
    trainer = _tiny_trainer()
    batch = next(trainer.stream)
    whole = _grad(trainer, batch)
    total = np.zeros_like(whole)
    scales = []
    for r in range(ranks):
        shard, scale = distributed.shard_batch(batch, r, ranks)
        scales.append(scale)
        total += _grad(trainer, shard, scale)
    assert sum(scales) == pytest.approx(1.0)
    np.testing.assert_allclose(total, whole, rtol=1e-4, atol=1e-6)
    # the plain mean of shard means is NOT the batch mean when token counts differ
    plain = sum(_grad(trainer, distributed.shard_batch(batch, r, ranks)[0]) for r in range(ranks))
    counts = [distributed.shard_batch(batch, r, ranks)[0].n_tokens for r in range(ranks)]
    if len(set(counts)) > 1:
        assert not np.allclose(plain / ranks, whole, rtol=1e-4, atol=1e-6)


def test_shards_partition_the_rows_and_an_empty_shard_adds_nothing():
    pairs = [([3, 4, 5], [3, 4, 5]), ([6], [6]), ([7, 8], [7, 8])]
    batch = make_batch(pairs)
    rows = np.concatenate([distributed.shard_rows(len(batch), r, 2) for r in range(2)])
    assert sorted(rows.tolist()) == [0, 1, 2]
    shard, scale = distributed.shard_batch(batch, 1, 2)  # row 1 alone: trimmed to width 1
    assert shard.src.shape == (1, 1) and shard.tgt_out.shape == (1, 2)
    assert scale == pytest.approx(2 / 9)
    _, empty = distributed.shard_batch(batch, 4, 5)  # 3 rows, 5 ranks: rank 4 gets none
    assert empty == 0.0


def test_checksum_tells_weights_apart():
    a = [np.arange(10, dtype=np.float32)]
    assert distributed.checksum(a) == distributed.checksum([a[0].copy()])
    b = [a[0][::-1].copy()]  # the same values in another order
    assert distributed.checksum(a) != distributed.checksum(b)


def test_without_data_parallel_nothing_imports_mpi4py(tmp_path):
    code = (
        "import sys; from minitransformer.cli import main; "
        f"rc = main(['train', 'copy', '--steps', '2', '--batch-size', '4', '--out', "
        f"{str(tmp_path / 'r')!r}, *{TINY!r}]); "
        "assert rc == 0, rc; assert 'mpi4py' not in sys.modules, 'mpi4py imported'; "
        "assert 'minitransformer.runtime.distributed' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_data_parallel_without_mpi4py_is_one_line_naming_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['mpi4py'] = None; from minitransformer.cli import main; "
        f"sys.exit(main(['train', 'copy', '--data-parallel', '--out', {str(tmp_path)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=60)  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and 'pip install -e ".[mpi]"' in lines[0], done.stderr
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------ real jobs: 2 ranks
@needs_mpi
def test_two_ranks_match_one_process_step_for_step(tmp_path):
    # batch 7: shards of 4 and 3 rows with different token counts; 200 % 7 leaves a short
    # last batch; a checkpoint at step 4 and the end; the final model averages steps 10..30
    args = ["copy", "--steps", "30", "--batch-size", "7", "--log-every", "5",
            "--checkpoint-every", "4", "--average-every", "5", *TINY]  # fmt: skip
    one = _train([*args, "--out", str(tmp_path / "one")], None)
    two = _train([*args, "--out", str(tmp_path / "two")], 2)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(a) == len(b) == 30
    np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)
    wa, wb = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    # The key bias adds q·b to every score of a query row, which softmax ignores: its true
    # gradient is 0, so what it gets is rounding noise, which Adam scales up to ±lr a step.
    for key in [k for k in wa if "w_k.bias" not in k]:
        np.testing.assert_allclose(wb[key], wa[key], rtol=1e-4, atol=1e-5, err_msg=key)

    # rank 0 alone writes and prints: one result line, one line per log step
    assert two.stdout.count("result card: ") == 1
    assert two.stderr.count("step 30/30") == 1
    assert "data-parallel over 2 ranks" in two.stderr
    card = json.loads((tmp_path / "two" / "result.json").read_text())
    assert card["data_parallel_ranks"] == 2
    assert card["averaged_steps"] == [10, 15, 20, 25, 30]
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(
        p.name for p in (tmp_path / "one").iterdir()
    )

    # resume under mpiexec continues the run exactly; the checkpoint does not depend on the
    # number of ranks, so one process can take over from there
    resume = ["--resume", str(tmp_path / "two"), "--no-progress", "--no-plots", "--log-every", "5"]
    more = _train([*resume, "--steps", "33"], 2)
    assert more.returncode == 0, more.stderr
    more = _train([*resume, "--steps", "36"], None)
    assert more.returncode == 0, more.stderr
    ref = _train([*args, "--steps", "36", "--out", str(tmp_path / "ref")], None)
    assert ref.returncode == 0, ref.stderr
    np.testing.assert_allclose(_losses(tmp_path / "two"), _losses(tmp_path / "ref"),
                               rtol=2e-5, atol=1e-6)  # fmt: skip


NAN_SCRIPT = """
import sys
from minitransformer.runtime import distributed
from minitransformer.errors import TrainingError
from minitransformer.train import TrainConfig, Trainer

world = distributed.World.from_mpi()
trainer = Trainer(TrainConfig(
    task="copy", steps=40, batch_size=4, dropout=0.0, out=sys.argv[1], log_every=5,
    checkpoint_every=5, progress=False, plots=False, task_knobs=dict(n_train=100),
    model_overrides=dict(d_model=16, N=1, d_ff=32, h=2)))
world.attach(trainer)
shard = world.shard
def poisoned(batch):  # rank 1 alone sees a NaN loss at step 7
    local, scale = shard(batch)
    return local, (float("nan") if world.rank == 1 and trainer.step == 6 else scale)
world.shard = poisoned
try:
    trainer.train()
except TrainingError as err:
    print(f"rank {world.rank} stopped: {err}", flush=True)
    sys.exit(0)
print(f"rank {world.rank} did not stop", flush=True)
sys.exit(1)
"""


@needs_mpi
def test_a_nan_on_one_rank_stops_every_rank_at_the_same_step(tmp_path):
    script = tmp_path / "nan.py"
    script.write_text(NAN_SCRIPT)
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, str(script), str(tmp_path / "r")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=40)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        assert f"rank {rank} stopped: step 7: the loss is nan" in done.stdout, done.stdout
    # the checkpoint of step 5 is intact and no update was applied from step 7 on
    _, meta = checkpoint.load_checkpoint(tmp_path / "r" / "checkpoint.safetensors")
    assert meta["step"] == 5


def _wait(job: subprocess.Popen, pids: list[int], timeout: float) -> tuple[str, str]:
    """The job's output once it ends; a job still running after ``timeout`` s (a hang) is
    killed, ranks first, and the test fails."""
    try:
        return job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in [*pids, job.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.communicate()
        pytest.fail(f"the job did not end within {timeout} s")


def _start_long_run(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "minitransformer", "train", "copy",
           "--steps", "100000", "--batch-size", "4", "--log-every", "20", "--checkpoint-every",
           "100000", "--out", str(tmp_path / "r"), *TINY, "--data-parallel"]  # fmt: skip
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=_env())  # fmt: skip
    log, deadline = tmp_path / "r" / "metrics.jsonl", time.monotonic() + 30
    while time.monotonic() < deadline:
        if log.exists() and log.stat().st_size:
            pids = _rank_pids(job.pid)
            if len(pids) == 2:
                return job, pids
        time.sleep(0.1)
    _wait(job, _rank_pids(job.pid), 0.1)
    pytest.fail("the 2-rank run did not start logging within 30 s")


@needs_mpi
def test_sigterm_to_one_rank_stops_both_with_a_checkpoint(tmp_path):
    job, pids = _start_long_run(tmp_path)
    os.kill(pids[1], signal.SIGTERM)  # rank 1 (the higher pid is not guaranteed: either)
    out, err = _wait(job, pids, 30)
    assert job.returncode == 143, err
    assert "Interrupted (SIGTERM)" in err and "mpiexec -n 2 " in err
    _, meta = checkpoint.load_checkpoint(tmp_path / "r" / "checkpoint.safetensors")
    assert meta["step"] % 20 == 0 and meta["step"] > 0


@needs_mpi
def test_a_killed_rank_ends_the_job_in_bounded_time(tmp_path):
    job, pids = _start_long_run(tmp_path)
    t0 = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    out, err = _wait(job, pids, 20)
    assert time.monotonic() - t0 < 20
    assert job.returncode != 0
    assert "BAD TERMINATION" in out + err


@needs_mpi
def test_a_batch_smaller_than_the_ranks_is_a_clear_error(tmp_path):
    done = _train(["copy", "--batch-size", "1", "--out", str(tmp_path / "r"), *TINY], 2)
    assert done.returncode == 2
    assert "--batch-size 1 is smaller than the number of ranks (2)" in done.stderr
    assert "Traceback" not in done.stderr


@needs_mpi
def test_a_failure_on_rank_0_alone_ends_the_job(tmp_path):
    # rank 0 refuses an --out that holds another run; rank 1 would wait forever in the first
    # all-reduce without MPI_Abort
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "checkpoint.safetensors").write_bytes(b"not ours")
    done = _train(["copy", "--steps", "5", "--batch-size", "4", "--out", str(tmp_path / "r"),
                   *TINY], 2, timeout=30)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--overwrite" in done.stderr


@needs_mpi
def test_bench_data_parallel_reports_scaling_and_allreduce_time(tmp_path):
    out = tmp_path / "dp.json"
    cmd = [sys.executable, "-m", "minitransformer", "bench", "--data-parallel", "2",
           "--seconds", "0.6", "--json", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "scaling efficiency of 2 ranks" in done.stdout
    (result,) = json.loads(out.read_text())
    one, two_threads, two_ranks = result["rows"]
    assert (one["ranks"], two_threads["threads"], two_ranks["ranks"]) == (1, 2, 2)
    assert two_ranks["allreduce_ms"] > 0 and two_ranks["tokens_per_s"] > 0
    assert result["efficiency"] == pytest.approx(two_ranks["speedup"] / 2)


@needs_mpi
def test_a_second_ctrl_c_on_one_rank_alone_ends_the_job(tmp_path):
    # rank 1 stops at once (KeyboardInterrupt) before any agreement: MPI_Abort, not a hang
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "minitransformer", "train", "copy",
           "--steps", "100000", "--batch-size", "4", "--log-every", "100000",
           "--out", str(tmp_path / "r"), *TINY, "--data-parallel"]  # fmt: skip
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=_env())  # fmt: skip
    deadline = time.monotonic() + 30
    while len(pids := _rank_pids(job.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    if len(pids) < 2:
        _wait(job, pids, 0.1)
    time.sleep(3)  # the ranks are training now
    os.kill(pids[1], signal.SIGINT)
    time.sleep(0.05)
    os.kill(pids[1], signal.SIGINT)
    out, err = _wait(job, pids, 20)
    assert job.returncode not in (0, None), err


DIFFERENT_SCRIPT = """
from minitransformer.runtime import distributed
from minitransformer.errors import ConfigError
from minitransformer.train import TrainConfig, Trainer

world = distributed.World.from_mpi()
trainer = Trainer(TrainConfig(task="copy", batch_size=4, out="unused",
                              task_knobs=dict(n_train=100), model_overrides=dict(d_model=16, N=1)))
if world.rank == 1:
    trainer.optimizer.groups[0].data[5] += 1e-6  # one weight differs on one rank
try:
    world.attach(trainer)
except ConfigError as err:
    print(f"rank {world.rank}: {err}", flush=True)
except distributed.PeerStopped as stop:  # the other ranks stop quietly: rank 0 reports
    print(f"rank {world.rank}: quiet, rank {stop.reporter} reports", flush=True)
"""


@needs_mpi
def test_ranks_that_start_from_different_weights_are_refused(tmp_path):
    script = tmp_path / "different.py"
    script.write_text(DIFFERENT_SCRIPT)
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, str(script)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=40)
    assert done.returncode == 0, done.stderr
    assert "rank 0: the ranks start from different weights" in done.stdout
    assert "rank 1: quiet, rank 0 reports" in done.stdout
