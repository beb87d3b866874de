"""fast/gpu/cuda_graph.py on the CPU: what a replay writes before it launches (the ids, the
next dropout draws' keys, Adam's bias corrections at the next step) and the host-side
counters it advances through the optimizer's and the generator's public methods, checked
against what the eager step computes; a capture and its replays with CuPy's capture calls
stood in for (what is counted and taken back, what makes a capture fail); the eager path of
``GraphedSteps`` (buckets, the carried finite flag) against the trainer's own eager steps,
bit for bit, and after a bad step. The capture and the replay themselves need a GPU: the GPU
run compares a replayed Trainer with an eager one bit for bit (docs/gpu.md)."""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest
from cupy_standin import fake_capture

import minitransformer as mt
from minitransformer import backend
from minitransformer.backend.random import counter_keys
from minitransformer.errors import TrainingError
from minitransformer.fast.cupy import adam as cupy_adam
from minitransformer.fast.cupy import dropout as cupy_dropout
from minitransformer.fast.gpu import cuda_graph
from minitransformer.fast.gpu.cuda_graph import GraphedSteps, Recorder, _Graph
from minitransformer.optim import SGD, Adam, Optimizer


def _params():
    rng = np.random.default_rng(0)
    return [mt.tensor(rng.standard_normal(s).astype("float32"), requires_grad=True)
            for s in ((3, 4), (4,))]  # fmt: skip


def test_a_replay_writes_what_the_eager_step_would_use():
    opt = Adam(_params(), lr=0.01, betas=(0.9, 0.98), eps=1e-9)
    for _ in range(4):
        opt.advance()  # four steps counted, as Optimizer.step counts them
    assert opt.step_count == 4 and opt.param_steps == [4, 4]
    gen_a, gen_b = backend.Generator(7, "cpu"), backend.Generator(9, "cpu")
    gen_a.advance(10)
    gen_b.advance(3)
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
    adam = rec.adam_slot(opt.groups[0].data, cupy_adam.adam_scalars)
    assert adam.dtype == np.float32 and adam.shape == (2,)
    g.draws = rec.rewind()  # _capture takes the draws back
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


