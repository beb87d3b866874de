"""A data-parallel job never hangs and never trains what its ranks did not agree on
(minitransformer/runtime/distributed/waiting.py and agreement.py), with real 2-rank jobs under
MPICH's mpiexec: a stopped rank ends the job within the collective timeout, with one line
naming it, and the run resumes; SIGTERM to mpiexec ends it too; ranks started with
different arguments (MPMD ``:``) are refused before the first step; the errors and resume
hints of a data-parallel run are one line, printed once, with the command that resumes.

Every job runs in its own session and is killed, process group and ranks, when it
outlives its bound: a hang fails the test instead of blocking the suite."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_runs import DP_TINY as TINY
from tiny_runs import MPIEXEC, needs_mpi
from tiny_runs import rank_pids as _rank_pids

from minitransformer.errors import ConfigError
from minitransformer.runtime import checkpoint
from minitransformer.runtime.distributed import agreement, waiting

ROOT = Path(__file__).resolve().parents[1]
PY = [sys.executable, "-m", "minitransformer", "train"]
TIMEOUT_S = 4  # the collective timeout these jobs run with


def _env(timeout: float | None = TIMEOUT_S) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("MT_LESSON_FAST", None)
    env.pop(waiting.TIMEOUT_ENV, None)
    if timeout is not None:
        env[waiting.TIMEOUT_ENV] = str(timeout)
    return env


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)  # fmt: skip


def _kill(job: subprocess.Popen, pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)  # works on a stopped process too
        except ProcessLookupError:
            pass
    try:
        os.killpg(job.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _finish(job: subprocess.Popen, bound: float) -> tuple[str, str]:
    """The job's output once it ends; one still running after ``bound`` s is killed and the
    test fails."""
    pids = _rank_pids(job.pid)
    try:
        return job.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        _kill(job, pids)
        job.communicate()
        pytest.fail(f"the job did not end within {bound} s (it hangs)")


def _run(cmd: list[str], env: dict[str, str], bound: float = 40) -> subprocess.CompletedProcess:
    job = _start(cmd, env)
    out, err = _finish(job, bound)
    return subprocess.CompletedProcess(cmd, job.returncode, out, err)


def _dp(args: list[str], ranks: int = 2) -> list[str]:
    return [str(MPIEXEC), "-n", str(ranks), *PY, *args, "--data-parallel"]


def _mpmd(args0: list[str], args1: list[str]) -> list[str]:
    """Rank 0 and rank 1 started with different commands (mpiexec's ``:``)."""
    return [str(MPIEXEC), "-n", "1", *PY, *args0, "--data-parallel", ":",
            "-n", "1", *PY, *args1, "--data-parallel"]  # fmt: skip


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error:" in line]


def _start_long_run(run: Path, env: dict[str, str]) -> tuple[subprocess.Popen, list[int]]:
    """A 2-rank run that saves a checkpoint every 20 steps; returned once one is on disk."""
    job = _start(_dp(["copy", "--steps", "100000", "--batch-size", "4", "--log-every", "10",
                      "--checkpoint-every", "20", "--out", str(run), *TINY]), env)  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = _rank_pids(job.pid)
        if (run / "checkpoint.safetensors").exists() and len(pids) == 2:
            return job, pids
        time.sleep(0.1)
    _kill(job, _rank_pids(job.pid))
    job.communicate()
    pytest.fail("the 2-rank run did not save a checkpoint within 30 s")


# ------------------------------------------------------------------ a stuck rank
@needs_mpi
def test_a_stopped_rank_ends_the_job_within_the_timeout_and_the_run_resumes(tmp_path):
    run = tmp_path / "r"
    job, pids = _start_long_run(run, _env())
    try:
        t0 = time.monotonic()
        os.kill(pids[1], signal.SIGSTOP)  # either rank: the other one reports it
        out, err = _finish(job, TIMEOUT_S + 12)
        took = time.monotonic() - t0
    finally:
        _kill(job, pids)
    assert job.returncode not in (0, None), err
    assert took < TIMEOUT_S + 8, took
    lines = [line for line in err.splitlines() if "did not arrive" in line]
    assert len(lines) == 1, err  # the reachable rank: one line
    assert f"within the collective timeout of {TIMEOUT_S} s" in lines[0]
    assert waiting.TIMEOUT_ENV in lines[0] and "Traceback" not in err
    stopped = 1 if " error: rank 0:" in lines[0] else 0
    assert f"rank {stopped} did not arrive" in lines[0]
    assert f"mpiexec -n 2 minitransformer train --resume {run} --data-parallel" in lines[0]
    assert "MPI_Abort" not in out + err and "BAD TERMINATION" not in out + err
    _, meta = checkpoint.load_checkpoint(run / "checkpoint.safetensors")  # intact
    assert meta["step"] % 20 == 0 and f"(step {meta['step']})" in lines[0]
    assert f"{run / 'checkpoint.safetensors'} (step" in lines[0]
    step = meta["step"]
    more = _run(_dp(["--resume", str(run), "--steps", str(step + 5), "--no-progress",
                     "--no-plots"]), _env())  # fmt: skip
    assert more.returncode == 0, more.stderr
    assert checkpoint.load_checkpoint(run / "checkpoint.safetensors")[1]["step"] == step + 5


@needs_mpi
def test_sigterm_to_mpiexec_ends_a_job_with_a_stopped_rank(tmp_path):
    # a long collective timeout: what ends the job is the signal, STOP_GRACE_S after it
    job, pids = _start_long_run(tmp_path / "r", _env(timeout=300))
    try:
        os.kill(pids[1], signal.SIGSTOP)
        time.sleep(0.5)
        t0 = time.monotonic()
        os.kill(job.pid, signal.SIGTERM)  # mpiexec forwards it to the ranks
        out, err = _finish(job, waiting.STOP_GRACE_S + 15)
        took = time.monotonic() - t0
    finally:
        _kill(job, pids)
    # Rank 0 exits with 143; MPICH's mpiexec then kills the stopped rank with SIGKILL. Its
    # status is the OR of the ranks' raw wait statuses, so when it has collected the killed
    # rank's before it returns (a race that a loaded machine wins), it reports that signal,
    # 9, instead of 143.
    assert job.returncode in (143, signal.SIGKILL), err
    assert took < waiting.STOP_GRACE_S + 8, took
    # rank 0 names the stopped rank and the collective it was waiting at: most often the
    # gradient all-reduce of a step; the loss read-back when rank 1 stopped just before a log
    # line (every 10 steps)
    named = r"rank 1 did not arrive at the .+ of step \d+ within \d+ s of SIGTERM"
    assert re.search(named, err), err
    assert "of SIGTERM; ending the job" in err and "--data-parallel" in err


EVAL_SCRIPT = """
import sys, time
from minitransformer.runtime import distributed
from minitransformer.train import TrainConfig, Trainer

world = distributed.World.from_mpi()
trainer = Trainer(TrainConfig(
    task="copy", steps=6, batch_size=4, dropout=0.0, out=sys.argv[1], log_every=2,
    eval_every=3, eval_samples=2, final_eval_samples=2, progress=False, plots=False,
    task_knobs=dict(n_train=100), model_overrides=dict(d_model=16, N=1, d_ff=32, h=2)))
world.attach(trainer)
evaluate = trainer.evaluate
def slow(*args, **kwargs):  # rank 0 evaluates for longer than the collective timeout
    time.sleep(2.5)
    return evaluate(*args, **kwargs)
trainer.evaluate = slow
result = trainer.train()
print(f"rank {world.rank} finished at step {trainer.step}", flush=True)
"""


@needs_mpi
def test_waiting_for_rank_0s_evaluation_has_no_deadline(tmp_path):
    script = tmp_path / "eval.py"
    script.write_text(EVAL_SCRIPT)
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, str(script), str(tmp_path / "r")]
    done = _run(cmd, _env(timeout=1), bound=40)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        assert f"rank {rank} finished at step 6" in done.stdout


