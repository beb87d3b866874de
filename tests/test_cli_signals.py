"""Signals and pipes outside the training loop, and the first hour's rough edges.

- A signal after training's loop (the last save, the final evaluation, the result card, the
  plots) keeps the loop's contract: a checkpoint on disk, the resume command printed, exit
  130/143, the lock released, and a resume that finishes the run.
- SIGTERM or Ctrl-C in any other command, or while Python is still importing the package:
  one line and 143/130, never a traceback.
- Pipes: stdout closed by its reader (``| head -1``) ends quietly with 141; a closed stdin
  is one clear error.
- Errors are one line plus a pointer to --help, worded with flags; ``train --help`` shows
  defaults; validation metrics are printed while training; ``mt.Trainer`` and ``help(mt)``.

Signals are sent by the process to itself from inside a patched step of the work (the final
evaluation, the plots, a save), so the moment is exact. Where the code under test might not
handle the signal (a regression), the test runs it in a child process or first installs its
own handler, so the test fails instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tiny_runs import TINY

from minitransformer.cli import build_parser, cli_wording, main
from minitransformer.runtime import checkpoint
from minitransformer.train import TrainConfig, Trainer, evaluation, progress, report, trainer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")

ROOT = Path(__file__).resolve().parents[1]
STEPS = 6


def tiny(out, **changes) -> TrainConfig:
    fields = dict(
        task="copy", steps=STEPS, batch_size=8, warmup=10, out=str(out), progress=False,
        plots=False, log_every=2, eval_every=1000, eval_samples=8, checkpoint_every=1000,
        final_eval_samples=8, task_knobs=dict(n_train=200, n_valid=16, n_test=16, max_len=6),
        model_overrides=dict(d_model=16, h=2, N=1, d_ff=32),
    )  # fmt: skip
    fields.update(changes)
    return TrainConfig(**fields)


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def python(code: str, *args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with this checkout on the path."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=120, env=env(), cwd=cwd, **kw,
    )  # fmt: skip


def kill_self(name: str) -> None:
    os.kill(os.getpid(), getattr(signal, name))


@pytest.fixture
def guard():
    """Handlers of the test's own for SIGINT and SIGTERM while a Trainer runs in-process: a
    signal the Trainer does not handle fails the test instead of ending pytest. The Trainer
    must put them back."""

    def unhandled(signum, frame):
        raise AssertionError(f"signal {signum} reached the test: the Trainer did not handle it")

    previous = {s: signal.signal(s, unhandled) for s in (signal.SIGINT, signal.SIGTERM)}
    yield unhandled
    for number, handler in previous.items():
        signal.signal(number, handler)


def assert_stopped_and_resumable(out: Path, result, err: str, name: str, after_loop: bool):
    assert result == {"interrupted": True, "step": STEPS, "signal": name}
    assert f"Interrupted ({name})" in err and f"minitransformer train --resume {out}" in err
    assert ("in the final evaluation or plots" in err) == after_loop, err
    assert checkpoint.read_metadata(out / checkpoint.CHECKPOINT_NAME)["step"] == STEPS
    assert not (out / ".lock").exists()  # released
    resumed = Trainer.resume(out)
    card = resumed.train()
    assert card["steps"] == STEPS and "exact_match" in card["metrics"]
    assert json.loads((out / "result.json").read_text())["steps"] == STEPS


# ------------------------------------------------------------------ after the loop


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_in_the_final_evaluation(name, tmp_path, monkeypatch, capsys, guard):
    real = evaluation.evaluate

    def evaluate(model, task, split, *args, **kw):
        if split == "test":
            kill_self(name)  # the handler stops this evaluation at once
            raise AssertionError("the final evaluation went on after the signal")
        return real(model, task, split, *args, **kw)

    monkeypatch.setattr(evaluation, "evaluate", evaluate)
    out = tmp_path / "run"
    result = Trainer(tiny(out)).train()
    assert signal.getsignal(signal.SIGTERM) is guard  # the previous handlers are back
    assert signal.getsignal(signal.SIGINT) is guard
    assert not (out / "result.json").exists()
    monkeypatch.setattr(evaluation, "evaluate", real)
    assert_stopped_and_resumable(out, result, capsys.readouterr().err, name, after_loop=True)


def test_signal_while_drawing_the_plots(tmp_path, monkeypatch, capsys, guard):
    """The plots catch every Exception (a figure may fail); a stop still gets through."""
    monkeypatch.setattr(report, "draw_plots", lambda t: kill_self("SIGTERM"))
    out = tmp_path / "run"
    result = Trainer(tiny(out, plots=True)).train()
    monkeypatch.setattr(report, "draw_plots", lambda t: None)
    assert_stopped_and_resumable(out, result, capsys.readouterr().err, "SIGTERM", True)


def test_signal_during_the_last_save_waits_for_it(tmp_path, monkeypatch, capsys, guard):
    """The checkpoint being written is finished (never half a file), then the run stops
    before the final evaluation."""
    real = trainer.checkpoint.save_checkpoint

    def save(path, arrays, meta):
        if meta["step"] == STEPS:
            kill_self("SIGTERM")
        return real(path, arrays, meta)

    monkeypatch.setattr(trainer.checkpoint, "save_checkpoint", save)
    monkeypatch.setattr(evaluation, "evaluate", pytest.fail)  # never reached
    out = tmp_path / "run"
    result = Trainer(tiny(out)).train()
    monkeypatch.undo()
    assert_stopped_and_resumable(out, result, capsys.readouterr().err, "SIGTERM", False)


FINAL_EVAL_SIGNAL = """
    import os, signal, sys
    from minitransformer.train import evaluation
    real = evaluation.evaluate
    def evaluate(model, task, split, *args, **kw):
        if split == "test":
            os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        return real(model, task, split, *args, **kw)
    evaluation.evaluate = evaluate
    from minitransformer.cli import main
    sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(("name", "status"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_cli_stopped_in_the_final_evaluation(name, status, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "copy", "--steps", str(STEPS), "--out", str(out), *TINY]
    done = python(FINAL_EVAL_SIGNAL, name, *argv, cwd=tmp_path)
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert f"Interrupted ({name})" in done.stderr
    assert done.stderr.rstrip().endswith(f"minitransformer train --resume {out}")
    assert not (out / ".lock").exists() and not (out / "result.json").exists()
    assert checkpoint.read_metadata(out / checkpoint.CHECKPOINT_NAME)["step"] == STEPS

    code = main(["train", "--resume", str(out)])  # finishes the final evaluation
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "running its final evaluation" in printed.err
    assert json.loads((out / "result.json").read_text())["steps"] == STEPS


@pytest.mark.parametrize("command", ["evaluate", "translate"])
def test_sigterm_in_another_command_is_one_line_and_143(command, tmp_path):
    Trainer(tiny(tmp_path / "run")).train()
    done = python(
        """
        import os, signal, sys
        from minitransformer.runtime.translator import Translator
        def stop(self, *args, **kw):
            os.kill(os.getpid(), signal.SIGTERM)
            raise AssertionError("went on after SIGTERM")
        Translator.evaluate = Translator.translate = stop
        from minitransformer.cli import main
        sys.exit(main(sys.argv[1:]))
        """,
        command, "--checkpoint", str(tmp_path / "run"),
        *(["1 2"] if command == "translate" else []), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 143, done.stderr
    assert done.stderr.strip() == f"minitransformer {command}: stopped by SIGTERM"


# ------------------------------------------------------------------ the first moments

# The console script's entry point, run with Ctrl-C arriving right after ``{marker}`` is
# imported: an import hook raises KeyboardInterrupt there, which is what Python's SIGINT
# handler does, so the moment is exact. (A real SIGINT, sent from outside on seeing
# -X importtime's line or with os.kill from the hook, was in full-suite runs sometimes
# handled only once the trainer had installed its own handler: a graceful stop, not this.)
ENTRY = """
import importlib.machinery, sys

class CtrlCAfter:
    def find_spec(self, name, path=None, target=None):
        if name != {marker!r}:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            raise KeyboardInterrupt

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, CtrlCAfter())
import minitransformer_entry
sys.exit(minitransformer_entry.main())
"""


@pytest.mark.parametrize("marker", ["numpy", "minitransformer.nn", "minitransformer.train"])
def test_ctrl_c_while_the_package_imports(marker, tmp_path):
    """The console script's entry point: Ctrl-C while Python imports the package is one
    line and 130, and no run is started."""
    done = subprocess.run(
        [sys.executable, "-c", ENTRY.format(marker=marker), "train", "copy", "--out", "r",
         "--steps", "1", *TINY],
        capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=60,
    )  # fmt: skip
    said = [line for line in done.stderr.splitlines() if line]
    assert done.returncode == 130, said
    assert said == ["minitransformer: interrupted (Ctrl-C) while starting"]
    assert not (tmp_path / "r").exists()


def test_entry_point_catches_ctrl_c_in_the_import(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT))  # found before an install of another checkout
    import minitransformer_entry

    class Interrupting:
        def find_spec(self, name, path=None, target=None):
            if name == "minitransformer.cli":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "minitransformer.cli")
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    assert minitransformer_entry.main() == 130
    assert capsys.readouterr().err.strip() == "minitransformer: interrupted (Ctrl-C) while starting"


def test_ctrl_c_before_the_command_runs(tmp_path):
    done = python(
        """
        import sys
        from minitransformer import cli
        def interrupted():
            raise KeyboardInterrupt
        cli.build_parser = interrupted
        sys.exit(cli.main(["train", "copy"]))
        """,
        cwd=tmp_path,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "minitransformer: interrupted (Ctrl-C)"


# ------------------------------------------------------------------ pipes


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("signals") / "run"
    Trainer(tiny(out)).train()
    return out


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", "--checkpoint", "{run}", *["1 2 3 4"] * 300],
        ["evaluate", "--checkpoint", "{run}"],
        ["ablate", "--list"],
    ],
)
def test_closed_stdout_ends_quietly_with_141(argv, run, tmp_path):
    """``... | head -1``: the reader is gone before the output comes (the read end closed at
    once), so every write fails with EPIPE: no usage, no "[Errno 32] Broken pipe", no
    "Exception ignored" at exit; 141 as for ``cat`` killed by SIGPIPE."""
    argv = [a.replace("{run}", str(run)) for a in argv]
    proc = subprocess.Popen(
        [sys.executable, "-m", "minitransformer", *argv], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env(), cwd=tmp_path,
    )  # fmt: skip
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


