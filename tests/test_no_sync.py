"""A training step never waits for the device: on the strict stand-in (a "GPU" whose arrays
refuse to mix with the host), every way of reading a device value on the host is made to
raise, and whole training steps still run; the numbers come back only at ``read_back``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.errors import TrainingError
from minitransformer.optim import Optimizer
from minitransformer.train import TrainConfig, Trainer

TINY = dict(d_model=16, h=2, N=1, d_ff=32)


class HostRead(AssertionError):
    pass


def _refuse(self, *args, **kwargs):
    raise HostRead("a host read of a device array inside a training step")


def _refusing_to_numpy(real):
    def to_numpy(x):
        if type(x).__module__.startswith("array_api_strict"):
            raise HostRead("backend.to_numpy of a device array inside a training step")
        return real(x)

    return to_numpy


def _refuse_host_reads(m) -> None:
    """float(), int(), bool(), index conversion and backend.to_numpy of strict arrays raise."""
    pytest.importorskip("array_api_strict")
    from array_api_strict._array_object import Array

    for name in ("__float__", "__int__", "__bool__", "__index__"):
        m.setattr(Array, name, _refuse)
    m.setattr(backend, "to_numpy", _refusing_to_numpy(backend.to_numpy))
    m.setattr(backend.arrays, "to_numpy", _refusing_to_numpy(backend.arrays.to_numpy))


def _trainer(tmp_path, steps=50, **kw):
    cfg = TrainConfig(task="copy", device="strict:device1", out=str(tmp_path), steps=steps,
                      batch_size=8, progress=False, plots=False, dropout=0.1,
                      model_overrides=TINY, task_knobs=dict(n_train=64, n_valid=8, n_test=8),
                      **kw)  # fmt: skip
    return Trainer(cfg)


def read_back_of_steps_without_host_reads(tmp_path, monkeypatch, task, overrides, steps=2):
    """Two (``steps``) training steps of ``task`` with TINY sizes and ``overrides`` on the
    strict device, every host read refused inside them; the values read back after."""
    knobs = dict(n_train=64, n_valid=8, n_test=8) if task == "copy" else {}
    cfg = TrainConfig(task=task, device="strict:device1", out=str(tmp_path), steps=5,
                      batch_size=8, progress=False, plots=False,
                      model_overrides={**TINY, **overrides}, task_knobs=knobs)  # fmt: skip
    trainer = Trainer(cfg)
    batches = [next(trainer.stream) for _ in range(steps)]
    with monkeypatch.context() as m:
        _refuse_host_reads(m)
        for batch in batches:
            trainer.train_step(batch)
            trainer.step += 1
    return trainer.read_back()


def test_steps_make_no_host_read(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path)
    batches = [next(trainer.stream) for _ in range(3)]
    with monkeypatch.context() as m:
        _refuse_host_reads(m)
        for b in batches:
            loss = trainer.train_step(b)
            trainer.step += 1
        assert backend.device_of(loss) == "strict:device1"
    values = trainer.read_back()  # the one read, outside the steps
    assert len(values) == 3 and all(math.isfinite(v) for v in values)


def test_host_reads_are_really_refused(monkeypatch):
    a = backend.asarray([1.0, 2.0], device="strict:device1")
    _refuse_host_reads(monkeypatch)
    for read in (float, int, bool, backend.to_numpy, lambda x: [0, 1][x]):
        with pytest.raises(HostRead):
            read(a[0] if read is not backend.to_numpy else a)


def test_a_non_finite_step_is_skipped_on_the_device_and_reported_at_read_back(
    tmp_path, monkeypatch
):
    trainer = _trainer(tmp_path)
    real_clip = Optimizer.clip_grad_norm
    calls = []

    def nan_second(self, max_norm):
        norm = real_clip(self, max_norm)
        calls.append(1)
        return norm * math.nan if len(calls) == 1 else norm

    trainer.train_step(next(trainer.stream))
    trainer.step = 1
    before = {k: backend.to_numpy(v).copy() for k, v in trainer.model.state_dict().items()}
    monkeypatch.setattr(Optimizer, "clip_grad_norm", nan_second)
    with monkeypatch.context() as m:
        _refuse_host_reads(m)
        for step in (2, 3):
            trainer.train_step(next(trainer.stream))
            trainer.step = step
    with pytest.raises(
        TrainingError, match=r"step 2: the loss is [0-9.]+ and the gradient norm nan"
    ):
        trainer.read_back()
    after = {k: backend.to_numpy(v) for k, v in trainer.model.state_dict().items()}
    for name, value in before.items():  # neither step 2 (bad) nor 3 (after it) was applied
        np.testing.assert_array_equal(after[name], value, err_msg=name)


def test_resume_on_a_device_repeats_the_dropout_masks(tmp_path):
    """Counter-based dropout: a run resumed on the device draws the masks it would have."""
    whole = _trainer(tmp_path / "whole", steps=6)
    whole.train()
    part = _trainer(tmp_path / "part", steps=3)
    part.train()
    resumed = Trainer.resume(tmp_path / "part", steps=6)
    resumed.train()
    assert resumed.losses == whole.losses  # float for float, dropout 0.1 on strict:device1
