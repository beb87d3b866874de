"""MPI_Init with a deadline (minitransformer/runtime/distributed/startup.py), without MPI: a fake
launcher starts a "rank 0" stuck where MPI_Init would be, a sibling rank (PMI_RANK set,
like the process started without --data-parallel) and a bystander (no rank variable).
When the timer fires, rank 0 prints one line and exits 1, and its watcher sends SIGTERM
to the sibling, never to the bystander: the job ends even when the launcher does not
end it (MPICH's proxy sometimes misses the rank's exit, and the other process trained on
for ever)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from minitransformer.runtime.distributed import startup

ROOT = Path(__file__).resolve().parents[1]

LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    py = sys.executable
    stuck = "from minitransformer.runtime.distributed import startup; import time; " \\
            "startup.arm(1.0, 'TEST_TIMEOUT'); time.sleep(60)"
    waits = "import signal, sys, time\\n" \\
            "def stop(*_): print('SIGTERM', flush=True); sys.exit(143)\\n" \\
            "signal.signal(signal.SIGTERM, stop); time.sleep(60)"
    rank0 = subprocess.Popen([py, "-c", stuck], env=dict(os.environ, PMI_RANK="0"),
                             stderr=subprocess.PIPE, text=True)
    sibling = subprocess.Popen([py, "-c", waits], env=dict(os.environ, PMI_RANK="1"),
                               stdout=subprocess.PIPE, text=True)
    bystander = subprocess.Popen([py, "-c", waits], stdout=subprocess.PIPE, text=True)
    err = rank0.communicate(timeout=30)[1]
    out = sibling.communicate(timeout=30)[0]
    alive = bystander.poll() is None
    bystander.kill()
    print(repr((rank0.returncode, err, sibling.returncode, out, alive)))
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the watchdog needs fork")
def test_a_stuck_rank_prints_one_line_and_its_watcher_ends_the_other_ranks():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"):
        env.pop(name, None)
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", LAUNCHER], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    code0, err0, code1, out1, bystander_alive = ast.literal_eval(done.stdout.splitlines()[-1])
    assert code0 == 1
    assert err0 == startup.message(1.0, "TEST_TIMEOUT")  # one line, no traceback
    assert (code1, out1.strip()) == (143, "SIGTERM")  # ended by the watcher, gracefully
    assert bystander_alive  # not a rank of the job: left alone
    assert time.monotonic() - t0 < 1.0 + startup.LAUNCHER_GRACE_S + 10


def test_without_a_launcher_no_process_is_a_sibling():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             env=dict(os.environ, PMI_RANK="3"))  # fmt: skip
    try:
        time.sleep(0.2)
        assert startup.job_siblings(os.getpid()) == [child.pid]
        assert startup.job_siblings(os.getpid(), exclude={child.pid}) == []
        assert startup.job_siblings(child.pid) == []  # it started nothing
        child.kill()
        deadline = time.monotonic() + 10
        while startup._alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert startup.job_siblings(os.getpid()) == []  # a zombie is not a sibling
    finally:
        child.kill()
        child.wait()


def test_the_message_names_the_variable_and_the_fix():
    line = startup.message(2.5, "MINITRANSFORMER_COLLECTIVE_TIMEOUT")
    assert line.count("\n") == 1 and "within 2.5 s (MINITRANSFORMER_COLLECTIVE_TIMEOUT)" in line
    assert "--data-parallel" in line and line.startswith("minitransformer: error:")