def test_head_in_a_shell_pipeline(run, tmp_path):
    words = " ".join(['"1 2 3 4"'] * 3000)  # more than a pipe holds
    done = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m minitransformer translate --checkpoint {run} "
         f"{words} | head -1; echo status ${{PIPESTATUS[0]}} >&2"],
        capture_output=True, text=True, timeout=120, env=env(), cwd=tmp_path,
    )  # fmt: skip
    assert len(done.stdout.splitlines()) == 1
    assert done.stderr == "status 141\n"


def test_closed_stdin_is_one_clear_error(run, tmp_path, monkeypatch, capsys):
    done = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m minitransformer translate --checkpoint {run} <&-"],
        capture_output=True, text=True, timeout=120, env=env(), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0].startswith(
        "minitransformer translate: error: no sentences to translate: none were given and "
        "stdin is closed"
    )
    monkeypatch.setattr(sys, "stdin", None)  # what Python sets when fd 0 is closed
    assert main(["translate", "--checkpoint", str(run)]) == 2
    assert "stdin is closed" in capsys.readouterr().err


# ------------------------------------------------------------------ errors, help, output


def test_argparse_errors_are_one_line_and_a_pointer(capsys):
    assert main(["train", "copy", "--steps", "0"]) == 2
    assert capsys.readouterr().err == (
        "minitransformer train: error: argument --steps: expected a positive integer, got 0\n"
        "see: minitransformer train --help\n"
    )


