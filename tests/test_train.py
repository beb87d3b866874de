"""The Trainer at tiny size: a whole run, exact resume, Ctrl-C, NaN/Inf guards, checkpoint
config checks, and a checkpoint from another device.

Every run here is a copy task of 200 training sequences and a 1-layer d_model 16 model, so
a step takes a few milliseconds.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal

import numpy as np
import pytest
from tiny_runs import KNOBS, SIZE

from minitransformer import backend
from minitransformer.errors import CheckpointError, ConfigError, DeviceError, TrainingError
from minitransformer.optim import Optimizer
from minitransformer.runtime import checkpoint
from minitransformer.runtime.translator import Translator
from minitransformer.train import TrainConfig, Trainer


def tiny(out, **changes) -> TrainConfig:
    fields = dict(
        task="copy", steps=12, batch_size=8, warmup=10, peak_lr=3e-3, dropout=0.1,
        out=str(out), progress=False, plots=False, log_every=4, eval_every=1000,
        eval_samples=8, checkpoint_every=1000, final_eval_samples=8,
        task_knobs=dict(KNOBS), model_overrides=dict(SIZE),
    )  # fmt: skip
    fields.update(changes)
    return TrainConfig(**fields)


def weights(trainer: Trainer) -> dict[str, np.ndarray]:
    return {k: backend.to_numpy(v).copy() for k, v in trainer.model.state_dict().items()}


# ------------------------------------------------------------------ a whole run


def test_a_run_writes_log_checkpoint_result_card_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    trainer = Trainer(tiny(out, steps=30, log_every=10, eval_every=15, plots=True))
    result = trainer.train()

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [10, 20, 30]
    assert all(math.isfinite(r["loss"]) and r["tokens_per_s"] > 0 for r in train)
    assert [r["step"] for r in records if r["split"] == "valid"] == [15]
    assert records[-1]["split"] == "test" and "exact_match" in records[-1]

    arrays, meta = checkpoint.load_checkpoint(out / "checkpoint.safetensors")
    assert meta["step"] == 30 and len(meta["losses"]) == 30
    assert any(k.startswith("model.") for k in arrays) and any(
        k.startswith("optim.") for k in arrays
    )

    card = json.loads((out / "result.json").read_text())
    assert card == json.loads(json.dumps(result))
    for key in ("seed", "config", "train_config", "hardware", "wall_time_s", "tokens_per_s",
                "final_train_loss", "metrics", "parameters"):  # fmt: skip
        assert key in card, key
    assert card["seed"] == 0 and card["steps"] == 30 and card["config"]["d_model"] == 16
    assert card["hardware"]["device"] == "cpu" and card["tokens_per_s"] > 0
    assert math.isfinite(card["final_train_loss"])
    assert {"loss", "token_acc", "exact_match"} <= set(card["metrics"])
    assert sorted(p.name for p in (out / "plots").glob("*.png")) == [
        "attention.png",
        "curves.png",
        "lr_schedule.png",
    ]


# ------------------------------------------------------------------ exact resume


def test_resumed_run_reproduces_the_loss_curve_exactly(tmp_path):
    """Train to 12 in one go, or to 5, save, resume, train to 12: the same 12 floats.
    Dropout 0.1 makes the dropout generator's state part of what must be restored; an
    evaluation every 3 steps checks that evaluation draws nothing from it."""
    whole = Trainer(tiny(tmp_path / "whole", eval_every=3))
    whole.train()

    first = Trainer(tiny(tmp_path / "split", steps=5, eval_every=3))
    first.train()
    resumed = Trainer.resume(tmp_path / "split", steps=12)
    assert resumed.step == 5 and resumed.losses == first.losses
    resumed.train()

    assert len(whole.losses) == 12
    assert resumed.losses == whole.losses  # exactly equal floats, step for step
    for name, value in weights(whole).items():
        np.testing.assert_array_equal(weights(resumed)[name], value, err_msg=name)


def test_evaluation_does_not_change_the_training_run(tmp_path):
    plain = Trainer(tiny(tmp_path / "a", steps=8))
    plain.train()
    evaluated = Trainer(tiny(tmp_path / "b", steps=8, eval_every=2))
    evaluated.train()
    assert evaluated.losses == plain.losses


def test_evaluation_restores_the_dropout_generator(tmp_path, monkeypatch):
    """Even a decoder that draws random numbers (sampling) leaves the training RNG as it was."""
    import minitransformer.train.evaluation as train_module

    trainer = Trainer(tiny(tmp_path))
    real = train_module.greedy_decode

    def sampling_decode(model, src, **kw):
        backend.default_generator("cpu").random((3,))
        return real(model, src, **kw)

    monkeypatch.setattr(train_module, "greedy_decode", sampling_decode)
    before = backend.default_generator("cpu").state()
    trainer.evaluate("valid", 4)
    assert backend.default_generator("cpu").state() == before
    assert trainer.model.training  # and the model is back in training mode


def test_sigint_saves_a_checkpoint_and_resume_continues_exactly(tmp_path, monkeypatch, capsys):
    whole = Trainer(tiny(tmp_path / "whole"))
    whole.train()

    trainer = Trainer(tiny(tmp_path / "run"))
    step = trainer.train_step

    def step_then_ctrl_c(batch):
        value = step(batch)
        if trainer.step == 3:  # the 4th step: a real SIGINT to this process
            os.kill(os.getpid(), signal.SIGINT)
        return value

    monkeypatch.setattr(trainer, "train_step", step_then_ctrl_c)
    result = trainer.train()
    assert result == {"interrupted": True, "step": 4, "signal": "SIGINT"}
    assert "minitransformer train --resume" in capsys.readouterr().err
    assert checkpoint.read_metadata(tmp_path / "run" / "checkpoint.safetensors")["step"] == 4
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored

    resumed = Trainer.resume(tmp_path / "run")
    resumed.train()
    assert resumed.losses == whole.losses


def test_resume_after_the_run_directory_moved(tmp_path):
    Trainer(tiny(tmp_path / "old", steps=3)).train()
    shutil.move(tmp_path / "old", tmp_path / "new")
    resumed = Trainer.resume(tmp_path / "new", steps=4)
    assert resumed.out == tmp_path / "new"
    resumed.train()
    assert checkpoint.read_metadata(tmp_path / "new" / "checkpoint.safetensors")["step"] == 4
    assert not (tmp_path / "old").exists()


def test_resume_skips_a_log_line_cut_short_by_a_crash(tmp_path):
    Trainer(tiny(tmp_path, steps=4)).train()
    with open(tmp_path / "metrics.jsonl", "a") as log:
        log.write('{"step": 9, "split": "tra')  # a crash mid-write
    Trainer.resume(tmp_path, steps=5).train()
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 5


# ------------------------------------------------------------------ NaN / Inf guards


def test_nan_weight_mid_run_stops_with_the_step_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    trainer = Trainer(tiny(tmp_path, steps=20, checkpoint_every=4))
    step = trainer.train_step

    def poison_after_6(batch):
        if trainer.step == 6:  # step 7 starts from a NaN weight
            trainer.model.src_embed.weight.data[0, 0] = math.nan
        return step(batch)

    monkeypatch.setattr(trainer, "train_step", poison_after_6)
    with pytest.raises(TrainingError, match=r"step 7: the loss is nan") as info:
        trainer.train()
    assert "checkpoint.safetensors (step 4), is intact" in str(info.value)
    assert "minitransformer train --resume" in str(info.value)
    arrays, meta = checkpoint.load_checkpoint(tmp_path / "checkpoint.safetensors")  # checksum ok
    assert meta["step"] == 4
    assert all(np.isfinite(a).all() for a in arrays.values())
    Trainer.resume(tmp_path, steps=6).train()  # ... and the run goes on from it


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_inf_loss_stops_before_the_update(tmp_path, monkeypatch):
    trainer = Trainer(tiny(tmp_path, steps=10))
    trainer.train_step(next(trainer.stream))
    trainer.step = 1
    before = weights(trainer)
    real = trainer.model.loss
    monkeypatch.setattr(trainer.model, "loss", lambda *a, **k: real(*a, **k) * math.inf)
    trainer.train_step(next(trainer.stream))  # decided on the device: no error yet
    trainer.step = 2
    monkeypatch.setattr(trainer.model, "loss", real)
    trainer.train_step(next(trainer.stream))  # a good step after a bad one: not applied
    trainer.step = 3
    with pytest.raises(TrainingError, match=r"step 2: the loss is inf") as info:
        trainer.read_back()
    assert "No checkpoint was saved yet" in str(info.value)
    assert "no update was applied from that step on" in str(info.value)
    for name, value in before.items():  # Adam did not step, then or after
        np.testing.assert_array_equal(weights(trainer)[name], value)
    assert len(trainer.losses) == 1 and math.isfinite(trainer.losses[0])


def _nan_norm(self, *args):
    norm = Optimizer.grad_norm(self)
    return norm * math.nan


def test_inf_gradient_norm_stops(tmp_path, monkeypatch):
    trainer = Trainer(tiny(tmp_path))
    monkeypatch.setattr(Optimizer, "clip_grad_norm", _nan_norm)
    before = weights(trainer)
    trainer.train_step(next(trainer.stream))
    trainer.step = 1
    with pytest.raises(TrainingError, match="gradient norm nan"):
        trainer.read_back()
    for name, value in before.items():
        np.testing.assert_array_equal(weights(trainer)[name], value)


def test_a_bad_step_stops_the_run_before_any_checkpoint_of_it(tmp_path, monkeypatch):
    trainer = Trainer(tiny(tmp_path, steps=12, checkpoint_every=4, log_every=50))
    real = Optimizer.clip_grad_norm

    def bad_at_6(self, max_norm):
        norm = real(self, max_norm)
        return norm * math.inf if trainer.step == 5 else norm

    monkeypatch.setattr(Optimizer, "clip_grad_norm", bad_at_6)
    with pytest.raises(TrainingError, match=r"step 6: .*gradient norm inf") as info:
        trainer.train()
    assert "checkpoint.safetensors (step 4), is intact" in str(info.value)
    assert checkpoint.read_metadata(tmp_path / "checkpoint.safetensors")["step"] == 4


def test_save_refuses_non_finite_weights(tmp_path):
    trainer = Trainer(tiny(tmp_path))
    trainer.save()
    good = (tmp_path / "checkpoint.safetensors").read_bytes()
    trainer.model.encoder.layers[0].ffn.w_1.weight.data[0, 0] = math.inf
    with pytest.raises(TrainingError, match="hold NaN or Inf, so no checkpoint was written"):
        trainer.save()
    assert (tmp_path / "checkpoint.safetensors").read_bytes() == good


def test_gradient_clipping_bounds_the_update(tmp_path, monkeypatch):
    seen = []
    real = Optimizer.clip_grad_norm

    def spy(self, max_norm):
        seen.append(max_norm)
        return real(self, max_norm)

    monkeypatch.setattr(Optimizer, "clip_grad_norm", spy)
    trainer = Trainer(tiny(tmp_path, clip_norm=0.01))
    trainer.train_step(next(trainer.stream))
    total = math.sqrt(
        sum(float((backend.to_numpy(p.grad) ** 2).sum()) for p in trainer.optimizer.params)
    )
    assert seen == [0.01] and total <= 0.01 * (1 + 1e-4)
    no_clip = Trainer(tiny(tmp_path, clip_norm=None))
    no_clip.train_step(next(no_clip.stream))
    assert seen == [0.01]  # no clipping: the norm is measured, nothing is scaled


# ------------------------------------------------------------------ checkpoints and config


def test_resume_with_other_settings_is_refused(tmp_path):
    Trainer(tiny(tmp_path, steps=2)).train()
    with pytest.raises(CheckpointError, match=r"task \(checkpoint 'copy', given 'reverse'\)"):
        Trainer.resume(tmp_path, task="reverse")
    with pytest.raises(CheckpointError, match=r"batch_size \(checkpoint 8, given 16\)"):
        Trainer.resume(tmp_path, batch_size=16)
    with pytest.raises(CheckpointError, match="model_overrides"):
        Trainer.resume(tmp_path, model_overrides=dict(SIZE, d_model=32))
    with pytest.raises(ConfigError, match="unknown option"):
        Trainer.resume(tmp_path, bogus=1)
    Trainer.resume(tmp_path, task="copy", batch_size=8, steps=3, eval_every=7)  # same: fine


def test_checkpoint_from_a_different_model_config_is_refused(tmp_path):
    """check_config: the model the stored options build must be the model that was saved."""
    Trainer(tiny(tmp_path, steps=2)).train()
    arrays, meta = checkpoint.load_checkpoint(tmp_path / "checkpoint.safetensors")
    meta["model_config"]["d_model"] = 32
    meta["model_config"]["N"] = 3
    for key in checkpoint.RESERVED_METADATA_KEYS:
        meta.pop(key)
    checkpoint.save_checkpoint(tmp_path / "checkpoint.safetensors", arrays, meta)
    with pytest.raises(
        CheckpointError, match=r"N \(checkpoint 3, expected 1\).*d_model \(checkpoint 32"
    ):
        Trainer.resume(tmp_path)


def test_resume_from_a_foreign_or_incomplete_checkpoint(tmp_path):
    path = tmp_path / "other.npz"
    checkpoint.save_checkpoint(path, {"w": np.zeros(2)}, {"step": 1})
    with pytest.raises(CheckpointError, match="not a training checkpoint"):
        Trainer.resume(path)
    Trainer(tiny(tmp_path, steps=1)).train()
    arrays, meta = checkpoint.load_checkpoint(tmp_path / "checkpoint.safetensors")
    for key in (*checkpoint.RESERVED_METADATA_KEYS, "optimizer"):
        meta.pop(key)
    checkpoint.save_checkpoint(tmp_path / "checkpoint.safetensors", arrays, meta)
    with pytest.raises(CheckpointError, match="lacks 'optimizer'"):
        Trainer.resume(tmp_path)


def test_truncated_checkpoint_gives_checkpoint_error(tmp_path):
    Trainer(tiny(tmp_path, steps=1)).train()
    data = (tmp_path / "checkpoint.safetensors").read_bytes()
    (tmp_path / "checkpoint.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        Trainer.resume(tmp_path)


def test_checkpoint_saved_on_another_device_loads_on_cpu(tmp_path):
    """strict:device1 stands in for a GPU: train there, then resume and translate on CPU."""
    pytest.importorskip("array_api_strict")
    strict = Trainer(tiny(tmp_path, steps=2, device="strict:device1"))
    strict.train()
    assert strict.model.device == "strict:device1"

    cpu = Trainer.resume(tmp_path, device="cpu", steps=3)
    assert cpu.model.device == "cpu"
    for name, value in weights(strict).items():
        np.testing.assert_array_equal(weights(cpu)[name], value, err_msg=name)
    cpu.train()
    assert cpu.losses[:2] == strict.losses and math.isfinite(cpu.losses[2])

    translator = Translator.from_checkpoint(tmp_path, device="cpu")
    assert translator.model.device == "cpu"
    assert isinstance(translator.translate("1 2 3"), str)


@pytest.mark.parametrize(
    ("changes", "kind", "pattern"),
    [
        (dict(task="nope"), ConfigError, "unknown task 'nope'"),
        (dict(steps=0), ConfigError, "steps must be a positive integer, got 0"),
        (dict(batch_size=2.5), ConfigError, "batch_size must be a positive integer"),
        (dict(peak_lr=2.0), ConfigError, r"peak_lr must be in \(0, 1\)"),
        (dict(label_smoothing=1.0), ConfigError, "label_smoothing"),
        (dict(dropout=-0.1), ConfigError, "dropout"),
        (dict(clip_norm=0.0), ConfigError, "clip_norm must be positive"),
        (dict(checkpoint_every=0), ConfigError, "checkpoint_every"),
        (dict(device="gpu7"), DeviceError, "unknown device 'gpu7'"),
        (dict(task_knobs=dict(bogus=1)), ConfigError, "no knob"),
    ],
)
def test_bad_train_config(tmp_path, changes, kind, pattern):
    with pytest.raises(kind, match=pattern):
        Trainer(tiny(tmp_path, **changes))


def test_out_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        Trainer(tiny(tmp_path / "file")).train()
