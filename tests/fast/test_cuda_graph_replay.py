"""A captured training step replays the eager step's numbers, bit for bit (issue 49, item 5).

One scenario, run two ways: on a GPU (``pytest -m gpu``, CuPy and CUDA graphs for real; also
run by ``python -m minitransformer.tools.gpucheck``) and on the CPU through the counting
NumPy stand-in for CuPy (``tests/cupy_standin``: capture records the step's calls, a replay
runs them again with the values frozen at capture, as a graph does). A Trainer whose steps
are replayed from CUDA graphs (``capture_steps``) and an eager one fed the same batches
padded as the graphs pad them (``bucketed``) go through two batch shapes (each captured at
its third step, then replayed), an evaluation between steps, a save and a resume (the
resumed trainer captures again): the losses, the evaluation's metrics and the weights are
the same bit for bit.

The capture's own Python is checked as well: one Adam slot per flat group over all of it
(every parameter had a gradient), every parameter with a finite gradient after a replay,
and, on the stand-in, which sees them, no hazard inside a capture (no read back to the
host, no copy from it, no CuPy cuBLAS call).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from cupy_standin import on_standin  # noqa: F401 - the fixture

from minitransformer import backend
from minitransformer.data.batching import Batch
from minitransformer.fast import cuda_kernels_enabled
from minitransformer.fast.gpu.cuda_graph import bucketed
from minitransformer.train import TrainConfig, Trainer

# the two models: an encoder-decoder (copy) and a decoder-only one (lm, characters)
TASKS = {
    "copy": dict(task="copy", task_knobs=dict(max_len=20, n_train=64, n_valid=4, n_test=4)),
    "lm": dict(task="lm", task_knobs=dict(tokenizer="bpe", n_merges=100, max_words=8,
                                          n_train=96, n_valid=4, n_test=4)),
}  # fmt: skip
# the order of the two shapes' batches in each part (before the save, after the resume):
# A's third step is captured (A3), then B's (B3); the last two replay
ORDER = "AAABBBAB"
EVALUATE_AFTER = 4  # an evaluation between steps, in the first part


@pytest.fixture(params=[pytest.param("cuda", marks=pytest.mark.gpu), "standin"])
def where(request):
    """``"cuda"`` (a real GPU, ``pytest -m gpu``) or ``"standin"`` (the CPU, through the
    stand-in, installed for the test); the stand-in module or None. A captured step needs
    the fused kernels: skipped with ``MT_CUDA_KERNELS=0`` (the GPU check's "before" run)."""
    if not cuda_kernels_enabled():
        pytest.skip("MT_CUDA_KERNELS=0: a step is captured only with the fused kernels on")
    if request.param == "cuda":
        yield None
    else:
        yield request.getfixturevalue("on_standin")


def _config(out, task: str, graph: bool) -> TrainConfig:
    return TrainConfig(device="cuda:0", out=str(out), progress=False, plots=False,
                       preset="tiny", batch_size=2, dropout=0.1, steps=100,
                       cuda_graph=graph, **TASKS[task])  # fmt: skip


def _batches(tmp_path, task: str) -> list[Batch]:
    """ORDER's batches twice: two padded shapes (the shorter A, the longer B), each batch
    drawn from the task's stream (the same for both runs)."""
    source = Trainer(dataclasses.replace(_config(tmp_path / "src", task, False), device="cpu"))
    cfg = source.model_cfg
    by_shape: dict[tuple, list[Batch]] = {}
    for _ in range(200):
        batch = next(source.stream)
        shape = bucketed((batch.src, batch.tgt_in), cfg.pad_id, cfg.max_len)[1].shape
        by_shape.setdefault(shape, []).append(batch)
    full = sorted(s for s, got in by_shape.items() if s[0] == 2 and len(got) >= 8)
    assert len(full) >= 2, f"two padded shapes wanted, the stream gives {sorted(by_shape)}"
    pools = {"A": by_shape[full[0]], "B": by_shape[full[1]]}
    return [pools[k][i] for i, k in enumerate(ORDER * 2)]


def _padded(trainer: Trainer, batch: Batch) -> Batch:
    """The batch padded as the graphs pad it (``bucketed``): what the eager trainer is fed."""
    cfg = trainer.model_cfg
    src, tgt_in, tgt_out = bucketed((batch.src, batch.tgt_in, batch.tgt_out), cfg.pad_id,
                                    cfg.max_len)  # fmt: skip
    return Batch(src, tgt_in, tgt_out, batch.n_tokens, batch.indices)


def _run(out, task: str, graph: bool, batches: list[Batch], where) -> dict:
    """One trainer over ``batches``: the first part, an evaluation after EVALUATE_AFTER
    steps, a save; a trainer resumed from it runs the second part. Its losses, metrics,
    weights, and (graphs) what the captures made."""
    trainer, seen = Trainer(_config(out, task, graph)), []
    steps = trainer.capture_steps() if graph else None
    metrics = None
    for i, batch in enumerate(batches):
        if i == len(ORDER):  # save, resume (the graphs are captured again)
            trainer.save()
            if graph:
                seen.append(_captured(trainer, steps, where))
            trainer = Trainer.resume(out)
            steps = trainer.capture_steps() if graph else None
        trainer.train_step(batch if graph else _padded(trainer, batch))
        trainer.step += 1  # as train()'s loop counts
        if i + 1 == EVALUATE_AFTER:
            metrics = trainer.evaluate("valid", 2)
    trainer.read_back()
    if graph:
        seen.append(_captured(trainer, steps, where))
    weights = [backend.to_numpy(p.data) for p in trainer.model.parameters()]
    return dict(losses=trainer.losses, metrics=metrics, weights=weights, captured=seen)


def _captured(trainer: Trainer, steps, where) -> dict:
    """What one trainer's captures made: shapes, replays, failures; per graph, Adam's slots
    against the flat groups; whether every parameter has a finite gradient; the stand-in's
    hazards."""
    groups = [group.data.size for group in trainer.optimizer.groups]
    grads = [p.grad for p in trainer.model.parameters()]
    return dict(
        graphs=len(steps.graphs), replays=steps.replays, failed=dict(steps.failed),
        adam=[(len(g.recorder.adam), g.recorder.adam_sizes) for g in steps.graphs.values()],
        groups=(len(groups), groups),
        grads=all(g is not None and bool(np.isfinite(backend.to_numpy(g)).all()) for g in grads),
        hazards=None if where is None else list(where.HAZARDS),
    )  # fmt: skip


@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_captured_trainer_replays_the_eager_trainers_numbers(where, task, tmp_path):
    batches = _batches(tmp_path, task)
    eager = _run(tmp_path / "eager", task, False, batches, where)
    graph = _run(tmp_path / "graph", task, True, batches, where)
    assert len(eager["losses"]) == len(batches) and all(map(math.isfinite, eager["losses"]))
    assert graph["losses"] == eager["losses"]  # bit for bit
    assert graph["metrics"] == eager["metrics"]
    for a, b in zip(graph["weights"], eager["weights"], strict=True):
        assert np.array_equal(a, b)
    for part in graph["captured"]:  # before the save, after the resume
        assert part["failed"] == {} and part["graphs"] == 2 and part["replays"] == 4, part
        count, sizes = part["groups"]
        assert part["adam"] == [(count, sizes)] * 2, "one Adam slot per flat group, whole"
        assert part["grads"], "a parameter without a finite gradient after a replay"
        assert part["hazards"] in (None, []), f"inside a capture: {part['hazards']}"


def test_the_stand_in_leaves_nothing_behind():
    """Installed and undone (what the fixture does), the stand-in leaves CuPy as it found
    it: the same module (or none), the same answer to cuda_available(), no twin or library
    entry for its array type, a CuPy namespace chosen anew."""
    import sys

    import cupy_standin

    from minitransformer.backend import devices
    from minitransformer.function import TWINS

    before = (sys.modules.get("cupy"), backend.cuda_available())
    patch = pytest.MonkeyPatch()
    cp = cupy_standin.install(patch)
    try:
        assert backend.cuda_available()
        x = backend.asarray(np.ones((2, 3), dtype=np.float32), device="cuda:0")
        assert type(x) is cp.ndarray and backend.library_of(x) == "cupy"
        assert backend.to_numpy(backend.namespace(x).sum(x)).item() == 6.0
        assert any(kind is cp.ndarray for _, kind in TWINS)
    finally:
        patch.undo()
        cupy_standin._refresh()
    assert (sys.modules.get("cupy"), backend.cuda_available()) == before
    assert cp.ndarray not in devices._LIBRARIES
    assert not any(kind is cp.ndarray for _, kind in TWINS)