@pytest.mark.parametrize(
    ("python_words", "cli_words"),
    [
        (
            "device 'cuda' was asked for, but CuPy finds no usable NVIDIA GPU/driver on this "
            "machine: use device='cpu', or run on a machine with a GPU",
            "device 'cuda' was asked for, but CuPy finds no usable NVIDIA GPU/driver on this "
            "machine: use --device cpu, or run on a machine with a GPU",
        ),
        ("TrainConfig: peak_lr must be in (0, 1)", "--lr must be in (0, 1)"),
        ("TrainConfig: clip_norm must be positive", "--clip-norm must be positive"),
        (
            "cannot resume r with other settings: batch_size (checkpoint 8, given 9); "
            "model_overrides (checkpoint {}, given {'N': 2})",
            "cannot resume r with other settings: --batch-size (checkpoint 8, given 9); "
            "--model (checkpoint {}, given {'N': 2})",
        ),
        (
            "or replace it with `--out r --overwrite` (deletes its plots). From Python: "
            "Trainer.resume(out), another TrainConfig.out, or trainer.train(overwrite=True)",
            "or replace it with `--out r --overwrite` (deletes its plots).",
        ),
    ],
)
def test_library_messages_are_worded_for_the_command_line(python_words, cli_words):
    assert cli_wording(python_words) == cli_words


