"""Checkpoint averaging (train/averaging.py): the final model is the mean of the weights at the
run's last steps (the paper's §6.1), exactly, through every resume; the refusals of bad
settings and of a tampered checkpoint.

Runs are tiny copy tasks (tiny_runs.py) of 40 steps averaging every 5: steps 20, 25, ..., 40.
"""

from __future__ import annotations

import json
import math
import os
import signal

import numpy as np
import pytest
from test_cli import assert_user_error, run_main
from tiny_runs import KNOBS, SIZE, TINY

from minitransformer import backend
from minitransformer.errors import CheckpointError, ConfigError
from minitransformer.runtime import checkpoint
from minitransformer.runtime.translator import Translator
from minitransformer.train import TrainConfig, Trainer
from minitransformer.train.averaging import CheckpointAverage, describe

WINDOW = [20, 25, 30, 35, 40]  # steps=40, average_last=5, average_every=5


def tiny(out, **changes) -> TrainConfig:
    fields = dict(
        task="copy", steps=40, batch_size=8, warmup=10, peak_lr=3e-3, dropout=0.1,
        out=str(out), progress=False, plots=False, log_every=10, eval_every=1000,
        eval_samples=8, checkpoint_every=1000, final_eval_samples=16,
        task_knobs=dict(KNOBS), model_overrides=dict(SIZE), average_every=5,
    )  # fmt: skip
    fields.update(changes)
    return TrainConfig(**fields)


def weights(trainer: Trainer) -> dict[str, np.ndarray]:
    return {k: backend.to_numpy(v).copy() for k, v in trainer.model.state_dict().items()}


def saved(run, section: str) -> dict[str, np.ndarray]:
    arrays, _ = checkpoint.load_checkpoint(run / "checkpoint.safetensors")
    return checkpoint.section(arrays, section)


def snapshots(trainer: Trainer, monkeypatch) -> dict[int, dict[str, np.ndarray]]:
    """{step: the model's weights after it}, taken by hand after every training step."""
    taken: dict[int, dict[str, np.ndarray]] = {}
    step = trainer.train_step

    def step_and_snapshot(batch):
        value = step(batch)
        taken[trainer.step + 1] = weights(trainer)  # the loop counts the step after this
        return value

    monkeypatch.setattr(trainer, "train_step", step_and_snapshot)
    return taken


