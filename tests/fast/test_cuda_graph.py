"""fast/gpu/cuda_graph.py on the CPU: what a replay writes before it launches (the ids, the next
dropout draws' keys, Adam's bias corrections at the next step) and the host-side counters it
advances, checked against what the eager step computes. The capture and the replay
themselves need a GPU: the GPU run compares a replayed Trainer with an eager one bit for bit
(README, GPU section)."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.backend.random import counter_keys
from minitransformer.errors import TrainingError
from minitransformer.fast.cupy import adam as cupy_adam
from minitransformer.fast.gpu.cuda_graph import GraphedSteps, Recorder, _Graph
from minitransformer.optim import SGD, Adam


def _params():
    rng = np.random.default_rng(0)
    return [mt.tensor(rng.standard_normal(s).astype("float32"), requires_grad=True)
            for s in ((3, 4), (4,))]  # fmt: skip


def test_a_replay_writes_what_the_eager_step_would_use():
    opt = Adam(_params(), lr=0.01, betas=(0.9, 0.98), eps=1e-9)
    opt.step_count, opt.param_steps = 4, [4, 4]
    gen_a, gen_b = backend.Generator(7, "cpu"), backend.Generator(9, "cpu")
    gen_a.counter, gen_b.counter = 10, 3
    ids = (np.arange(6, dtype=np.int64).reshape(2, 3), np.ones((2, 2), dtype=np.int64))
    g = _Graph()
    start = 48 + 32  # the two id arrays, 8-byte aligned
    g.ids = [(0, 48), (48, 32)]
    g.host = np.zeros(start + 1024, dtype=np.uint8)
    rec = g.recorder = Recorder(np.zeros_like(g.host), start)
    # the capture: draws from two generators, interleaved, and one Adam launch
    slot, threshold = rec.dropout_keys(gen_a, 0.1)
    assert slot.dtype == np.uint32 and slot.shape == (2,) and threshold == round(0.1 * 2**32)
    rec.dropout_keys(gen_b, 0.1)
    rec.dropout_keys(gen_a, 0.1)
    adam = rec.adam_slot(np.float32, cupy_adam.adam_scalars)
    assert adam.dtype == np.float32 and adam.shape == (2,)
    g.draws = rec.rewind()  # _capture puts the counters back
    assert g.draws == [(gen_a, 2), (gen_b, 1)] and (gen_a.counter, gen_b.counter) == (10, 3)
    steps = GraphedSteps(lambda *a: a, opt)
    opt.lr = 0.005  # the schedule's value for the coming step
    steps._fill(g, ids)

    def keys(offset):
        return tuple(g.host[offset : offset + 8].view(np.uint32).tolist())

    assert keys(rec.dropout[0][2]) == counter_keys(7, 10)
    assert keys(rec.dropout[1][2]) == counter_keys(9, 3)
    assert keys(rec.dropout[2][2]) == counter_keys(7, 11)
    assert (gen_a.counter, gen_b.counter) == (12, 4)  # as two and one eager draws leave them
    assert opt.step_count == 5 and opt.param_steps == [5, 5]
    want = cupy_adam.adam_scalars(np.float32, lr=0.005, betas=(0.9, 0.98), eps=1e-9,
                                  weight_decay=0.0, t=5)[6:]  # fmt: skip
    got = g.host[rec.adam[0][0] : rec.adam[0][0] + 8].view(np.float32)
    assert got.tolist() == [float(v) for v in want]
    assert g.host[:48].view(np.int64).tolist() == list(range(6))
    # the next replay draws the next keys
    steps._fill(g, ids)
    assert keys(rec.dropout[0][2]) == counter_keys(7, 12)
    assert opt.param_steps == [6, 6]


def test_the_slots_are_bounded():
    rec = Recorder(np.zeros(100_000, dtype=np.uint8), 0)
    gen = backend.Generator(0, "cpu")
    with pytest.raises(RuntimeError, match="SLOT_BYTES"):
        for _ in range(10_000):
            rec.dropout_keys(gen, 0.1)


def test_only_adams_update_is_captured():
    with pytest.raises(TypeError, match="Adam"):
        GraphedSteps(lambda *a: a, SGD(_params(), lr=0.1))


def test_capture_steps_needs_a_gpu(tmp_path):
    from minitransformer.config import TrainConfig
    from minitransformer.train import Trainer

    trainer = Trainer(TrainConfig(task="copy", steps=2, out=str(tmp_path / "r"), progress=False))
    with pytest.raises(TrainingError, match="need a GPU"):
        trainer.capture_steps()


def test_bucketed_batches_give_the_unpadded_loss_and_gradients(tmp_path):
    """With CUDA graphs a batch is padded to a multiple of BUCKET (a few shapes): padded
    source keys are masked and padded targets ignored, so nothing changes but the shape."""
    from minitransformer.config import TrainConfig
    from minitransformer.train import Trainer
    from minitransformer.train.step import BUCKET, bucketed

    trainer = Trainer(TrainConfig(task="copy", steps=2, dropout=0.0, out=str(tmp_path / "r"),
                                  progress=False))  # fmt: skip
    model, cfg = trainer.model, trainer.model_cfg
    batch = next(trainer.stream)
    ids = (batch.src, batch.tgt_in, batch.tgt_out)
    padded = bucketed(ids, cfg.pad_id, cfg.max_len)
    L = padded[0].shape[1]
    assert L % BUCKET == 0 or L == cfg.max_len
    assert L > batch.src.shape[1] and L > batch.tgt_in.shape[1]  # something was padded
    assert all(p.shape == (a.shape[0], L) for p, a in zip(padded, ids, strict=True))
    results = []
    for src, tgt_in, tgt_out in (ids, padded):
        for p in model.parameters():
            p.grad = None
        loss = model.loss(model(src, tgt_in), tgt_out)
        loss.backward()
        results.append((float(loss.item()), [np.array(p.grad) for p in model.parameters()]))
    (l0, g0), (l1, g1) = results
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    for a, b in zip(g0, g1, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
