"""Two Trainers in one process (the GPU review's G2): each owns its dropout generator, made
the default while it steps or evaluates, so a second Trainer (whose construction reseeds the
defaults) leaves the first's steps, CUDA graph replays and checkpoints as they would be
without it: on the CPU, through the stand-in's graph calls (``_fake_cupy``), and through the
counting CuPy stand-in (``tests/cupy_standin``), whose graphs replay the captured step."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from cupy_standin import on_standin  # noqa: F401 - the fixture
from test_cuda_graph import _fake_cupy

from minitransformer import backend
from minitransformer.errors import ArgumentError
from minitransformer.fast.cupy import adam as cupy_adam
from minitransformer.fast.cupy import dropout as cupy_dropout
from minitransformer.fast.gpu import cuda_graph
from minitransformer.fast.gpu.cuda_graph import GraphedSteps
from minitransformer.runtime import checkpoint


def _trainer(tmp_path, name, seed=1, **changes):
    from minitransformer.config import TrainConfig
    from minitransformer.train import Trainer

    cfg = TrainConfig(task="copy", steps=12, dropout=0.1, out=str(tmp_path / name), seed=seed,
                      progress=False, batch_size=8, preset="tiny", **changes,
                      task_knobs=dict(n_train=64, n_valid=4, n_test=4, max_len=9))  # fmt: skip
    return Trainer(cfg)


def _steps(trainer, n):
    for _ in range(n):
        trainer.train_step(next(trainer.stream))
        trainer.step += 1


def _meanwhile_built(tmp_path, seed):
    _trainer(tmp_path, f"b{seed}", seed)


def _meanwhile_stepped(tmp_path, seed):
    _steps(_trainer(tmp_path, f"b{seed}", seed), 3)


def _meanwhile_evaluated(tmp_path, seed):
    other = _trainer(tmp_path, f"b{seed}", seed)
    _steps(other, 1)
    other.evaluate("valid", 4)


MEANWHILE = [_meanwhile_built, _meanwhile_stepped, _meanwhile_evaluated]


def _first_run(tmp_path, name, meanwhile=None, seed=None):
    """Trainer A: 2 steps, an evaluation, (another Trainer's doings), 2 steps, a checkpoint.
    (losses, weights, the checkpoint's rng)."""
    trainer = _trainer(tmp_path, name)
    _steps(trainer, 2)
    trainer.evaluate("valid", 4)
    if meanwhile is not None:
        meanwhile(tmp_path, seed)
    _steps(trainer, 2)
    path = trainer.save()
    weights = [np.array(p.data) for p in trainer.model.parameters()]
    return trainer.losses, weights, checkpoint.read_metadata(path)["rng"]


@pytest.mark.parametrize("meanwhile", MEANWHILE)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_second_trainer_leaves_the_first_on_its_own_generator(tmp_path, meanwhile, seed):
    """The same seed as A's (its counter restarted at 0) or another one; built only,
    stepped, or evaluated: A's losses, weights and saved generator are those of A alone."""
    alone = _first_run(tmp_path, "alone")
    beside = _first_run(tmp_path, "beside", meanwhile, seed)
    assert beside[0] == alone[0] and len(alone[0]) == 4
    assert all(np.array_equal(a, b) for a, b in zip(alone[1], beside[1], strict=True))
    assert beside[2] == alone[2] and alone[2]["counter"] > 0


def _keyed_step(trainer, keys):
    """The trainer's device step as the CuPy twins use the generator and the optimizer:
    one dropout draw from the device's default generator, looked up at each call as
    ops/dropout.py does (its keys appended to ``keys`` when run eagerly), Adam's slots
    while captured; body(flag, src, tgt_in, tgt_out) -> (loss, norm, flag)."""
    opt = trainer.optimizer

    def step(flag, src, tgt_in, tgt_out):
        drawn = cupy_dropout.dropout_keys(backend.default_generator(trainer.cfg.device), 0.1)
        if cuda_graph.recorder is None:
            keys.append(tuple(int(k) for k in drawn[:2]))
        for p in opt.params:
            p.grad = np.ones(p.shape, dtype=np.float32)
        if cuda_graph.recorder is not None:
            for group in opt.groups:
                cuda_graph.recorder.adam_slot(group.data, cupy_adam.adam_scalars)
        opt.step(apply_if=flag)
        return np.float32(src.sum()), np.float32(1.0), flag

    return step


def _graph_run(tmp_path, name, warmup, seed):
    """Trainer A with its step in GraphedSteps (captured at step ``warmup + 1``; 10**9:
    never, the eager twin): 3 steps, a Trainer of ``seed`` built and stepped, 3 steps.
    (the keys each of A's steps used, A's checkpointed rng)."""
    keys = []
    trainer = _trainer(tmp_path, name)
    pad = (trainer.model_cfg.pad_id, trainer.model_cfg.max_len)
    steps = trainer.run_step = GraphedSteps(_keyed_step(trainer, keys), trainer.optimizer,
                                            warmup, pad=pad, carry=np.ones((), bool))  # fmt: skip
    for i in range(6):
        if i == 3:
            _steps(_trainer(tmp_path, f"{name}-b", seed), 1)
        replays = steps.replays
        _steps(trainer, 1)
        if steps.replays > replays:  # what the replay wrote into the dropout slot
            (g,) = steps.graphs.values()
            offset = g.recorder.dropout[0][2]
            keys.append(tuple(int(k) for k in g.host[offset : offset + 8].view(np.uint32)))
    return keys, steps.replays, checkpoint.read_metadata(trainer.save())["rng"]


@pytest.mark.parametrize("seed", [1, 7])
def test_a_second_trainer_leaves_the_first_trainers_graphs_on_its_generator(
    tmp_path, monkeypatch, seed
):
    """A's replays after another Trainer was built use the keys of A's eager twin, and A's
    checkpoint records the generator its replays advanced."""
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy([]))
    monkeypatch.setattr(cuda_graph, "upload", np.asarray)
    graphed = _graph_run(tmp_path, "graphed", 2, seed)
    eager = _graph_run(tmp_path, "eager", 10**9, seed)
    assert graphed[1] == 4 and eager[1] == 0  # steps 3-6 replayed
    assert graphed[0] == eager[0] and len(set(eager[0])) == 6
    assert graphed[2] == eager[2] and eager[2]["counter"] == 6


def _standin_run(tmp_path, name, graph, batches, explicit, seed):
    """Trainer A on the stand-in's GPU: replayed from graphs (the default on CUDA, or
    ``capture_steps``) or eager fed the batches padded; after 3 steps a Trainer of ``seed``
    is built and steps once. (losses, weights, A's checkpointed rng, A's graph report)."""
    from minitransformer.data.batching import Batch

    trainer = _trainer(tmp_path, name, device="cuda:0", cuda_graph=graph and not explicit)
    if graph and explicit:
        trainer.capture_steps()
    cfg = trainer.model_cfg
    for i, batch in enumerate(batches):
        if i == 3:
            _steps(_trainer(tmp_path, f"{name}-b", seed, device="cuda:0"), 1)
        if not graph:  # as the graphs pad it
            ids = cuda_graph.bucketed((batch.src, batch.tgt_in, batch.tgt_out), cfg.pad_id,
                                      cfg.max_len)  # fmt: skip
            batch = Batch(*ids, batch.n_tokens, batch.indices)
        trainer.train_step(batch)
        trainer.step += 1
    trainer.read_back()
    weights = [backend.to_numpy(p.data) for p in trainer.model.parameters()]
    rng = checkpoint.read_metadata(trainer.save())["rng"]
    return trainer.losses, weights, rng, trainer.graph_report()


@pytest.mark.usefixtures("on_standin")
@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("seed", [1, 7])
def test_the_first_trainers_replays_give_its_eager_twins_numbers(tmp_path, explicit, seed):
    """On the stand-in (graphs replay the captured kernels): A's graphs, captured at step 3
    and replayed through another Trainer's construction and step, give the losses, weights
    and saved generator of its eager twin, bit for bit (the default on CUDA, or asked for)."""
    source = _trainer(tmp_path, "source")
    batches = [next(source.stream) for _ in range(8)]
    graphed = _standin_run(tmp_path, "graphed", True, batches, explicit, seed)
    eager = _standin_run(tmp_path, "eager", False, batches, explicit, seed)
    assert graphed[3]["mode"] == "graph" and eager[3]["mode"] == "eager"
    assert (graphed[3]["graphs"], graphed[3]["replays"], graphed[3]["fallbacks"]) == (1, 6, {})
    assert graphed[0] == eager[0] and len(eager[0]) == 8
    assert all(np.array_equal(a, b) for a, b in zip(graphed[1], eager[1], strict=True))
    assert graphed[2] == eager[2]


@pytest.mark.parametrize("value", [None, 3, "cpu", np.random.default_rng(0)])
def test_only_a_generator_can_be_made_the_default(value):
    with pytest.raises(ArgumentError, match="must be a backend.Generator"):
        backend.random.set_default_generator(value)