def mean_of(taken, steps) -> dict[str, np.ndarray]:
    """The mean as the running sum computes it: float32 sums in step order, then / N."""
    total = {k: v.copy() for k, v in taken[steps[0]].items()}
    for s in steps[1:]:
        for k in total:
            total[k] += taken[s][k]
    return {k: v / len(steps) for k, v in total.items()}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A 40-step run averaged over WINDOW, never stopped: (trainer, its result)."""
    out = tmp_path_factory.mktemp("whole")
    trainer = Trainer(tiny(out))
    return trainer, trainer.train()


# ------------------------------------------------------------------ the average


@pytest.mark.parametrize(
    ("last", "every", "expected"),
    [(5, 5, WINDOW), (3, 10, [20, 30, 40]), (2, 1, [39, 40]), (9, 7, [5, 12, 19, 26, 33, 40])],
)
def test_the_final_model_is_the_mean_of_snapshots_taken_by_hand(
    tmp_path, monkeypatch, capsys, last, every, expected
):
    trainer = Trainer(tiny(tmp_path, average_last=last, average_every=every))
    taken = snapshots(trainer, monkeypatch)
    result = trainer.train()
    assert result["averaged_steps"] == expected
    mean = mean_of(taken, expected)
    assert_same(weights(trainer), mean)  # the model evaluated at the end ...
    assert_same(saved(tmp_path, "model"), mean)  # ... is the checkpoint's model
    assert_same(saved(tmp_path, "last"), taken[40])  # and the last step's weights are kept
    shown = f"average of {len(expected)} checkpoints, steps {expected[0]}–{expected[-1]}"
    assert f"test at step 40, final ({shown}):" in capsys.readouterr().err


@pytest.mark.parametrize(("last", "every"), [(1, 5), (1, 1), (5, 100), (3, 40), (10**6, 10**6)])
def test_no_averaging_is_the_last_steps_weights_bit_for_bit(tmp_path, monkeypatch, capsys, last,
                                                            every):  # fmt: skip
    """average_last 1, or a schedule with one step in the run: the run of before averaging
    (the last step's weights, no extra arrays, the final line as it was)."""
    trainer = Trainer(tiny(tmp_path, average_last=last, average_every=every))
    taken = snapshots(trainer, monkeypatch)
    result = trainer.train()
    assert result["averaged_steps"] == [40]
    assert_same(weights(trainer), taken[40])
    arrays, meta = checkpoint.load_checkpoint(tmp_path / "checkpoint.safetensors")
    assert {k.split(".")[0] for k in arrays} == {"model", "optim"}
    assert meta["average"] == {"steps": []}
    assert "test at step 40, final:  loss" in capsys.readouterr().err


def test_evaluate_and_translate_score_the_model_the_final_line_printed(tmp_path, capsys):
    """The checkpoint's model is the average the final line scored: what evaluate, translate
    and generate load (a run long enough to copy some sequences, so the scores say so)."""
    knobs = dict(n_train=200, n_valid=16, n_test=32, min_len=2, max_len=4, n_symbols=8)
    trainer = Trainer(tiny(tmp_path, steps=200, peak_lr=1e-2, task_knobs=knobs,
                           final_eval_samples=32, average_every=20))  # fmt: skip
    result = trainer.train()
    assert result["averaged_steps"] == [120, 140, 160, 180, 200]
    assert json.loads((tmp_path / "result.json").read_text())["averaged_steps"] == [
        120, 140, 160, 180, 200
    ]  # fmt: skip
    loaded = Translator.from_checkpoint(tmp_path).model.state_dict()
    assert_same({k: backend.to_numpy(v) for k, v in loaded.items()}, weights(trainer))
    code, out, _ = run_main(["evaluate", "--checkpoint", str(tmp_path), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["exact_match"] == result["metrics"]["exact_match"] > 0


def test_the_schedule_counts_back_from_the_last_step():
    def plan(steps, last, every):
        return CheckpointAverage(tiny("x", steps=steps, average_last=last, average_every=every))

    assert plan(3000, 5, 100).schedule() == [2600, 2700, 2800, 2900, 3000]
    assert plan(250, 5, 100).schedule() == [50, 150, 250]  # s_k >= 1
    assert plan(100, 5, 100).schedule() == []  # one step: the last step's weights
    assert plan(3000, 1, 100).schedule() == []
    assert [s for s in range(3001) if plan(3000, 5, 100).due(s)] == [2600, 2700, 2800, 2900, 3000]
    assert describe([3000]) == "" and describe([5, 10]) == " (average of 2 checkpoints, steps 5–10)"


# ------------------------------------------------------------------ resuming


@pytest.mark.parametrize("stop", [3, 19, 20, 27, 39])
def test_a_run_stopped_and_resumed_ends_on_the_same_average(whole, tmp_path, monkeypatch, stop):
    """Ctrl-C after step ``stop`` (before the window, at and inside it), then --resume."""
    trainer = Trainer(tiny(tmp_path))
    step = trainer.train_step

    def step_then_ctrl_c(batch):
        value = step(batch)
        if trainer.step + 1 == stop:
            os.kill(os.getpid(), signal.SIGINT)
        return value

    monkeypatch.setattr(trainer, "train_step", step_then_ctrl_c)
    assert trainer.train()["step"] == stop
    resumed = Trainer.resume(tmp_path)
    result = resumed.train()
    assert result["averaged_steps"] == WINDOW
    assert result["metrics"] == whole[1]["metrics"]
    assert_same(weights(resumed), weights(whole[0]))
    assert_same(saved(tmp_path, "last"), saved(whole[0].out, "last"))


def test_a_finished_run_resumed_scores_again_without_averaging_twice(whole, tmp_path, capsys):
    run = tmp_path / "run"
    first = Trainer(tiny(run))
    result = first.train()
    again = Trainer.resume(run)
    assert_same(weights(again), saved(run, "last"))  # the last step's weights, to train on
    assert again.train()["metrics"] == result["metrics"] == whole[1]["metrics"]
    assert_same(weights(again), weights(first))
    assert_same(saved(run, "model"), weights(first))


@pytest.mark.parametrize("more", [{"steps": 60}, {"steps": 60, "average_last": 3}])
def test_a_longer_run_continues_from_the_last_steps_weights(tmp_path, more):
    """Train to 40 (averaged), resume to 60: the same raw weights, optimizer and losses as
    a run to 60 in one go, and the same average (the step resumed from, 40, is in the new
    window, 40..60; the older steps of the sum are not, so it starts again from step 40)."""
    straight = Trainer(tiny(tmp_path / "straight", **more))
    straight.train()
    Trainer(tiny(tmp_path / "split")).train()
    resumed = Trainer.resume(tmp_path / "split", **more)
    result = resumed.train()
    assert resumed.losses == straight.losses
    assert_same(saved(tmp_path / "split", "last"), saved(tmp_path / "straight", "last"))
    assert_same(saved(tmp_path / "split", "optim"), saved(tmp_path / "straight", "optim"))
    assert_same(weights(resumed), weights(straight))
    assert result["averaged_steps"] == straight.averaging.added


def test_a_checkpoint_written_before_averaging_still_resumes(whole, tmp_path):
    """No average.* or last.*, no 'average' metadata, no average_* options: an empty sum."""
    for given, averaged in [({}, [45]), ({"average_every": 5}, [40, 45])]:
        edited = _edited(whole[0].out, tmp_path / str(len(given)), _before_averaging)
        resumed = Trainer.resume(edited, steps=45, **given)  # {}: every 100, none in 40..45
        assert resumed.train()["averaged_steps"] == averaged  # of 25..45: the steps it saw


def _before_averaging(arrays, meta):
    """The file as it was before averaging: the last step's weights as the model."""
    last = checkpoint.section(arrays, "last")
    for name in [k for k in arrays if k.startswith(("average.", "last."))]:
        del arrays[name]
    arrays.update({f"model.{k}": v for k, v in last.items()})
    del meta["average"], meta["train_config"]["average_last"]
    del meta["train_config"]["average_every"]


# ------------------------------------------------------------------ refusals


BAD_VALUES = [0, -1, True, 2.5, "5", None, 10**6 + 1, 10**40]


@pytest.mark.parametrize("field", ["average_last", "average_every"])
@pytest.mark.parametrize("value", BAD_VALUES, ids=map(repr, BAD_VALUES))
def test_bad_settings_are_refused_in_one_line(tmp_path, field, value):
    with pytest.raises(ConfigError, match=f"TrainConfig: {field} must be a positive integer"):
        tiny(tmp_path, **{field: value})


@pytest.mark.parametrize("flag", ["--average-last", "--average-every"])
@pytest.mark.parametrize(
    ("text", "words"),
    [("0", "expected a positive integer, got 0"), ("-3", "expected a positive integer"),
     ("2.5", "expected a positive integer"), ("five", "expected a positive integer"),
     ("1000001", "must be a positive integer of at most 1,000,000, got 1000001")],
)  # fmt: skip
def test_the_cli_refuses_bad_values(tmp_path, capsys, flag, text, words):
    argv = ["train", "copy", *TINY, "--out", str(tmp_path / "run"), flag, text]
    code, _, err = run_main(argv, capsys)
    assert_user_error(code, err, flag, words)
    assert not (tmp_path / "run" / "checkpoint.safetensors").exists()


def _edited(good, tmp_path, edit):
    arrays, meta = checkpoint.load_checkpoint(good / "checkpoint.safetensors")
    for key in checkpoint.RESERVED_METADATA_KEYS:
        meta.pop(key)
    edit(arrays, meta)
    tmp_path.mkdir(exist_ok=True)
    checkpoint.save_checkpoint(tmp_path / "checkpoint.safetensors", arrays, meta)
    return tmp_path


def _set_steps(value):
    def edit(arrays, meta):
        meta["average"]["steps"] = value

    return edit


def _array(prefix, change):
    def edit(arrays, meta):
        key = next(k for k in sorted(arrays) if k.startswith(prefix))
        arrays[key] = change(arrays[key].copy())

    return edit


def _poison(prefix, value):
    def change(array):
        array.flat[0] = value
        return array

    return _array(prefix, change)


def _drop(prefix, only_one=False):
    def edit(arrays, meta):
        names = sorted(k for k in arrays if k.startswith(prefix))
        for name in names[:1] if only_one else names:
            del arrays[name]

    return edit


def _meta(value):
    def edit(arrays, meta):
        meta["average"] = value

    return edit


TAMPERED = [
    ("steps 0", _set_steps([0, 25, 30, 35, 40]), "'average.steps' is [0, 25"),
    ("steps past the step", _set_steps([20, 25, 30, 35, 41]), "expected a list of steps in 1..40"),
    ("steps negative", _set_steps([-5, 40]), "'average.steps'"),
    ("steps bool", _set_steps([True, 40]), "'average.steps'"),
    ("steps float", _set_steps([20.0, 40]), "'average.steps'"),
    ("steps str", _set_steps("20,40"), "'average.steps' is '20,40'"),
    ("steps twice", _set_steps([20, 20, 40]), "ascending steps, each once"),
    ("steps backwards", _set_steps([40, 20]), "ascending steps, each once"),
    ("steps huge", _set_steps([10**40]), "'average.steps'"),
    ("no steps, a sum", _set_steps([]), "'average.steps' is empty"),
    ("average a list", _meta([20, 40]), "field 'average' is [20, 40]"),
    ("average extra key", _meta({"steps": WINDOW, "n": 5}), "field 'average'"),
    ("sum nan", _poison("average.", math.nan), "holds NaN or Inf"),
    ("sum inf", _poison("average.", math.inf), "holds NaN or Inf"),
    ("sum shape", _array("average.", lambda a: np.zeros((*a.shape, 2), a.dtype)), "mis-shaped"),
    ("sum f64", _array("average.", lambda a: a.astype(np.float64)), "has dtype float64"),
    ("sum int", _array("average.", lambda a: a.astype(np.int32)), "has dtype int32"),
    ("sum one missing", _drop("average.", only_one=True), "missing keys"),
    ("sum missing", _drop("average."), "field 'average' does not fit"),
    ("last nan", _poison("last.", math.nan), "holds NaN or Inf"),
    ("last shape", _array("last.", lambda a: a[..., :1]), "mis-shaped"),
    ("last one missing", _drop("last.", only_one=True), "missing keys"),
    ("last, no average", lambda a, m: (_drop("average.")(a, m), _set_steps([])(a, m)),
     "field 'last' is there, but no average ends at step 40"),
]  # fmt: skip


@pytest.mark.parametrize(("edit", "words"), [c[1:] for c in TAMPERED], ids=[c[0] for c in TAMPERED])
def test_a_tampered_average_is_refused_on_resume(whole, tmp_path, edit, words):
    run = _edited(whole[0].out, tmp_path, edit)
    with pytest.raises(CheckpointError) as info:
        Trainer.resume(run)
    assert words in str(info.value)
