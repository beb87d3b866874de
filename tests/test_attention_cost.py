# ruff: noqa: E501 - one row per bad command line reads best on one line
"""The attention cost tool (``python -m minitransformer.tools.efficient_attention.cost``):
its flags refused in one line before anything is measured, the exponent fit and the
crossover on made-up rows whose answers are known, a tiny real run of every kind, the files
it writes (and refuses to write over), and the JSON's fields."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest

from minitransformer.errors import ArgumentError, Terminated
from minitransformer.tools.efficient_attention import cost, measure
from minitransformer.tools.efficient_attention.cost import main
from minitransformer.tools.efficient_attention.fit import (
    crossover,
    fit_exponent,
    fit_lengths,
    growth,
    summarize,
)
from minitransformer.tools.efficient_attention.report import markdown

PROG = cost.PROG


def run_tool(tool_main, argv, capsys):
    """(exit status, stdout, stderr) of a tool's ``main(argv)``."""
    code = tool_main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_tool_error(prog, python_words, code, err, *patterns):
    """Status 2, ONE error line of ``prog`` naming the problem in flag words, then the
    pointer to --help: no usage block, no traceback, none of ``python_words``."""
    assert code == 2, err
    assert "usage:" not in err and "Traceback" not in err, err
    lines = err.splitlines()
    assert lines == [lines[0], f"see: {prog} --help"], err
    assert lines[0].startswith(f"{prog}: error: "), err
    for word in python_words:
        assert word not in lines[0], (word, lines[0])
    for pattern in patterns:
        assert pattern in lines[0], (pattern, lines[0])


def run_main(argv, capsys):
    return run_tool(main, argv, capsys)


def assert_user_error(code, err, *patterns):
    words = ("='", "=True", "memory_limit_gib", "kinds=", "lengths=")
    assert_tool_error(PROG, words, code, err, *patterns)


