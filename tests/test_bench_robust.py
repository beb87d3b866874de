"""``bench`` treats its flags and its output as hostile too (issue 47, causes 4, 12 and 13).

- ``--json FILE`` is checked before any timing and written through runs/outputs.py: a FIFO, a
  device or a directory there is refused; a symbolic link or an existing file too, unless
  ``--overwrite`` (which replaces the link itself, never what it points to).
- Every flag that sets a duration or a count is capped: ``--seconds`` (an hour per preset),
  ``--data-parallel`` (64 ranks), ``--preset`` (each once).
- SIGTERM or Ctrl-C while it times (to the process, or to its whole process group as a
  terminal does) ends it with 143/130 and one line, and no worker process is left running.

The flag and file tests never time anything: ``run`` is replaced by a stand-in that fails if
it is reached before the refusal, or returns a synthetic report.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_bench import _report
from test_cli import assert_user_error, run_main

from minitransformer.errors import ConfigError
from minitransformer.runtime.runs import outputs
from minitransformer.tools.bench import command as bench_command
from minitransformer.tools.bench import options

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_timing(monkeypatch):
    """``bench`` that must refuse before it times anything: reaching ``run`` (or, with
    --data-parallel, starting ``mpiexec -n N``) fails."""

    def run(*args, **kw):
        raise AssertionError("bench started timing before refusing its flags")

    monkeypatch.setattr(bench_command, "run", run)
    monkeypatch.setattr(bench_command, "data_parallel_main", run)


@pytest.fixture
def fake_timing(monkeypatch):
    """``bench`` whose timing returns a synthetic report at once."""
    report = _report([40.0, 41.0], [30.0, 31.0])
    monkeypatch.setattr(bench_command, "run", lambda *a, **k: report)
    return report


# ------------------------------------------------------------------ cause 4: --json


def bench_json(path, *more):
    return ["bench", "--preset", "tiny", "--seconds", "1", "--json", str(path), *more]


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_fifo_as_json_is_refused_before_any_timing(overwrite, tmp_path, capsys, no_timing):
    fifo = make_fifo(tmp_path / "results.json")
    code, _, err = run_main(bench_json(fifo, *overwrite), capsys)
    assert_user_error(code, err, "--json", "is a FIFO, not a plain file", "name a new file")
    assert fifo.is_fifo()  # left as it was


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_device_as_json_is_refused(device, capsys, no_timing):
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    code, _, err = run_main(bench_json(device, "--overwrite"), capsys)
    assert_user_error(code, err, f"--json {device} is a device")


@pytest.mark.parametrize("target", ["file", "missing", "folder"])
def test_a_symbolic_link_as_json_is_refused_without_overwrite(target, tmp_path, capsys, no_timing):
    victim = tmp_path / "victim"
    if target == "file":
        victim.write_text("the user's own file\n")
    elif target == "folder":
        victim.mkdir()
    link = tmp_path / "bench.json"
    link.symlink_to(victim)
    code, _, err = run_main(bench_json(link), capsys)
    assert_user_error(code, err, "--json", "is a symbolic link", "--overwrite")
    assert link.is_symlink()
    assert not victim.exists() or victim.is_dir() or victim.read_text() == "the user's own file\n"


@pytest.mark.parametrize("target", ["file", "missing"])
def test_overwrite_replaces_the_link_itself_not_what_it_points_to(
    target, tmp_path, capsys, fake_timing
):
    victim = tmp_path / "victim.txt"
    if target == "file":
        victim.write_text("the user's own file\n")
    link = tmp_path / "bench.json"
    link.symlink_to(victim)
    code, out, err = run_main(bench_json(link, "--overwrite"), capsys)
    assert code == 0, err
    assert not link.is_symlink() and '"presets"' in link.read_text()
    if target == "file":
        assert victim.read_text() == "the user's own file\n"
    else:
        assert not victim.exists()


@pytest.mark.parametrize("content", ["", "{}", "the user's notes\n"])
def test_an_existing_file_is_kept_unless_overwrite(content, tmp_path, capsys, no_timing):
    path = tmp_path / "bench.json"
    path.write_text(content)
    code, _, err = run_main(bench_json(path), capsys)
    assert_user_error(code, err, f"--json {path} already exists", "--overwrite")
    assert path.read_text() == content


def test_overwrite_replaces_an_existing_file(tmp_path, capsys, fake_timing):
    path = tmp_path / "bench.json"
    path.write_text("old")
    code, out, err = run_main(bench_json(path, "--overwrite"), capsys)
    assert code == 0, err
    assert '"presets"' in path.read_text() and f"results written to {path}" in out


def test_a_new_file_is_written_whole_and_no_temp_file_is_left(tmp_path, capsys, fake_timing):
    path = tmp_path / "bench.json"
    code, _, err = run_main(bench_json(path), capsys)
    assert code == 0, err
    assert '"presets"' in path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]


@pytest.mark.parametrize(
    ("name", "patterns"),
    [
        ("{tmp}/a-file/x.json", ["a-file is not a directory"]),
        ("{tmp}/no/such/x.json", ["does not exist", "mkdir -p"]),
        ("{tmp}", ["is a directory", "bench.json"]),
        ("/proc/bench.json", ["cannot create a file in /proc"]),
        ("{tmp}/" + "x" * 300 + ".json", ["File name too long"]),
    ],
)
def test_a_json_that_cannot_be_written_is_refused_before_timing(
    name, patterns, tmp_path, capsys, no_timing
):
    if name.startswith("/proc") and not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    (tmp_path / "a-file").write_text("x")
    code, _, err = run_main(bench_json(name.replace("{tmp}", str(tmp_path))), capsys)
    assert_user_error(code, err, "--json", *patterns)


@pytest.mark.parametrize("text", ["", "   "])
def test_a_blank_json_name_is_a_usage_error(text, capsys, no_timing):
    code, _, err = run_main(["bench", "--json", text], capsys)
    assert_user_error(code, err, "--json", "expected a file name")


def test_a_file_that_appears_while_bench_times_is_not_replaced(tmp_path, monkeypatch, capsys):
    """Checked at the start, and again when written: a file made meanwhile is left alone."""
    path = tmp_path / "bench.json"
    report = _report([40.0, 41.0], [30.0, 31.0])

    def run(*args, **kw):
        path.write_text("made by someone else while bench ran")
        return report

    monkeypatch.setattr(bench_command, "run", run)
    code, _, err = run_main(bench_json(path), capsys)
    assert_user_error(code, err, f"--json {path}", "already exists")
    assert path.read_text() == "made by someone else while bench ran"


def test_write_new_file_never_replaces_a_file_made_after_its_check(tmp_path, monkeypatch):
    """The race itself: the name is taken between the last check and the publishing."""
    path = tmp_path / "out.json"
    real = outputs.check_new_file

    def check_then_race(*args, **kw):
        real(*args, **kw)
        path.write_text("theirs")

    monkeypatch.setattr(outputs, "check_new_file", check_then_race)
    with pytest.raises(ConfigError, match="appeared meanwhile"):
        outputs.write_new_file(path, b"ours", "--json")
    assert path.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temp file left


def test_the_python_module_entry_refuses_the_same(tmp_path):
    """``python -m minitransformer.tools.bench`` shares the flags and the check."""
    path = tmp_path / "bench.json"
    path.write_text("keep")
    done = subprocess.run(
        [sys.executable, "-m", "minitransformer.tools.bench", "--preset", "tiny", "--json",
         str(path)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "already exists" in done.stderr and "Traceback" not in done.stderr
    assert path.read_text() == "keep"


# ------------------------------------------------------------------ cause 12: caps


@pytest.mark.parametrize(
    "value", ["1e308", "3600.5", "86400", "1e400", "inf", "-inf", "nan", "0", "-1", "1e-400"]
)
def test_seconds_outside_the_cap_are_refused(value, capsys, no_timing):
    code, _, err = run_main(["bench", "--preset", "tiny", f"--seconds={value}"], capsys)
    assert_user_error(code, err, "--seconds", "at most 3,600 seconds")


@pytest.mark.parametrize("value", ["0.01", "1", "3600"])
def test_seconds_within_the_cap_are_accepted(value):
    assert options.seconds(value) == float(value)


@pytest.mark.parametrize("value", ["65", "1000", "1000000000", "0", "-2", "2.5"])
def test_data_parallel_ranks_are_capped(value, capsys, no_timing):
    code, _, err = run_main(["bench", f"--data-parallel={value}"], capsys)
    assert_user_error(code, err, "--data-parallel", "1..64")


@pytest.mark.parametrize(
    "presets", [["tiny", "tiny"], ["small", "tiny", "small"], ["base", "base", "base"]]
)
def test_a_preset_given_twice_is_refused(presets, capsys, no_timing):
    argv = ["bench"] + [arg for name in presets for arg in ("--preset", name)]
    code, _, err = run_main(argv, capsys)
    assert_user_error(code, err, "--preset", "is given twice")


def test_distinct_presets_are_kept_in_order():
    parser = options.add_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--preset", "small", "--preset", "tiny"])
    assert args.preset == ["small", "tiny"]
    assert parser.parse_args([]).preset is None


# ------------------------------------------------------------------ cause 13: signals

needs_proc = pytest.mark.skipif(
    sys.platform == "win32" or not os.path.isdir("/proc/self"), reason="POSIX signals and /proc"
)


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_bench(tmp_path: Path, phase: str) -> tuple[subprocess.Popen, list[int]]:
    """``bench`` in a session of its own (as a terminal would start it), read until it
    reaches ``phase`` ("starting": its first worker; "timing": the timed rounds); returns it
    and its worker processes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "minitransformer", "bench", "--preset", "tiny", "--seconds", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        start_new_session=True,
    )  # fmt: skip
    marker = "starting ours-ref" if phase == "starting" else "timing"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            proc.kill()
            raise AssertionError(f"bench ended before {phase}: {proc.communicate()}")
        if marker in line:
            break
    time.sleep(0.5)  # well inside the phase
    return proc, children_of(proc.pid)