# ------------------------------------------------------------------ agreement at start
@pytest.mark.parametrize(
    ("flag", "value0", "value1", "field"),
    [("--seed", "0", "3", "seed"), ("--batch-size", "4", "8", "batch_size"),
     ("--steps", "6", "9", "steps"), ("--log-every", "2", "3", "log_every")],
)  # fmt: skip
@needs_mpi
def test_ranks_started_with_different_arguments_are_refused_before_step_1(
    tmp_path, flag, value0, value1, field
):
    run = tmp_path / "r"
    base = ["copy", "--out", str(run), *TINY]
    defaults = {"--seed": "0", "--batch-size": "4", "--steps": "6", "--log-every": "2"}
    args = [a for k, v in defaults.items() if k != flag for a in (k, v)]
    done = _run(_mpmd([*base, *args, flag, value0], [*base, *args, flag, value1]), _env())
    assert done.returncode == 2, done.stderr
    (line,) = _errors(done.stderr)  # printed once, by rank 0
    assert "the ranks were started with different arguments" in line
    assert f"{field} is {int(value0)} on rank 0 but {int(value1)} on rank 1" in line
    assert "step 1" not in done.stderr and not run.exists()  # nothing trained, nothing written
    assert "MPI_Abort" not in done.stdout + done.stderr and "Traceback" not in done.stderr