def test_a_library_error_reaches_the_user_in_flag_words(tmp_path, monkeypatch, capsys):
    from minitransformer.backend import devices
    from minitransformer.errors import DeviceError

    def no_gpu(shown="device 'cuda'"):
        raise DeviceError(f"{shown}: CuPy finds no usable GPU: use device='cpu', or run on a GPU")

    with monkeypatch.context() as patch:
        patch.setattr(devices, "cupy_module", no_gpu)
        assert main(["train", "copy", "--device", "cuda", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (
        "minitransformer train: error: --device cuda: CuPy finds no usable GPU: use --device "
        "cpu, or run on a GPU\nsee: minitransformer train --help\n"
    )
    Trainer(tiny(tmp_path / "r", steps=2)).train()
    assert main(["train", "copy", "--out", str(tmp_path / "r"), *TINY]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "From Python" not in err and "Trainer" not in err


def test_train_help_shows_every_default(capsys):
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    for action in train._actions:
        takes_value = action.option_strings and action.nargs is None or action.nargs == 1
        if takes_value and action.dest not in ("help", "resume"):
            assert "default" in (action.help or ""), action.option_strings
    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "training steps (default: 3000 for copy, reverse, sort, lm; 4000 for translate" in text
    assert "--eval-every EVAL_EVERY steps between validation evaluations (default: 500)" in text


def test_validation_metrics_are_printed_above_the_progress_bar(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tqdm")
    monkeypatch.setattr(progress, "_isatty", lambda stream: True)  # a bar, as in a terminal
    Trainer(tiny(tmp_path / "run", progress=True, eval_every=2)).train()
    lines = capsys.readouterr().err.splitlines()
    valid = [line for line in lines if "valid" in line]
    assert valid and valid[0].startswith("valid at step 2:  loss "), lines
    assert "exact match " in valid[0] and "%" in valid[0]
    assert any(line.startswith("test at step 6, final:  loss ") for line in lines)


def test_the_package_face_in_a_fresh_interpreter(tmp_path):
    done = python(
        """
        import signal, sys, threading
        before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)]
        threads = threading.active_count()
        import minitransformer as mt
        assert "minitransformer.train" not in sys.modules  # Trainer loads on first use
        assert mt.TrainConfig(task="copy").task == "copy"
        assert mt.Trainer.__name__ == "Trainer" and mt.Translator.__name__ == "Translator"
        assert {"Trainer", "TrainConfig", "Translator"} <= set(dir(mt)) & set(mt.__all__)
        after = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)]
        assert before == after and threading.active_count() == threads
        import pydoc
        print(pydoc.render_doc(mt, renderer=pydoc.plaintext))
        """,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for words in ("Where to start", "lessons/00_tokens_from_scratch.ipynb",
                  "minitransformer train copy", "mt.Trainer(cfg).train()",
                  "docs/architecture.md"):  # fmt: skip
        assert words in done.stdout, words