# ------------------------------------------------------------------ flags refused
@pytest.mark.parametrize(
    ("argv", "patterns"),
    [
        (
            ["--kinds", "full,sparse"],
            ["--kinds", "full,blocked,local,strided,linear", "'full,sparse'"],
        ),
        (["--kinds", "local,local"], ["--kinds", "different kinds"]),
        (["--kinds", ""], ["--kinds"]),
        (["--lengths", "8"], ["--lengths", "16..65536", "got 8"]),
        (["--lengths", "256,100000"], ["--lengths", "got 100000"]),
        (["--lengths", "256,256"], ["--lengths", "different lengths"]),
        (["--lengths", "2.5k"], ["--lengths", "'2.5k'"]),
        (["--max-length", "128"], ["--max-length", "256..65536"]),
        (["--max-length", "1024", "--lengths", "256,512"], ["--lengths or --max-length, not both"]),
        (["--window", "0"], ["--window", "got 0"]),
        (["--window", "-3"], ["--window", "got -3"]),
        (["--stride", "0"], ["--stride", "got 0"]),
        (["--stride", "x"], ["--stride", "'x'"]),
        (["--repeats", "0"], ["--repeats", "1..100"]),
        (["--repeats", "101"], ["--repeats", "got 101"]),
        (["--head-size", "0"], ["--head-size"]),
        (["--head-size", "4096"], ["--head-size", "got 4096"]),
        (["--threads", "0"], ["--threads"]),
        (["--memory-limit", "0"], ["--memory-limit", "above 0"]),
        (["--memory-limit", "nan"], ["--memory-limit"]),
        (["--memory-limit", "inf"], ["--memory-limit"]),
        (["--memory-limit", "1e9"], ["--memory-limit", "this machine's"]),
        (["--out", " "], ["--out", "a folder name"]),
        (
            ["--max-length", "32768"],
            [
                "--max-length",
                "full attention at T = 32,768",
                "--memory-limit 8",
                "--max-length 16384",
            ],
        ),
        (
            ["--lengths", "256,8192", "--memory-limit", "0.5"],
            ["--lengths", "T = 8,192", "--memory-limit 0.5", "--max-length 256"],
        ),
        (
            ["--lengths", "65536", "--causal"],
            ["--lengths", "shorter --lengths", "--kinds without full"],
        ),
        (["--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
    ],
)
def test_a_bad_flag_is_one_line_before_anything_is_measured(
    argv, patterns, capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr(cost, "measure", lambda *a, **k: pytest.fail("measured"))
    code, out, err = run_main([*argv, "--out", str(tmp_path / "out")], capsys)
    assert_user_error(code, err, *patterns)
    assert out == "" and not (tmp_path / "out").exists()


def test_without_full_a_long_length_is_not_refused_for_its_memory(capsys, tmp_path, monkeypatch):
    """The memory limit is full attention's: local alone at 32,768 goes on to measure."""
    monkeypatch.setattr(cost, "measure", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    code, _, err = run_main(
        ["--kinds", "local", "--max-length", "32768", "--out", str(tmp_path / "o")], capsys
    )
    assert code == 130 and err.strip() == f"{PROG}: interrupted (Ctrl-C); nothing was written"


@pytest.mark.parametrize(
    ("stop", "status", "words"),
    [(KeyboardInterrupt, 130, "interrupted (Ctrl-C)"), (Terminated, 143, "stopped by SIGTERM"),
     (MemoryError, 1, "out of memory while measuring. Fix: a smaller --max-length")],
)  # fmt: skip
def test_a_stop_while_measuring_is_one_line_and_its_status(
    stop, status, words, capsys, tmp_path, monkeypatch
):
    def stopped(*args, **kwargs):
        raise stop()

    monkeypatch.setattr(cost, "measure", stopped)
    code, _, err = run_main(["--lengths", "32,64", "--out", str(tmp_path / "o")], capsys)
    assert code == status and len(err.strip().splitlines()) == 1 and words in err, err
    assert signal.getsignal(signal.SIGTERM) is not None


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(kinds="full"), ["kinds must be a list"]),
        (dict(kinds=["full", "sparse"]), ["kinds must be different names", "sparse"]),
        (dict(lengths=[]), ["lengths must be a list"]),
        (dict(lengths=[0]), ["each of lengths must be a positive int"]),
        (dict(lengths=[True]), ["each of lengths must be a positive int"]),
        (dict(lengths=[1 << 20]), ["lengths go up to 65,536"]),
        (dict(lengths=[64, 64]), ["lengths must differ"]),
        (dict(d=0), ["d must be a positive int"]),
        (dict(window=1.5), ["window must be a positive int"]),
        (dict(stride=0), ["stride must be a positive int"]),
        (dict(causal="yes"), ["causal must be True or False"]),
        (dict(repeats=1000), ["repeats must be at most 100"]),
        (dict(memory_limit_gib=-1), ["memory_limit_gib must be a finite number > 0"]),
        (dict(lengths=[32768]), ["full attention at T = 32,768", "memory_limit_gib=8"]),
        (dict(threads=0), ["threads must be a positive int"]),
    ],
)
def test_the_python_api_refuses_its_arguments_by_name(kwargs, words):
    arguments = dict(kinds=["full"], lengths=[32]) | kwargs
    with pytest.raises(ArgumentError) as caught:
        measure.measure(**arguments)
    for word in words:
        assert word in str(caught.value), str(caught.value)


# ------------------------------------------------------------------ the fit and the crossover
@pytest.mark.parametrize("power", [1.0, 1.5, 2.0, 0.5])
@pytest.mark.parametrize("scale", [1e-4, 3.0])
def test_the_exponent_of_a_power_law_is_its_power(power, scale):
    lengths = [256, 512, 1024, 2048, 4096, 8192, 16384]
    fit = fit_exponent(lengths, [scale * n**power for n in lengths])
    assert math.isclose(fit["exponent"], power, abs_tol=1e-9) and fit["rms"] < 1e-9
    assert fit["lengths"] == [1024, 2048, 4096, 8192, 16384]


def test_the_short_lengths_overhead_does_not_bend_the_exponent():
    """A fixed cost that dominates at T < 1,024 is left out of the fit."""
    lengths = [256, 512, 1024, 2048, 4096]
    values = [(1.0 if n < 1024 else 0.0) + 1e-6 * n**2 for n in lengths]
    assert math.isclose(fit_exponent(lengths, values)["exponent"], 2.0, abs_tol=1e-9)


@pytest.mark.parametrize(
    ("lengths", "used"),
    [([256, 512, 1024, 4096], [1024, 4096]), ([32, 64], [32, 64]), ([32, 64, 128], [64, 128]),
     ([16, 32, 64, 128, 256], [64, 128, 256]), ([512, 1024], [512, 1024]), ([4096], [])],
)  # fmt: skip
def test_the_fit_uses_the_long_lengths_or_the_longer_half(lengths, used):
    assert fit_lengths(lengths) == used


def test_no_exponent_from_fewer_than_two_usable_points():
    assert fit_exponent([1024], [1.0]) is None
    assert fit_exponent([1024, 2048], [0.0, 1.0]) is None
    with pytest.raises(ArgumentError, match="3 lengths but 2 values"):
        fit_exponent([1, 2, 3], [1, 2])


def rows_of(times: dict[str, list[float]], lengths=(256, 512, 1024, 2048)):
    return [dict(kind=k, length=n, median_s=t, min_s=t, max_s=t, times_s=[t], peak_bytes=n * 100)
            for k, ts in times.items() for n, t in zip(lengths, ts, strict=True)]  # fmt: skip


@pytest.mark.parametrize(
    ("mine", "expected"),
    [
        ([0.5, 3, 4, 5], 256),  # faster everywhere
        ([9, 9, 4, 5], 1024),  # from 1,024 on
        ([0.5, 9, 4, 5], 1024),  # faster at 256, not at 512: from 1,024, where it stays
        ([0.5, 0.5, 0.5, 99], None),  # slower at the longest: never in range
        ([99, 99, 99, 99], None),
        ([1, 2, 4, 8], 512),  # equal at 256 is not faster
    ],
)
def test_the_crossover_is_where_a_kind_becomes_and_stays_faster(mine, expected):
    rows = rows_of({"full": [1, 4, 16, 64], "local": mine})
    assert crossover(rows, "local") == expected


def test_the_summary_and_its_table_say_never_and_dash():
    rows = rows_of({"full": [1, 4, 16, 64], "local": [0.5, 3, 4, 5], "linear": [9, 9, 99, 999]})
    summary = summarize(rows)
    assert summary["full"]["crossover"] is None and not summary["full"]["compared_with_full"]
    assert summary["local"]["crossover"] == 256 and summary["linear"]["crossover"] is None
    assert growth(rows, "full") == {"ratio": 16.0, "from": 512, "to": 2048}
    assert growth(rows, "full", key="cpu_median_s") is None  # rows without CPU times
    assert growth(rows_of({"full": [1, 4, 16, 64]}, lengths=(256, 512, 1024, 4096)), "full") \
        == {"ratio": 4.0, "from": 1024, "to": 4096}  # fmt: skip
    alone = summarize(rows_of({"local": [2, 3, 4, 5]}))
    assert alone["local"]["crossover"] is None and not alone["local"]["compared_with_full"]
    settings = dict(kinds=["full", "local", "linear"], d=64, window=64, stride=None,
                    causal=False, repeats=1, block_size=64)  # fmt: skip
    record = dict(settings=settings, rows=rows, summary=summary, machine_line="M.",
                  load_average=[0.0, 0.0], wall_s=1.0)  # fmt: skip
    text = markdown(record)
    assert "| local | " in text and "| T = 256 |" in text and "| never in range |" in text
    assert "| 2,048 | 64 s | 5 s | 999 s |" in text


def test_the_memory_estimate_is_above_what_full_attention_holds():
    """The limit refuses by an estimate: it must not be below the measured peak."""
    for causal in (False, True):
        row = measure.measure_one("full", 512, causal=causal, repeats=1)
        assert row["peak_bytes"] <= measure.full_attention_bytes(512, causal)
        assert row["peak_bytes"] > 2 * 512 * 512 * 4  # at least the scores and weights


# ------------------------------------------------------------------ a real run and its files
@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One tiny real run of every kind through the command line (about a second)."""
    out = tmp_path_factory.mktemp("cost") / "out"
    code = main(["--lengths", "32,64,128", "--repeats", "2", "--stride", "8", "--out", str(out)])
    assert code == 0
    return out


def test_a_tiny_run_of_every_kind_writes_its_table_json_and_figure(measured):
    record = json.loads((measured / "cost.json").read_text(encoding="utf-8"))
    assert set(record) >= {"date", "settings", "machine", "machine_line", "load_average",
                           "wall_s", "memory_note", "rows", "summary", "fit_from"}  # fmt: skip
    assert record["settings"] | {} == record["settings"] and record["settings"]["kinds"] == list(
        measure.KINDS
    )
    assert {"processor", "cpu_count", "numpy", "python", "blas", "blas_threads"} <= set(
        record["machine"]
    )
    assert len(record["rows"]) == 3 * len(measure.KINDS)
    for row in record["rows"]:
        assert {
            "kind",
            "length",
            "median_s",
            "min_s",
            "max_s",
            "times_s",
            "cpu_median_s",
            "cpu_times_s",
            "peak_bytes",
        } <= set(row)
        assert len(row["times_s"]) == len(row["cpu_times_s"]) == 2
        assert row["min_s"] <= row["median_s"] <= row["max_s"] and row["cpu_median_s"] > 0
        assert row["peak_bytes"] > 0
    assert {r["stride"] for r in record["rows"] if r["kind"] == "strided"} == {8}
    for kind in measure.KINDS:
        entry = record["summary"][kind]
        assert entry["time_exponent"]["lengths"] == [64, 128]
        assert set(entry) == {"time_exponent", "cpu_time_exponent", "memory_exponent", "crossover",
                              "cpu_crossover", "compared_with_full", "growth_4x", "cpu_growth_4x"}  # fmt: skip
        assert (
            entry["cpu_time_exponent"]["lengths"] == [64, 128] and entry["growth_4x"]["to"] == 128
        )
    assert "| T | full | blocked | local | strided | linear |" in (measured / "cost.md").read_text()
    assert (measured / "plots" / "cost.png").read_bytes()[:4] == b"\x89PNG"


def test_a_folder_that_holds_anything_is_refused_unless_overwrite(
    measured, capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr(cost, "measure", lambda *a, **k: pytest.fail("measured"))
    code, _, err = run_main(["--lengths", "32,64", "--out", str(measured)], capsys)
    assert_user_error(code, err, f"--out '{measured}' is not empty", "--overwrite")
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    code, _, err = run_main(["--lengths", "32,64", "--out", str(a_file)], capsys)
    assert_user_error(code, err, "--out", "is a file")
    assert a_file.read_text() == "mine"


def test_overwrite_replaces_a_link_never_what_it_points_to(capsys, tmp_path):
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("keep me")
    os.symlink(victim, out / "cost.json")
    code, stdout, _ = run_main(["--kinds", "local,linear", "--lengths", "32,64", "--repeats", "1",
                                "--out", str(out), "--overwrite"], capsys)  # fmt: skip
    assert code == 0 and "| T | local | linear |" in stdout
    assert victim.read_text() == "keep me" and not (out / "cost.json").is_symlink()
    assert json.loads((out / "cost.json").read_text())["settings"]["kinds"] == ["local", "linear"]


def test_the_cpu_time_has_its_own_crossover_and_growth():
    """On a shared machine the wall clock and the CPU time can disagree: each is read alone."""
    rows = rows_of({"full": [1, 4, 16, 64], "local": [0.5, 3, 4, 5]})
    cpu = {("full", 256): 1, ("full", 512): 2, ("full", 1024): 8, ("full", 2048): 32,
           ("local", 256): 2, ("local", 512): 3, ("local", 1024): 4, ("local", 2048): 5}  # fmt: skip
    for row in rows:
        row["cpu_median_s"] = cpu[(row["kind"], row["length"])]
    assert crossover(rows, "local") == 256 and crossover(rows, "local", key="cpu_median_s") == 1024
    summary = summarize(rows)
    assert summary["local"]["cpu_crossover"] == 1024
    assert summary["full"]["cpu_growth_4x"] == {"ratio": 16.0, "from": 512, "to": 2048}
    assert math.isclose(summary["full"]["cpu_time_exponent"]["exponent"], 2.0)
    record = dict(settings=dict(kinds=["full", "local"], d=64, window=64, stride=None,
                                causal=False, repeats=1, block_size=64),
                  rows=rows, summary=summary, machine_line="M.", load_average=[0.0, 0.0],
                  wall_s=1.0)  # fmt: skip
    assert "| T = 256 (CPU T = 1,024) |" in markdown(record)
