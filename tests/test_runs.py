"""Run directories (runs.py): never lose a run, one writer at a time, SIGTERM like Ctrl-C,
missing optional packages as one line, and every field of a checkpoint checked on resume.

Runs are copy tasks of 200 sequences with a 1-layer d_model 16 model (milliseconds a step).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from tiny_runs import KNOBS, SIZE, TINY

from minitransformer.cli import main
from minitransformer.errors import CheckpointError
from minitransformer.runtime import checkpoint, runs
from minitransformer.runtime.runs import RunDirectoryError
from minitransformer.runtime.translator import Translator
from minitransformer.train import TrainConfig, Trainer

posix_only = pytest.mark.skipif(os.name != "posix", reason="signals and flock are POSIX")


def tiny(out, **changes) -> TrainConfig:
    fields = dict(
        task="copy", steps=6, batch_size=8, warmup=10, peak_lr=3e-3, dropout=0.1,
        out=str(out), progress=False, plots=False, log_every=2, eval_every=1000,
        eval_samples=8, checkpoint_every=1000, final_eval_samples=8,
        task_knobs=dict(KNOBS), model_overrides=dict(SIZE),
    )  # fmt: skip
    fields.update(changes)
    return TrainConfig(**fields)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------ an existing run is kept


def test_train_on_an_existing_run_is_refused_and_the_run_kept(tmp_path, capsys):
    out = tmp_path / "R"
    assert main(["train", "copy", "--steps", "6", "--out", str(out), *TINY]) == 0
    before = {p: (out / p).read_bytes() for p in ("checkpoint.safetensors", "metrics.jsonl")}
    capsys.readouterr()
    code = main(["train", "copy", "--steps", "2", "--out", str(out), *TINY])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = next(x for x in err.splitlines() if "error:" in x)
    assert "already holds a run (checkpoint.safetensors at step 6, metrics.jsonl)" in line
    for way in (f"minitransformer train --resume {out}", "another --out", "add --overwrite"):
        assert way in line, way
    assert "Ways on" not in line and len(line) - len(str(out)) * 2 < 240, line
    # refused before the task and the model were built: no "copy: vocab" or "model:" line
    assert err.splitlines() == [line, "see: minitransformer train --help"], err
    assert {p: (out / p).read_bytes() for p in before} == before  # nothing touched


def test_the_default_out_is_protected_too(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "copy", "--steps", "2", *TINY]) == 0
    first = (tmp_path / "runs" / "copy" / "checkpoint.safetensors").read_bytes()
    assert main(["train", "copy", "--steps", "2", *TINY]) == 2
    assert "--resume runs/copy" in capsys.readouterr().err
    assert (tmp_path / "runs" / "copy" / "checkpoint.safetensors").read_bytes() == first


def test_overwrite_replaces_the_run_cleanly(tmp_path, capsys):
    out = tmp_path / "R"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "curves.png").write_bytes(b"old")
    (out / "notes.txt").write_text("mine")  # not a run file: stays
    assert main(["train", "copy", "--steps", "6", "--out", str(out), *TINY]) == 0
    assert main(["train", "copy", "--steps", "4", "--out", str(out), "--overwrite", *TINY]) == 0
    records = _records(out)
    assert [r["step"] for r in records if r["split"] == "train"] == [4]  # only the new run's
    assert max(r["step"] for r in records) == 4
    assert checkpoint.read_metadata(out / "checkpoint.safetensors")["step"] == 4
    assert json.loads((out / "result.json").read_text())["steps"] == 4
    assert not (out / "plots" / "curves.png").exists() and (out / "notes.txt").exists()
    assert not (out / runs.LOCK_NAME).exists()  # released


def test_the_api_refuses_too_but_a_trainer_may_continue_its_own_run(tmp_path):
    first = Trainer(tiny(tmp_path, steps=3))
    first.train()
    python_ways = r"From Python: Trainer.resume\(out\), another TrainConfig.out, or train\(overw"
    with pytest.raises(RunDirectoryError, match="already holds a run.*" + python_ways):
        Trainer(tiny(tmp_path, steps=3)).train()
    first.cfg.steps = 5
    first.train()  # the same trainer goes on writing its own run
    assert checkpoint.read_metadata(tmp_path / "checkpoint.safetensors")["step"] == 5
    Trainer(tiny(tmp_path, steps=2)).train(overwrite=True)
    assert max(r["step"] for r in _records(tmp_path)) == 2


def test_resume_into_another_existing_run_is_refused(tmp_path):
    Trainer(tiny(tmp_path / "a", steps=2)).train()
    Trainer(tiny(tmp_path / "b", steps=2)).train()
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        Trainer.resume(tmp_path / "a", out=str(tmp_path / "b"), steps=3).train()


def test_the_cli_refuses_an_out_before_it_builds_anything(tmp_path, monkeypatch, capsys):
    """check_out, the refusals of open_run made ahead: nothing is built, created or locked."""
    Trainer(tiny(tmp_path / "a", steps=2)).train()
    Trainer(tiny(tmp_path / "b", steps=2)).train()
    (tmp_path / "file").write_text("x")
    capsys.readouterr()

    def never(*args, **kwargs):
        raise AssertionError("the task was built before the refusal")

    monkeypatch.setattr("minitransformer.train.trainer.make_task", never)
    for argv, problem in [
        (["train", "copy", "--out", str(tmp_path / "a")], "already holds a run"),
        (["train", "copy", "--out", str(tmp_path / "file")], "is a file"),
        (["train", "--resume", str(tmp_path / "a"), "--out", str(tmp_path / "b")], "holds a run"),
    ]:
        assert main([*argv, *TINY]) == 2
        err = capsys.readouterr().err
        assert problem in err and len(err.splitlines()) == 2, err
    assert not (tmp_path / "a" / runs.LOCK_NAME).exists()
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        runs.check_out(tmp_path / "a", owned=False)
    runs.check_out(tmp_path / "a", owned=True)  # its own run: fine
    runs.check_out(tmp_path / "a", owned=False, overwrite=True)  # replacing it: fine
    runs.check_out(tmp_path / "new", owned=False)
    assert not (tmp_path / "new").exists()  # checked, not created


# ------------------------------------------------------------------ one writer


@posix_only
def test_a_second_process_is_refused_naming_the_pid(tmp_path, capsys):
    out = tmp_path / "R"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from minitransformer.runtime.runs import RunLock; "
         "lock = RunLock.acquire(Path(sys.argv[1])); "
         "print('locked', flush=True); time.sleep(60)", str(out)],
        stdout=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        code = main(["train", "copy", "--steps", "2", "--out", str(out), *TINY])
        err = capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert f"is in use: process {holder.pid} is training there" in err
    assert not (out / "checkpoint.safetensors").exists()
    # the holder is dead now: its lock is taken over, with a note
    assert main(["train", "copy", "--steps", "2", "--out", str(out), *TINY]) == 0
    assert f"took over the lock of {out} from process {holder.pid}" in capsys.readouterr().err


def test_two_trainers_in_one_process_on_one_directory(tmp_path):
    with runs.RunLock.acquire(tmp_path):
        with pytest.raises(RunDirectoryError, match=rf"process {os.getpid()} \(this process"):
            Trainer(tiny(tmp_path, steps=2)).train()
    Trainer(tiny(tmp_path, steps=2)).train()  # released: fine now


@posix_only
def test_temp_files_of_dead_writers_are_removed_on_resume(tmp_path, capsys):
    Trainer(tiny(tmp_path, steps=2)).train()
    dead = tmp_path / f".checkpoint.safetensors.{_dead_pid()}-0a1b2c3d.tmp"
    alive = tmp_path / f".checkpoint.safetensors.{os.getppid()}-0a1b2c3d.tmp"
    other = tmp_path / ".notes.tmp"
    for path in (dead, alive, other):
        path.write_bytes(b"half a checkpoint")
    Trainer.resume(tmp_path, steps=3).train()
    assert not dead.exists() and alive.exists() and other.exists()
    assert "removed 1 temporary file(s)" in capsys.readouterr().err


# ------------------------------------------------------------------ signals, order, hints


@posix_only
def test_sigterm_saves_exits_143_and_prints_a_quoted_resume_command(tmp_path, capsys):
    out = tmp_path / "my run"  # a space: the printed command must still work
    cmd = [sys.executable, "-m", "minitransformer", "train", "copy", "--steps", "400",
           "--out", str(out), "--checkpoint-every", "1000", "--log-every", "1", *TINY]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path
    )
    watchdog = threading.Timer(90, proc.kill)
    watchdog.start()
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("step 1/400"):
                break
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
    stderr = "".join(seen) + rest
    assert proc.returncode == 143, stderr
    assert "Interrupted (SIGTERM)" in stderr and "Traceback" not in stderr
    step = checkpoint.read_metadata(out / "checkpoint.safetensors")["step"]
    assert 1 <= step < 400
    printed = stderr.strip().splitlines()[-1].strip()
    assert printed == f"minitransformer train --resume '{out}'"
    argv = shlex.split(printed)[1:]  # what a shell would pass
    capsys.readouterr()
    assert main([*argv, "--steps", str(step + 1)]) == 0, capsys.readouterr().err
    assert checkpoint.read_metadata(out / "checkpoint.safetensors")["step"] == step + 1


def test_sigterm_in_process_finishes_the_step_and_restores_the_handler(tmp_path, monkeypatch):
    trainer = Trainer(tiny(tmp_path, steps=20))
    step = trainer.train_step

    def step_then_term(batch):
        value = step(batch)
        if trainer.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return value

    monkeypatch.setattr(trainer, "train_step", step_then_term)
    before = signal.getsignal(signal.SIGTERM)
    assert trainer.train() == {"interrupted": True, "step": 3, "signal": "SIGTERM"}
    assert checkpoint.read_metadata(tmp_path / "checkpoint.safetensors")["step"] == 3
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_checkpoint_is_written_before_the_evaluation(tmp_path, monkeypatch):
    trainer = Trainer(tiny(tmp_path, steps=8, eval_every=4, checkpoint_every=4))

    def broken(*args, **kwargs):
        raise RuntimeError("the evaluation broke")

    monkeypatch.setattr(trainer, "evaluate", broken)
    with pytest.raises(RuntimeError, match="the evaluation broke"):
        trainer.train()
    assert checkpoint.read_metadata(tmp_path / "checkpoint.safetensors")["step"] == 4


def test_resume_hints_are_shell_quoted(tmp_path):
    out = tmp_path / "a b$(echo x)"
    assert runs.resume_command(out) == f"minitransformer train --resume '{out}'"
    trainer = Trainer(tiny(out, steps=2))
    trainer.train()
    assert runs.resume_command(out) in trainer._last_good()


def test_progress_without_a_terminal_is_plain_lines(tmp_path, capsys):
    Trainer(tiny(tmp_path, steps=6, progress=True)).train()  # capsys: stderr is no terminal
    err = capsys.readouterr().err
    assert "\r" not in err
    assert [x.split()[1] for x in err.splitlines() if x.startswith("step ")] == [
        "2/6",
        "4/6",
        "6/6",
    ]


# ------------------------------------------------------------------ optional packages


def test_translate_without_sacrebleu_still_checkpoints_and_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)  # `import sacrebleu` now fails
    cfg = tiny(tmp_path, task="translate", steps=4, eval_every=2, checkpoint_every=2,
               task_knobs=dict(n_train=100, n_valid=8, n_test=8))  # fmt: skip
    result = Trainer(cfg).train()
    assert checkpoint.read_metadata(tmp_path / "checkpoint.safetensors")["step"] == 4
    assert "bleu" not in result["metrics"] and "exact_match" in result["metrics"]
    notes = [x for x in capsys.readouterr().err.splitlines() if "sacrebleu" in x]
    assert notes == [
        "minitransformer: note: sacrebleu is not installed, so BLEU is left out of the "
        "evaluations (pip install sacrebleu)"
    ]


def test_evaluate_without_sacrebleu_names_the_package(tmp_path, monkeypatch, capsys):
    Trainer(tiny(tmp_path, steps=1)).train()
    arrays, meta = checkpoint.load_checkpoint(tmp_path / "checkpoint.safetensors")
    meta["train_config"]["task"] = "translate"  # a translation run, as far as evaluate knows
    checkpoint.save_checkpoint(tmp_path / "checkpoint.safetensors", arrays, meta)
    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "minitransformer evaluate: error: evaluate: BLEU needs the package sacrebleu, which is "
        "not installed. Fix: pip install sacrebleu"
    ]


def _without_matplotlib(monkeypatch):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)


def test_plot_and_training_without_matplotlib(tmp_path, monkeypatch, capsys):
    _without_matplotlib(monkeypatch)
    result = Trainer(tiny(tmp_path, steps=2, plots=True)).train()
    assert result["steps"] == 2 and not (tmp_path / "plots").exists()
    assert "matplotlib is not installed, so no plots were drawn" in capsys.readouterr().err
    assert main(["plot", "--run", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "pip install matplotlib" in err


def test_a_missing_package_without_a_hint_gets_one(monkeypatch, capsys):
    import minitransformer.cli as cli

    def run(args, parser):
        raise ModuleNotFoundError("No module named 'tqdm'", name="tqdm")

    monkeypatch.setattr(cli, "_run", run)
    assert main(["plot", "--run", "x"]) == 1
    assert "Fix: pip install tqdm" in capsys.readouterr().err


# ------------------------------------------------------------------ an edited metrics log


def test_an_edited_metrics_log_is_cleaned_on_resume(tmp_path, capsys):
    Trainer(tiny(tmp_path, steps=4)).train()
    with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as log:
        log.write('{"step": "3", "split": "train", "loss": 1}\n')  # a string step
        log.write('{"step": 2, "split": "train", "loss": NaN}\n')  # not finite
        log.write("[1, 2, 3]\n{}\n")  # not records
        log.write('{"step": 1, "split": ["x"]}\n')
    with open(tmp_path / "metrics.jsonl", "ab") as log:
        log.write(b"\xff\xfe\x00 junk\n" + b"[" * 100_000 + b"\n")  # binary, too deep
    Trainer.resume(tmp_path, steps=6).train()
    err = capsys.readouterr().err
    assert "left out 7 line(s) that are not metric records" in err
    records = _records(tmp_path)
    assert all(isinstance(r["step"], int) for r in records)
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6]


# ------------------------------------------------------------------ every checkpoint field


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("good")
    Trainer(tiny(out, steps=3)).train()
    return out


def _edited(good: Path, tmp_path: Path, edit) -> Path:
    """A copy of the good run's checkpoint, edited, then re-saved (so its checksum is valid:
    what a tool that rewrites checkpoints would produce)."""
    arrays, meta = checkpoint.load_checkpoint(good / "checkpoint.safetensors")
    for key in checkpoint.RESERVED_METADATA_KEYS:
        meta.pop(key)
    edit(arrays, meta)
    checkpoint.save_checkpoint(tmp_path / "checkpoint.safetensors", arrays, meta)
    return tmp_path


def _set(*keys, value):
    def edit(arrays, meta):
        target = meta
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return edit


def _drop(*keys):
    def edit(arrays, meta):
        target = meta
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return edit


def _arrays(change):
    def edit(arrays, meta):
        change(arrays)

    return edit


def _first(arrays, prefix):
    return next(k for k in sorted(arrays) if k.startswith(prefix))


def _drop_prefix(prefix):
    def change(arrays):
        for key in [k for k in arrays if k.startswith(prefix)]:
            del arrays[key]

    return _arrays(change)


def _drop_one(prefix):
    return _arrays(lambda a: a.pop(_first(a, prefix)))


def _retype(prefix, dtype):
    def change(arrays):
        key = _first(arrays, prefix)
        arrays[key] = arrays[key].astype(dtype)

    return _arrays(change)


def _poison(prefix, value):
    def change(arrays):
        key = _first(arrays, prefix)
        arrays[key] = arrays[key].copy()
        arrays[key].flat[0] = value

    return _arrays(change)


def _reshape(prefix):
    def change(arrays):
        key = _first(arrays, prefix)
        arrays[key] = np.zeros((*arrays[key].shape, 2), arrays[key].dtype)

    return _arrays(change)


BAD_FIELDS = [
    ("step -1", _set("step", value=-1), "field 'step' is -1"),
    ("step 2.5", _set("step", value=2.5), "field 'step' is 2.5"),
    ("step true", _set("step", value=True), "field 'step' is True"),
    ("step huge", _set("step", value=10**30), "field 'step'"),
    ("step str", _set("step", value="3"), "field 'step' is '3'"),
    ("step null", _set("step", value=None), "field 'step' is None"),
    ("no step", _drop("step"), "lacks 'step'"),
    ("losses short", _set("losses", value=[1.0]), "field 'losses' must list one loss per step"),
    ("losses nan", _set("losses", value=[1.0, math.nan, 1.0]), "field 'losses[1]' is nan"),
    ("losses str", _set("losses", value="abc"), "field 'losses'"),
    ("elapsed -1", _set("elapsed", value=-1.0), "field 'elapsed'"),
    ("elapsed inf", _set("elapsed", value=math.inf), "field 'elapsed' is inf"),
    ("train_config list", _set("train_config", value=[1]), "field 'train_config' is a JSON list"),
    ("steps str", _set("train_config", "steps", value="abc"), "'train_config.steps' is a JSON str"),
    ("batch -3", _set("train_config", "batch_size", value=-3), "batch_size must be a positive"),
    ("unknown option", _set("train_config", "bogus", value=1), "options this version does not"),
    ("knob list", _set("train_config", "task_knobs", "n_train", value=[1]), "task_knobs"),
    ("d_model str", _set("model_config", "d_model", value="big"), "'model_config.d_model'"),
    ("dropout nan", _set("model_config", "dropout", value=math.nan), "model_config.dropout"),
    ("model_config str", _set("model_config", value="x"), "field 'model_config'"),
    ("no optimizer", _drop("optimizer"), "lacks 'optimizer'"),
    ("optimizer list", _set("optimizer", value=[]), "field 'optimizer' is a JSON list"),
    ("optimizer empty", _set("optimizer", value={}), "field 'optimizer' lacks"),
    ("optimizer step -5", _set("optimizer", "step", value=-5), "'optimizer.step' is negative"),
    ("betas 5", _set("optimizer", "betas", value=[5.0, 5.0]), "'optimizer.betas' is [5.0, 5.0]"),
    ("eps str", _set("optimizer", "eps", value="x"), "'optimizer.eps' is a JSON str"),
    ("type SGD", _set("optimizer", "type", value="SGD"), "'optimizer.type' is 'SGD'"),
    ("lr nan", _set("optimizer", "lr", value=math.nan), "'optimizer.lr' is nan"),
    ("no optim arrays", _drop_prefix("optim."), "field 'optim' does not fit"),
    ("one optim array", _drop_one("optim."), "missing keys"),
    ("optim nan", _poison("optim.", math.nan), "holds NaN or Inf"),
    ("optim int", _retype("optim.", np.int64), "has dtype int64"),
    ("model nan", _poison("model.", math.nan), "holds NaN or Inf"),
    ("model inf", _poison("model.", -math.inf), "holds NaN or Inf"),
    ("model bool", _retype("model.", np.bool_), "has dtype bool"),
    ("model int", _retype("model.", np.int32), "has dtype int32"),
    ("model f64", _retype("model.", np.float64), "has dtype float64, expected float32"),
    ("model shape", _reshape("model."), "mis-shaped"),
    ("model missing", _drop_one("model."), "missing keys"),
    (
        "model extra",
        _arrays(lambda a: a.update({"model.extra": np.zeros(2, np.float32)})),
        "unexpected keys",
    ),  # fmt: skip
    ("schedule warmup", _set("schedule", "warmup", value=99), "'schedule.warmup' is 99"),
    ("schedule factor", _set("schedule", "factor", value="x"), "'schedule.factor'"),
    ("schedule step", _set("schedule", "step", value=-1), "'schedule.step' is negative"),
    ("stream position", _set("stream", "position", value=10**9), "'stream.position'"),
    ("stream epoch", _set("stream", "epoch", value=-1), "'stream.epoch' is negative"),
    ("stream key", _drop("stream", "position"), "'stream' lacks 'position'"),
    ("stream batch", _set("stream", "batch_size", value=9), "'stream.batch_size' is 9"),
    ("rng state", _set("rng", "bit_generator", "state", "state", value="abc"), "field 'rng'"),
    ("rng huge", _set("rng", "bit_generator", "state", "state", value="9" * 5000), "'rng'"),
    ("rng null", _set("rng", value=None), "field 'rng' is a JSON null"),
    ("tokens dict", _set("tokenizer", "tokens", value={"a": 1}), "'tokenizer.tokens'"),
    ("tokens ints", _set("tokenizer", "tokens", value=[1, 2]), "'tokenizer.tokens'"),
    ("no kind", _drop("kind"), "not a training checkpoint"),
]


@pytest.mark.parametrize(
    ("edit", "words"), [c[1:] for c in BAD_FIELDS], ids=[c[0] for c in BAD_FIELDS]
)
def test_every_field_of_a_checkpoint_is_checked_on_resume(good, tmp_path, edit, words):
    run = _edited(good, tmp_path, edit)
    with pytest.raises(CheckpointError) as info:
        Trainer.resume(run)
    assert words in str(info.value)


def test_the_good_checkpoint_itself_resumes(good, tmp_path):
    run = _edited(good, tmp_path, lambda arrays, meta: None)
    trainer = Trainer.resume(run, steps=4)
    trainer.train()
    assert trainer.step == 4


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (_poison("model.", math.nan), "holds NaN or Inf"),
        (_retype("model.", np.bool_), "has dtype bool"),
        (_retype("model.", np.int64), "has dtype int64"),
        (_set("model_config", "N", value="2"), "'model_config.N' is a JSON str"),
        (_set("tokenizer", "merges", value=7), "tokenizer"),
        (_set("train_config", value="copy"), "field 'train_config' is a JSON str"),
    ],
)
def test_translate_refuses_a_bad_checkpoint(good, tmp_path, edit, words, capsys):
    run = _edited(good, tmp_path, edit)
    with pytest.raises(CheckpointError, match=words.replace("(", r"\(")):
        Translator.from_checkpoint(run)
    assert main(["translate", "--checkpoint", str(run), "1 2"]) == 2  # not "" with exit 0
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