@needs_mpi
def test_a_process_started_without_data_parallel_ends_the_job_within_the_timeout(tmp_path):
    # MPI_Init on rank 0 waits for a process that never starts MPI: the watchdog ends it
    base = ["copy", "--steps", "100000", "--batch-size", "4", *TINY]
    cmd = [str(MPIEXEC), "-n", "1", *PY, *base, "--out", str(tmp_path / "a"), "--data-parallel",
           ":", "-n", "1", *PY, *base, "--out", str(tmp_path / "b")]  # fmt: skip
    t0 = time.monotonic()
    done = _run(cmd, _env(), bound=TIMEOUT_S + 20)
    assert time.monotonic() - t0 < TIMEOUT_S + 10
    assert done.returncode != 0
    (line,) = [x for x in done.stderr.splitlines() if "MPI did not start" in x]
    assert f"within {TIMEOUT_S} s" in line and "--data-parallel" in line
    assert "Traceback" not in done.stderr and "Thread 0x" not in done.stderr


@needs_mpi
def test_a_different_device_or_progress_on_one_rank_is_allowed(tmp_path):
    base = ["copy", "--steps", "2", "--batch-size", "4", "--out", str(tmp_path / "r"), *TINY]
    done = _run(_mpmd([*base, "--device", "cpu"], [*base, "--no-progress"]), _env())
    assert done.returncode == 0, done.stderr


def test_differences_name_each_field_and_rank():
    same = {"seed": 0, "batch_size": 4, "start step": 0}
    assert agreement.differences([same, dict(same), dict(same)]) is None
    text = agreement.differences([same, dict(same, seed=1), dict(same, seed=2, batch_size=8)])
    assert "seed is 0 on rank 0 but 1 on rank 1, 2 on rank 2" in text
    assert "batch_size is 4 on rank 0 but 8 on rank 2" in text
    assert "start step" not in text and "Fix:" in text


# ------------------------------------------------------------------ the timeout's value
@pytest.mark.parametrize("text", ["abc", "0", "-5", "nan", "inf", "1e9", "0.5"])
def test_a_bad_collective_timeout_is_a_config_error_naming_the_variable(text):
    with pytest.raises(ConfigError, match=waiting.TIMEOUT_ENV):
        waiting.timeout_from_env({waiting.TIMEOUT_ENV: text})


def test_the_collective_timeout_defaults_to_300_s():
    assert waiting.timeout_from_env({}) == waiting.DEFAULT_TIMEOUT_S == 300
    assert waiting.timeout_from_env({waiting.TIMEOUT_ENV: " 12.5 "}) == 12.5


@needs_mpi
def test_a_bad_collective_timeout_under_mpiexec_is_one_line(tmp_path):
    env = dict(_env(), **{waiting.TIMEOUT_ENV: "soon"})
    done = _run(_dp(["copy", "--out", str(tmp_path / "r"), *TINY]), env)
    assert done.returncode == 2, done.stderr
    (line,) = _errors(done.stderr)
    assert f"{waiting.TIMEOUT_ENV}='soon' is not a number of seconds" in line


# ------------------------------------------------------------------ the first hour
@needs_mpi
def test_the_refusal_of_an_existing_run_is_one_line_with_the_data_parallel_resume(tmp_path):
    run = tmp_path / "r"
    args = ["copy", "--steps", "2", "--batch-size", "4", "--out", str(run), *TINY]
    first = _run(_dp(args), _env())
    assert first.returncode == 0, first.stderr
    again = _run(_dp(args), _env())
    assert again.returncode == 2, again.stderr
    (line,) = _errors(again.stderr)  # rank 0 alone prints it
    assert "already holds a run" in line
    assert f"`mpiexec -n 2 minitransformer train --resume {run} --data-parallel`" in line
    text = again.stdout + again.stderr
    assert "MPI_Abort" not in text and "BAD TERMINATION" not in text
    assert "step 1" not in again.stderr  # refused before any batch
    # the command it names resumes the run
    more = _run(_dp(["--resume", str(run), "--steps", "4", "--no-progress", "--no-plots"]), _env())
    assert more.returncode == 0, more.stderr