@pytest.mark.parametrize("task, knobs", [
    ("copy", {}),
    ("reverse", dict(max_len=21)),
    ("lm", dict(tokenizer="char", max_words=5, n_train=40, n_valid=4, n_test=4)),
])  # fmt: skip
def test_bucketed_batches_give_the_unpadded_loss_and_gradients(tmp_path, task, knobs):
    """With CUDA graphs a batch is padded to a multiple of BUCKET (a few shapes; the
    trainer's GraphedSteps pad it): padded source keys are masked and padded targets
    ignored, so with dropout 0 nothing changes but the shape (a translation model and a
    language model, whose (B, 1) dummy source is padded too; several batches). With
    dropout the masks differ: they are drawn over the padded shape."""
    from minitransformer.config import TrainConfig
    from minitransformer.fast.gpu.cuda_graph import BUCKET, bucketed
    from minitransformer.train import Trainer

    trainer = Trainer(TrainConfig(task=task, steps=2, dropout=0.0, out=str(tmp_path / "r"),
                                  progress=False, preset="tiny", batch_size=8,
                                  task_knobs=knobs))  # fmt: skip
    model, cfg = trainer.model, trainer.model_cfg
    for _ in range(3):
        batch = next(trainer.stream)
        ids = (batch.src, batch.tgt_in, batch.tgt_out)
        padded = bucketed(ids, cfg.pad_id, cfg.max_len)
        L = padded[0].shape[1]
        assert L % BUCKET == 0 or L == cfg.max_len
        assert L > batch.tgt_in.shape[1]  # something was padded
        assert all(p.shape == (a.shape[0], L) for p, a in zip(padded, ids, strict=True))
        results = []
        for src, tgt_in, tgt_out in (ids, padded):
            for p in model.parameters():
                p.grad = None
            logits = model(tgt_in) if cfg.decoder_only else model(src, tgt_in)
            loss = model.loss(logits, tgt_out)
            loss.backward()
            results.append((float(loss.item()), [np.array(p.grad) for p in model.parameters()]))
        (l0, g0), (l1, g1) = results
        np.testing.assert_allclose(l1, l0, rtol=1e-6)
        for a, b in zip(g0, g1, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_a_generator_advances_and_takes_back_its_draws():
    """``Generator.advance(n)`` moves the counter as n draws would, without drawing; a
    negative n takes draws back (what a capture, whose kernels did not run, does)."""
    drawn, skipped = backend.Generator(3, "cpu"), backend.Generator(3, "cpu")
    for _ in range(3):
        drawn.keep_mask((4, 5), 0.3)
    skipped.advance(3)
    np.testing.assert_array_equal(skipped.keep_mask((4, 5), 0.3), drawn.keep_mask((4, 5), 0.3))
    assert skipped.dropout_keys(0.3) == drawn.dropout_keys(0.3)
    skipped.advance(-5)
    assert skipped.counter == 0 and skipped.dropout_keys(0.1)[:2] == counter_keys(3, 0)


# ----------------------------------------------------------------------------- capture, stood in


def _fake_cupy(launches: list, free: int = 2**30) -> types.SimpleNamespace:
    """CuPy's calls that GraphedSteps makes, on NumPy (``cupy_standin/fake_capture.py``): a
    capture runs the body's Python (here its arithmetic too: there are no kernels to record),
    each graph launch is counted in ``launches``; the device has ``free`` bytes free;
    ``alloc(n)`` takes n bytes from the capture's allocator."""
    return fake_capture.fake_cupy(lambda frame: launches.append(1), free=free)


def _body(opt, gen, whole=True):
    """A step as the CuPy twins make it: a dropout draw (``fast/cupy/dropout.py``'s keys),
    Adam's launch per flat group (asking the recorder for its slot while captured), the
    optimizer's step; body(flag, x) -> (loss, flag)."""

    def body(flag, x):
        cupy_dropout.dropout_keys(gen, 0.1)
        for p in opt.params:
            p.grad = np.ones(p.shape, dtype=np.float32)
        if cuda_graph.recorder is not None:
            for group in opt.groups:
                p = group.data if whole else group.views[0]
                cuda_graph.recorder.adam_slot(p, cupy_adam.adam_scalars)
        opt.step(apply_if=flag)
        return x.sum(), flag

    return body


def test_a_capture_counts_nothing_and_each_replay_counts_its_step(monkeypatch):
    launches = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(launches))
    opt, gen = Adam(_params(), lr=0.01), backend.Generator(5, "cpu")
    steps = GraphedSteps(_body(opt, gen), opt, warmup=2, carry=np.ones((), dtype=bool))
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    for n in (1, 2):  # eager: the body counts its step and draws
        (loss,) = steps(ids)
        assert loss == 15 and opt.step_count == n and gen.counter == n and not steps.graphs
    steps(ids)  # captured (its Python ran once, uncounted), then replayed
    (g,) = steps.graphs.values()
    assert launches == [1] and steps.replays == 1 and not steps.failed
    assert opt.step_count == 3 and opt.param_steps == [3, 3] and gen.counter == 3
    assert g.draws == [(gen, 1)]
    offset = g.recorder.dropout[0][2]
    assert tuple(g.host[offset : offset + 8].view(np.uint32)) == counter_keys(5, 2)
    slot, scalars = g.recorder.adam[0][0], cupy_adam.adam_scalars
    want = scalars(np.float32, lr=0.01, betas=opt.betas, eps=opt.eps, weight_decay=0.0, t=3)[6:]
    assert g.host[slot : slot + 8].view(np.float32).tolist() == [float(v) for v in want]
    steps(ids)  # a replay: the next step's values
    assert launches == [1, 1] and opt.step_count == 4 and gen.counter == 4
    assert tuple(g.host[offset : offset + 8].view(np.uint32)) == counter_keys(5, 3)


def test_a_step_that_does_not_update_whole_groups_is_not_captured(monkeypatch):
    launches = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(launches))
    opt, gen = Adam(_params(), lr=0.01), backend.Generator(5, "cpu")
    steps = GraphedSteps(_body(opt, gen, whole=False), opt, warmup=1, carry=np.ones((), bool))
    steps(np.zeros((2, 2), dtype=np.int64))  # eager: Adam's state made
    steps(np.zeros((2, 2), dtype=np.int64))  # the capture fails: the step runs eagerly
    assert not steps.graphs and launches == []
    assert "not each flat group whole" in next(iter(steps.failed.values()))
    assert opt.step_count == 2 and gen.counter == 2  # counted once each: the eager runs