@needs_proc
@pytest.mark.parametrize(
    ("phase", "name", "to_group", "status", "line"),
    [
        ("timing", "SIGTERM", False, 143, "minitransformer bench: stopped by SIGTERM"),
        ("timing", "SIGTERM", True, 143, "minitransformer bench: stopped by SIGTERM"),
        ("timing", "SIGINT", True, 130, "minitransformer bench: interrupted (Ctrl-C)"),
        ("starting", "SIGTERM", True, 143, "minitransformer bench: stopped by SIGTERM"),
        ("starting", "SIGINT", True, 130, "minitransformer bench: interrupted (Ctrl-C)"),
    ],
)
def test_a_stop_while_bench_runs_is_one_line_and_leaves_no_worker(
    phase, name, to_group, status, line, tmp_path
):
    proc, workers = start_bench(tmp_path, phase)
    assert workers, "bench started no worker process"
    sig = getattr(signal, name)
    if to_group:
        os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C or `kill -- -PGID` does
    else:
        os.kill(proc.pid, sig)
    try:
        _, rest = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    said = [text for text in rest.splitlines() if text.strip()]
    assert proc.returncode == status, rest
    assert said and said[-1] == line, rest
    assert all(text.startswith("  starting ") for text in said[:-1]), rest
    assert "Traceback" not in rest and "Broken pipe" not in rest, rest
    assert [pid for pid in workers if running(pid)] == []


@needs_proc
def test_workers_end_when_bench_is_killed_outright(tmp_path):
    """SIGKILL cannot be caught: the workers notice their parent is gone and end too."""
    proc, workers = start_bench(tmp_path, "timing")
    assert workers
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in workers if running(pid)] == []
