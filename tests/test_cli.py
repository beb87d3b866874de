# ruff: noqa: E501 - one row per bad command line reads best on one line
"""The command line: user mistakes end with status 2, a one-line reason in command-line
words and a pointer to --help (no usage block, no traceback unless --debug); train /
evaluate / translate work end to end at tiny size; Ctrl-C on a real process saves a
checkpoint, exits 130 and prints the resume command. Signals and pipes at other moments:
tests/test_cli_signals.py.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tiny_runs import TINY

from minitransformer.cli import main
from minitransformer.runtime import checkpoint


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A 20-step copy run made through the CLI (shared by the tests that only read it)."""
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "copy", "--steps", "20", "--out", str(out), *TINY]) == 0
    return out


def run_main(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


PYTHON_WORDS = ("='", '="', "=True", "=False", "TrainConfig", "Trainer.", "From Python")


def assert_user_error(code, err, *patterns):
    """Status 2, ONE error line naming the problem (in command-line words, not Python's),
    then the pointer to --help: no usage block, no traceback."""
    assert code == 2, err
    assert "usage:" not in err and "Traceback" not in err, err
    lines = err.splitlines()
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1, err
    assert lines[-2:] == [errors[0], f"see: {errors[0].partition(': error:')[0]} --help"], err
    assert errors[0].startswith("minitransformer"), err
    for word in PYTHON_WORDS:
        assert word not in errors[0], (word, errors[0])
    for pattern in patterns:
        assert pattern in errors[0], (pattern, errors[0])


# ------------------------------------------------------------------ user mistakes


@pytest.mark.parametrize(
    ("argv", "patterns"),
    [
        ([], ["a COMMAND is needed"]),
        (["fly"], ["invalid choice: 'fly'"]),
        (["train"], ["train needs a TASK"]),
        (["train", "nosuchtask"], ["invalid choice: 'nosuchtask'", "copy"]),
        (["train", "copy", "--steps", "0"], ["--steps", "expected a positive integer, got 0"]),
        (["train", "copy", "--steps", "ten"], ["--steps", "'ten'"]),
        (["train", "copy", "--lr", "-1"], ["--lr", "positive number"]),
        (["train", "copy", "--dropout", "1.5"], ["--dropout", "[0, 1)"]),
        (["train", "copy", "--bogus"], ["unrecognized arguments: --bogus"]),
        (["train", "copy", "--model", "d_model"], ["KEY=VALUE"]),
        (["train", "copy", "--lr", "5", "--out", "{tmp}/a"], ["--lr must be in (0, 1)"]),
        (["train", "copy", "--device", "gpu7", "--out", "{tmp}/b"], ["unknown device 'gpu7'"]),
        (["train", "copy", "--knob", "bogus=1", "--out", "{tmp}/c"], ["no knob(s) ['bogus']"]),
        (["train", "copy", "--model", "d_model=7", "--out", "{tmp}/d"], ["divisible by h"]),
        (["train", "copy", "--out", "{tmp}/file", *TINY], ["is a file"]),
        (
            ["train", "--resume", "{tmp}/nowhere"],
            ["--resume", "no such run directory", "Fix: check the path"],
        ),
        (["train", "--resume", "{tmp}"], ["holds no checkpoint.safetensors"]),
        (
            ["translate", "--checkpoint", "{tmp}/nowhere", "hi"],
            [
                "no such run directory",
                "Fix: train one first (minitransformer train translate) or check the path",
            ],
        ),
        (["translate", "hi"], ["--checkpoint"]),
        (["translate", "--checkpoint", "{tmp}", "--beam", "0", "x"], ["--beam"]),
        (
            ["evaluate", "--checkpoint", "{tmp}/nowhere"],
            [
                "no such run directory",
                "Fix: train one first (minitransformer train translate) or check the path",
            ],
        ),
        (["evaluate", "--checkpoint", "{tmp}/file"], ["the file is not a .safetensors checkpoint"]),
        (["evaluate", "--checkpoint", "x", "--split", "train"], ["invalid choice: 'train'"]),
        (["plot", "--run", "{tmp}"], ["no metrics.jsonl"]),
        # every typed flag: type, range, finiteness; booleans only true/false/1/0/yes/no
        (
            ["train", "copy", "--model", "dropout=abc"],
            ["--model", "'dropout=abc'", "expected a number"],
        ),
        (
            ["train", "copy", "--model", "dropout=1.5"],
            ["--model", "dropout must be a number in [0, 1)"],
        ),
        (
            ["train", "copy", "--model", "pre_norm=abc"],
            ["--model", "'pre_norm=abc'", "true/false, 1/0 or yes/no"],
        ),
        (
            ["train", "copy", "--model", "max_len=100000000000"],
            ["--model", "above the cap of 65,536", "max_len=256"],
        ),
        (
            ["train", "copy", "--model", "d_model=8.5"],
            ["--model", "expected a whole number, got '8.5'"],
        ),
        (["train", "copy", "--model", "N=0"], ["--model", "N must be >= 1, got 0"]),
        (["train", "copy", "--model", "dmodel=8"], ["--model", "unknown key 'dmodel'", "d_model"]),
        (["train", "copy", "--model", "dtype=float16"], ["--model", "float32 or float64"]),
        (
            ["train", "copy", "--knob", "n_train=abc", "--out", "{tmp}/k1"],
            ["--knob n_train=abc", "whole number"],
        ),
        (
            ["train", "copy", "--knob", "n_train=-5", "--out", "{tmp}/k2"],
            ["--knob n_train=-5", "[1, 1,000,000]"],
        ),
        (
            ["train", "copy", "--knob", "n_train=1e12", "--out", "{tmp}/k3"],
            ["--knob n_train=", "whole number"],
        ),
        (
            ["train", "translate-en-es", "--knob", "lowercase=maybe", "--out", "{tmp}/k4"],
            ["--knob lowercase=maybe", "yes/no"],
        ),
        (["train", "copy", "--seed", "-1"], ["--seed", "non-negative integer"]),
        (["train", "copy", "--lr", "inf"], ["--lr", "positive number (finite)", "inf"]),
        (["train", "copy", "--lr", "nan"], ["--lr", "nan"]),
        (["train", "copy", "--clip-norm", "inf"], ["--clip-norm", "finite"]),
        (["train", "copy", "--label-smoothing", "nan"], ["--label-smoothing", "[0, 1)"]),
        (["train", "copy", "--batch-size", "1000000000"], ["--batch-size", "<= 100,000"]),
        (["bench", "--seconds", "inf"], ["--seconds", "positive number (finite)", "inf"]),
        (["bench", "--seconds", "nan"], ["--seconds", "nan"]),
        (["bench", "--seconds", "-1"], ["--seconds", "-1"]),
        (["bench", "--json", "{tmp}"], ["--json", "is a directory", "bench.json"]),
        (["bench", "--json", "{tmp}/no/such/dir.json"], ["--json", "does not exist"]),
        (
            ["translate", "--checkpoint", "{tmp}", "--alpha", "nan", "x"],
            ["--alpha", "finite number >= 0", "nan"],
        ),
        (["translate", "--checkpoint", "{tmp}", "--alpha", "inf", "x"], ["--alpha", "inf"]),
        (["evaluate", "--checkpoint", "{tmp}", "--alpha", "-5"], ["--alpha", "-5"]),
        (
            ["evaluate", "--checkpoint", "{tmp}", "--samples", "0"],
            ["--samples", "positive integer"],
        ),
    ],
)
def test_user_mistakes_exit_2_with_one_line_and_a_pointer(argv, patterns, tmp_path, capsys):
    (tmp_path / "file").write_text("not a checkpoint")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = run_main(argv, capsys)
    assert_user_error(code, err, *patterns)


def test_help_exits_0(capsys):
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0 and "train" in out and "translate" in out


def test_debug_shows_the_traceback(tmp_path):
    from minitransformer.errors import ConfigError

    with pytest.raises(ConfigError, match="peak_lr"):
        main(["train", "copy", "--lr", "5", "--out", str(tmp_path), "--debug"])
    with pytest.raises(ConfigError, match="peak_lr"):
        main(["--debug", "train", "copy", "--lr", "5", "--out", str(tmp_path)])


@pytest.mark.parametrize("command", ["translate", "evaluate", "resume"])
def test_corrupted_checkpoint_exits_2_with_the_reason(command, run, tmp_path, capsys):
    bad = tmp_path / "checkpoint.safetensors"
    data = (run / "checkpoint.safetensors").read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    argv = {
        "translate": ["translate", "--checkpoint", str(bad), "1 2"],
        "evaluate": ["evaluate", "--checkpoint", str(tmp_path)],
        "resume": ["train", "--resume", str(tmp_path)],
    }[command]
    code, out, err = run_main(argv, capsys)
    assert_user_error(code, err, str(bad), "truncated or corrupted")
    assert out == ""


def test_flipped_byte_fails_the_checksum(run, tmp_path, capsys):
    data = bytearray((run / "checkpoint.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside some weight array
    (tmp_path / "checkpoint.safetensors").write_bytes(bytes(data))
    code, _, err = run_main(["translate", "--checkpoint", str(tmp_path), "1 2"], capsys)
    assert_user_error(code, err)
    assert "checksum mismatch" in err or "corrupted" in err


def test_resume_with_another_task_or_model_exits_2(run, capsys):
    code, _, err = run_main(["train", "reverse", "--resume", str(run)], capsys)
    assert_user_error(code, err, "task (checkpoint 'copy', given 'reverse')")
    code, _, err = run_main(["train", "--resume", str(run), "--model", "d_model=32"], capsys)
    assert_user_error(code, err, "--model (checkpoint")


def test_a_diverging_run_exits_1_with_the_step(tmp_path, monkeypatch, capsys):
    from minitransformer.optim import Optimizer

    real = Optimizer.clip_grad_norm
    monkeypatch.setattr(Optimizer, "clip_grad_norm", lambda self, n: real(self, n) * math.nan)
    code, _, err = run_main(
        ["train", "copy", "--out", str(tmp_path), "--steps", "3", *TINY], capsys
    )
    assert code == 1
    assert "step 1: the loss is" in err and "gradient norm nan" in err
    assert "Traceback" not in err and "usage:" not in err


# ------------------------------------------------------------------ the happy paths


def test_train_prints_the_result_and_writes_the_run(run):
    card = json.loads((run / "result.json").read_text())
    assert card["steps"] == 20 and card["config"]["d_model"] == 16
    assert checkpoint.read_metadata(run / "checkpoint.safetensors")["step"] == 20


def test_plot_redraws_the_curves(run, tmp_path, capsys):
    assert main(["plot", "--run", str(run), "--to", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 1000
    assert "wrote" in capsys.readouterr().out


def test_plot_to_says_the_file_it_really_wrote(run, tmp_path, capsys):
    """--to DIR (existing) writes DIR/curves.png; --to NAME (no suffix) writes NAME.png;
    both print the real path. A suffix that is no image format is refused up front."""
    folder = tmp_path / "figs"
    folder.mkdir()
    assert main(["plot", "--run", str(run), "--to", str(folder)]) == 0
    assert (folder / "curves.png").stat().st_size > 1000
    assert capsys.readouterr().out.strip() == f"wrote {folder / 'curves.png'}"
    assert main(["plot", "--run", str(run), "--to", str(tmp_path / "curve")]) == 0
    assert (tmp_path / "curve.png").stat().st_size > 1000
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'curve.png'}"
    code, _, err = run_main(["plot", "--run", str(run), "--to", str(tmp_path / "c.jpeg")], capsys)
    assert_user_error(code, err, "--to", "'.jpeg'", ".png, .pdf or .svg")


def test_boolean_model_flags_accept_the_usual_words(tmp_path, capsys):
    from minitransformer.cli import build_parser

    for word, value in [("true", True), ("1", True), ("YES", True), ("false", False),
                        ("0", False), ("no", False)]:  # fmt: skip
        args = build_parser().parse_args(["train", "copy", "--model", f"pre_norm={word}"])
        assert args.model == [("pre_norm", value)]


def test_evaluate_says_split_sentences_and_decoding(run, capsys):
    code, out, err = run_main(["evaluate", "--checkpoint", str(run), "--samples", "4"], capsys)
    assert code == 0, err
    assert out.startswith("test split, 4 sentences, greedy: exact match ") and "of 4)" in out
    code, out, err = run_main(
        ["evaluate", "--checkpoint", str(run), "--split", "valid", "--beam", "2", "--json"],
        capsys,
    )
    assert code == 0, err
    metrics = json.loads(out)
    assert metrics["split"] == "valid" and metrics["decoding"] == "beam 2 (alpha 0.6)"
    assert metrics["sentences"] == 16 and 0 <= metrics["exact_match"] <= 1


def test_evaluate_rounds_bleu_to_two_decimals(run, capsys, monkeypatch):
    from minitransformer.runtime.translator import Translator

    scores = {"sentences": 1000, "exact_match": 0.97234, "bleu": 99.3456789}
    monkeypatch.setattr(Translator, "evaluate", lambda self, *a, **k: dict(scores))
    code, out, _ = run_main(["evaluate", "--checkpoint", str(run), "--beam", "4"], capsys)
    assert code == 0
    assert out == (
        "test split, 1,000 sentences, beam 4 (alpha 0.6): BLEU 99.35, "
        "exact match 97.2% (972 of 1,000)\n"
    )
    code, out, _ = run_main(["evaluate", "--checkpoint", str(run), "--json"], capsys)
    assert json.loads(out)["bleu"] == 99.35 and json.loads(out)["decoding"] == "greedy"


def test_translate_arguments_and_stdin(run, capsys, monkeypatch):
    code, out, err = run_main(["translate", "--checkpoint", str(run), "1 2 3", "4"], capsys)
    assert code == 0, err
    assert len(out.splitlines()) == 2

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"1 2\n\n3 \xff 4\n")))
    code, out, err = run_main(["translate", "--checkpoint", str(run), "--beam", "2"], capsys)
    assert code == 0, err
    lines = out.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""  # the empty line stays empty
    assert "<unk>" in err  # the undecodable byte became an unknown token, with a warning


def test_resume_to_more_steps(run, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    code, out, err = run_main(["train", "--resume", str(copy), "--steps", "22"], capsys)
    assert code == 0, err
    assert "resuming at step 20" in err and out.startswith("result card: ")  # no JSON line
    code, out, err = run_main(["train", "--resume", str(copy), "--steps", "23", "--json"], capsys)
    result = json.loads(out.splitlines()[0])  # --json: the result for scripts
    # a resumed card's wall time is its last session's, its training time the whole run's
    # (train/report.py): no order between them, unlike a run in one session
    card = json.loads((copy / "result.json").read_text())
    assert result["steps"] == 23 and card["resumed_at_step"] == 22
    assert result["wall_time_s"] >= 0 and result["train_time_s"] >= 0


# ------------------------------------------------------------------ real processes


def _env():
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_real_process_user_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "minitransformer", "train", "nosuchtask"],
        capture_output=True, text=True, timeout=60, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("minitransformer train: error: argument TASK: invalid choice")
    assert "invalid choice: 'nosuchtask'" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.endswith("\nsee: minitransformer train --help\n")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child is POSIX")
def test_ctrl_c_saves_exits_130_and_prints_the_resume_command(tmp_path, capsys):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "minitransformer", "train", "copy", "--steps", "400",
           "--out", str(out), "--checkpoint-every", "1000", "--log-every", "1", *TINY]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path
    )
    watchdog = threading.Timer(90, proc.kill)  # never hang the test suite
    watchdog.start()
    try:
        seen = []
        for line in proc.stderr:  # wait for the first step's log line
            seen.append(line)
            if line.startswith("step 1/400"):
                break
        proc.send_signal(signal.SIGINT)
        stdout, rest = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
    stderr = "".join(seen) + rest
    assert proc.returncode == 130, stderr
    assert f"minitransformer train --resume {out}" in stderr
    assert "Traceback" not in stderr and stdout == ""
    step = checkpoint.read_metadata(out / "checkpoint.safetensors")["step"]
    assert 1 <= step < 400

    resume = ["train", "--resume", str(out), "--steps", str(step + 2), "--json"]
    code, stdout, err = run_main(resume, capsys)
    assert code == 0, err
    assert json.loads(stdout.splitlines()[0])["steps"] == step + 2
    assert checkpoint.read_metadata(out / "checkpoint.safetensors")["step"] == step + 2