# ----------------------------------------------------------------------------- the trainer's


def _trainer(tmp_path, name):
    from minitransformer.config import TrainConfig
    from minitransformer.train import Trainer

    cfg = TrainConfig(task="copy", steps=12, dropout=0.1, out=str(tmp_path / name),
                      progress=False, batch_size=8, preset="tiny",
                      task_knobs=dict(n_train=64, n_valid=4, n_test=4, max_len=9))  # fmt: skip
    return Trainer(cfg)


def _graphed(trainer):
    """What ``capture_steps`` installs, on the CPU: GraphedSteps as the trainer's run_step,
    never capturing (its eager path: buckets, the carried flag)."""
    cfg = trainer.model_cfg
    return GraphedSteps(trainer.device_step, trainer.optimizer, warmup=10**9,
                        pad=(cfg.pad_id, cfg.max_len), carry=np.ones((), dtype=bool))  # fmt: skip


def _run(tmp_path, name, graphed, batches, poison=None):
    """A trainer over ``batches`` (eager: fed them padded, as the graphs pad them); with
    ``poison``, that step's gradient norm is NaN. (losses or the error, weights, flag)."""
    from minitransformer.data.batching import Batch

    trainer = _trainer(tmp_path, name)
    cfg = trainer.model_cfg
    if graphed:
        trainer.run_step = steps = _graphed(trainer)
    weights, error, norm = [], None, Optimizer.clip_grad_norm
    for i, batch in enumerate(batches):
        if not graphed:
            p = cuda_graph.bucketed((batch.src, batch.tgt_in, batch.tgt_out), cfg.pad_id,
                                    cfg.max_len)  # fmt: skip
            batch = Batch(p[0], p[1], p[2], batch.n_tokens, batch.indices)
        if i == poison:
            trainer.optimizer.clip_grad_norm = lambda *a: norm(trainer.optimizer, *a) * math.nan
        trainer.train_step(batch)
        trainer.step += 1  # as train()'s loop counts
        trainer.optimizer.__dict__.pop("clip_grad_norm", None)
        weights.append([p.data.copy() for p in trainer.model.parameters()])
    try:
        result = trainer.read_back()
    except TrainingError as err:
        result = error = str(err)
    flag = steps.carry if graphed else trainer._healthy
    return result, weights, bool(flag), error


def test_graphed_steps_give_the_trainers_own_numbers_bit_for_bit(tmp_path, monkeypatch):
    """The trainer's step through GraphedSteps (run eagerly on the CPU: the ids uploaded by
    ``upload``, here NumPy's; padded to a bucket; the finite flag in GraphedSteps' buffer)
    gives, with dropout, the losses and weights of the trainer's own steps fed the same
    padded batches."""
    monkeypatch.setattr(cuda_graph, "upload", np.asarray)
    source = _trainer(tmp_path, "source")
    batches = [next(source.stream) for _ in range(6)]
    assert len({cuda_graph.bucketed((b.src, b.tgt_in), 0, 99)[0].shape for b in batches}) < 6
    eager = _run(tmp_path, "eager", False, batches)
    graphed = _run(tmp_path, "graphed", True, batches)
    assert eager[0] == graphed[0] and all(math.isfinite(x) for x in eager[0])
    for a, b in zip(eager[1], graphed[1], strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert eager[2] is graphed[2] is True


def test_after_a_bad_graphed_step_no_update_is_applied(tmp_path, monkeypatch):
    """Step 3's gradient norm is NaN: from it on no update is applied (the carried flag
    stays False), and read_back() names step 3, as for eager steps."""
    monkeypatch.setattr(cuda_graph, "upload", np.asarray)
    source = _trainer(tmp_path, "source")
    batches = [next(source.stream) for _ in range(5)]
    for graphed in (False, True):
        _, weights, flag, error = _run(tmp_path, f"bad{graphed}", graphed, batches, poison=2)
        assert flag is False and error is not None and "step 3:" in error, error
        assert not all(np.array_equal(x, y) for x, y in zip(weights[0], weights[1], strict=True))
        for later in weights[2:]:  # steps 3, 4, 5 changed nothing
            assert all(np.array_equal(x, y) for x, y in zip(weights[1], later, strict=True))
