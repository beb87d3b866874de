"""The CUDA graph as the default (issue 49), on the CPU with CuPy stood in (test_cuda_graph's
``_fake_cupy``, and the counting stand-in, tests/cupy_standin): the mode a Trainer chooses
and the one line that says why its steps run eagerly (train/graph_mode.py); GraphedSteps'
fallbacks, counted and said once per reason, its one memory pool shared by every shape (and
why sharing is safe), and its byte budget (fast/gpu/cuda_graph.py)."""

from __future__ import annotations

import dataclasses
import gc
import re
import sys
import types
import weakref

import numpy as np
import pytest
from cupy_standin import on_standin, record  # noqa: F401 - the fixture
from test_cuda_graph import _body, _fake_cupy, _params, _trainer

from minitransformer import backend
from minitransformer.errors import ArgumentError, TrainingError
from minitransformer.fast.gpu import cuda_graph
from minitransformer.fast.gpu.cuda_graph import GraphedSteps
from minitransformer.optim import SGD, Adam
from minitransformer.train import graph_mode

NOTE = "minitransformer: note: "
KEYS = {"requested", "mode", "why", "graphs", "replays", "eager_steps", "fallbacks",
        "pool_bytes", "max_bytes"}  # fmt: skip


def _notes(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(NOTE)]


def _on_cuda(trainer, monkeypatch):
    """The trainer as if on a GPU: its config says cuda:0, CuPy is the stand-in (its arrays
    NumPy's), the finite flag a NumPy one."""
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy([]))
    monkeypatch.delenv("MT_CUDA_KERNELS", raising=False)
    trainer.cfg = dataclasses.replace(trainer.cfg, device="cuda:0")
    trainer._healthy = np.ones((), dtype=bool)
    return trainer


# ----------------------------------------------------------------------------- the mode


@pytest.mark.parametrize("requested", [True, False])
def test_on_the_cpu_the_mode_is_off_and_nothing_is_said(tmp_path, capsys, requested):
    trainer = _trainer(tmp_path, "cpu")
    trainer.cfg = dataclasses.replace(trainer.cfg, cuda_graph=requested)
    trainer.train_step(next(trainer.stream))
    why = "CUDA graphs need a CUDA device; this run is on cpu"
    assert trainer.graph_report() == {"requested": requested, "mode": "off", "why": why}
    assert not isinstance(trainer.run_step, GraphedSteps)
    assert _notes(capsys) == []


def _world(trainer):
    trainer.world = types.SimpleNamespace(size=2, is_writer=True)


def _hook(trainer):
    trainer.grad_hook = lambda grads, loss: None


def _sgd(trainer):
    trainer.optimizer = SGD(trainer.model.parameters(), lr=0.1)


def _no_graph(trainer):
    trainer.cfg = dataclasses.replace(trainer.cfg, cuda_graph=False)


def _kernels_off(trainer):
    import os

    os.environ["MT_CUDA_KERNELS"] = "0"  # monkeypatch restores it (setenv first, below)


@pytest.mark.parametrize("change, why", [
    (_no_graph, "turned off (--no-cuda-graph)"),
    (_kernels_off, "MT_CUDA_KERNELS=0 turns the fused kernels off, and a captured step needs "
                   "them (unset it to replay steps from graphs)"),
    (_world, "a data-parallel run (2 ranks) all-reduces its gradients between processes in "
             "each step"),
    (_hook, "a gradient hook (Trainer.grad_hook) runs in each step"),
    (_sgd, "the optimizer is SGD, and a captured step updates with Adam only"),
])  # fmt: skip
def test_on_cuda_each_reason_for_eager_steps_is_said_in_one_line(tmp_path, capsys, monkeypatch,
                                                                 change, why):  # fmt: skip
    """Decided when training starts (after a data-parallel world was attached, as the CLI
    attaches it after building the trainer): before, the report says what would be chosen;
    the line comes once however often the mode is asked for."""
    trainer = _on_cuda(_trainer(tmp_path, "eager"), monkeypatch)
    monkeypatch.setenv("MT_CUDA_KERNELS", "1")
    assert trainer.graph_report()["mode"] == "graph"  # nothing decided at construction
    change(trainer)
    for _ in range(3):
        graph_mode.choose(trainer)
    assert trainer.graph_report() == {"requested": change is not _no_graph, "mode": "eager",
                                      "why": why}  # fmt: skip
    assert not isinstance(trainer.run_step, GraphedSteps)
    assert _notes(capsys) == [
        NOTE + "every training step runs eagerly, not from CUDA graphs: " + why
    ]


@pytest.mark.parametrize("change, why", [
    (_kernels_off, "MT_CUDA_KERNELS=0 turns the fused kernels off"),
    (_world, "a data-parallel run (2 ranks)"),
    (_hook, "a gradient hook (Trainer.grad_hook)"),
    (_sgd, "the optimizer is SGD"),
])  # fmt: skip
def test_capture_steps_refuses_on_cuda_for_the_reasons_train_runs_eagerly(tmp_path, monkeypatch,
                                                                          change, why):  # fmt: skip
    """An explicit capture_steps() names the same obstacle as train()'s one line, as a
    TrainingError, and installs nothing."""
    trainer = _on_cuda(_trainer(tmp_path, "refused"), monkeypatch)
    monkeypatch.setenv("MT_CUDA_KERNELS", "1")
    change(trainer)
    with pytest.raises(TrainingError, match="capture_steps: " + re.escape(why)):
        trainer.capture_steps()
    assert not isinstance(trainer.run_step, GraphedSteps)


def test_on_cuda_the_steps_go_through_graphs_and_a_failed_capture_is_said_once(
    tmp_path, capsys, monkeypatch
):
    """Kernels on, one process, Adam: GraphedSteps become the step (chosen at the first
    step); on the stand-in the capture fails (the reference Adam asks for no slot), so the
    shape's steps past its warm-up run eagerly: counted, said in one line."""
    trainer = _on_cuda(_trainer(tmp_path, "graph"), monkeypatch)
    monkeypatch.setattr(cuda_graph, "upload", np.asarray)
    for _ in range(6):
        trainer.train_step(next(trainer.stream))
    report = trainer.graph_report()
    assert isinstance(trainer.run_step, GraphedSteps) and set(report) == KEYS
    shapes = len(trainer.run_step.seen)
    assert report["mode"] == "graph" and report["why"] is None and report["requested"] is True
    assert report["graphs"] == report["replays"] == report["pool_bytes"] == 0
    assert report["eager_steps"] == 6 == sum(report["fallbacks"].values()) + 2 * shapes
    assert list(report["fallbacks"]) == ["capture failed"]
    (note,) = _notes(capsys)
    assert note.startswith(NOTE + "the step of batch shape 8x16 could not be captured as a "
                           "CUDA graph (")  # fmt: skip
    assert note.endswith("); it, and any shape that fails so, runs eagerly")


def test_a_line_said_mid_run_goes_above_the_progress_bar_once(tmp_path, capsys):
    """A fallback comes while the bar is drawn: its line is written above the bar (as an
    evaluation's), and never again, bar or not."""
    trainer = _trainer(tmp_path, "bar")
    written = []
    trainer.reporter.bar = types.SimpleNamespace(write=lambda line, file: written.append(line))
    for _ in range(2):
        graph_mode.say(trainer, "a fallback")
    trainer.reporter.bar = None
    graph_mode.say(trainer, "a fallback")
    graph_mode.say(trainer, "another")
    assert written == [NOTE + "a fallback"] and _notes(capsys) == [NOTE + "another"]


# ----------------------------------------------------------------------------- GraphedSteps


def _ids(n):
    return np.arange(2 * n, dtype=np.int64).reshape(2, n)


def test_too_many_shapes_run_eagerly_counted_and_said_once(monkeypatch):
    launches, lines = [], []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(launches))
    opt, gen = Adam(_params(), lr=0.01), backend.Generator(5, "cpu")
    steps = GraphedSteps(_body(opt, gen), opt, warmup=1, max_graphs=1,
                         carry=np.ones((), bool), on_fallback=lines.append)  # fmt: skip
    for n in (3, 3, 4, 4, 5, 5, 4):  # 3: warm-up, captured; 4 and 5: warm-up, then eager
        steps(_ids(n))
    assert steps.stats() == {"graphs": 1, "replays": 1, "eager_steps": 6,
                             "fallbacks": {"too many shapes": 3}, "pool_bytes": 0,
                             "max_bytes": 2**29}  # fmt: skip
    assert lines == ["batch shapes past the first 1 captured run eagerly, not from CUDA "
                     "graphs (one graph per shape; too many shapes)"]  # fmt: skip
    assert opt.step_count == gen.counter == 7 and launches == [1]


def _allocating(opt, gen, sizes):
    """``_body`` that, while captured, takes ``sizes[n]`` bytes for a temporary of the step
    at ids of width n (freed when the capture's Python is done, as a step's temporaries)."""
    body = _body(opt, gen)

    def step(flag, x):
        if cuda_graph.recorder is not None:
            temporary = sys.modules["cupy"].alloc(sizes[x.shape[1]])  # noqa: F841
        return body(flag, x)

    return step


def test_one_pool_serves_every_shape_within_its_budget(monkeypatch):
    """Two shapes' captures share one pool (the second reuses the first's freed temporary:
    600 bytes, not 1,200); a shape whose capture would pass the budget runs eagerly, said
    once, and the pool does not grow; the generator and optimizer count each step once."""
    launches, lines = [], []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(launches))
    opt, gen = Adam(_params(), lr=0.01), backend.Generator(5, "cpu")
    steps = GraphedSteps(_allocating(opt, gen, {3: 600, 4: 500, 5: 2000, 6: 1000}), opt,
                         warmup=1, max_bytes=1000, carry=np.ones((), bool),
                         on_fallback=lines.append)  # fmt: skip
    for n in (3, 3, 4, 4, 5, 5, 6, 6, 5):
        steps(_ids(n))
    stats = steps.stats()
    assert (stats["graphs"], stats["replays"], stats["pool_bytes"]) == (2, 2, 600)
    assert stats["fallbacks"] == {"memory budget": 3} and stats["max_bytes"] == 1000
    assert lines == ["batch shapes past the CUDA graphs' memory budget (0.0 MiB) run eagerly, "
                     "not from CUDA graphs"]  # fmt: skip
    assert opt.step_count == gen.counter == 9 and launches == [1, 1]


def test_a_pool_at_its_budget_captures_no_more_shapes(monkeypatch):
    captures = []
    fake = _fake_cupy([])
    begin = fake.cuda.Stream.begin_capture
    monkeypatch.setattr(fake.cuda.Stream, "begin_capture",
                        lambda self: captures.append(1) or begin(self))  # fmt: skip
    monkeypatch.setitem(sys.modules, "cupy", fake)
    opt, gen = Adam(_params(), lr=0.01), backend.Generator(5, "cpu")
    steps = GraphedSteps(_allocating(opt, gen, {3: 1000, 4: 8}), opt, warmup=1,
                         max_bytes=1000, carry=np.ones((), bool))  # fmt: skip
    for n in (3, 3, 4, 4):
        steps(_ids(n))
    assert captures == [1] and steps.stats()["fallbacks"] == {"memory budget": 1}
    assert "the pool holds" in steps.failed[(((2, 4), "<i8"),)]


def test_the_default_budget_is_half_the_free_device_memory_at_the_first_capture(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy([], free=3 * 2**30))
    opt, gen = Adam(_params(), lr=0.01), backend.Generator(5, "cpu")
    steps = GraphedSteps(_body(opt, gen), opt, warmup=1, carry=np.ones((), bool))
    steps(_ids(3))
    assert steps.stats()["max_bytes"] is None  # not chosen before a capture
    steps(_ids(3))
    assert steps.stats()["max_bytes"] == 3 * 2**29 and steps.stats()["graphs"] == 1


def test_adams_state_is_never_made_under_capture(monkeypatch):
    """With no eager step first (warmup=0), Adam's moments would be made by kernels a replay
    repeats (zeroing them every step): that shape is not captured."""
    launches, lines = [], []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(launches))
    opt, gen = Adam(_params(), lr=0.01), backend.Generator(5, "cpu")
    steps = GraphedSteps(_body(opt, gen), opt, warmup=0, carry=np.ones((), bool),
                         on_fallback=lines.append)  # fmt: skip
    steps(_ids(3))
    assert launches == [] and steps.stats()["fallbacks"] == {"capture failed": 1}
    assert "Adam's state is made at its first step" in lines[0]
    steps(_ids(4))  # the state exists now: captured and replayed
    assert launches == [1] and opt.step_count == gen.counter == 2


@pytest.mark.parametrize("name, value", [
    ("max_bytes", 0), ("max_bytes", -1), ("max_bytes", 1.5), ("max_bytes", True),
    ("max_bytes", "1000"), ("warmup", -1), ("warmup", 2.0), ("max_graphs", None),
    ("max_graphs", -3),
])  # fmt: skip
def test_the_sizes_are_checked(name, value):
    with pytest.raises(ArgumentError, match=f"GraphedSteps: {name} must be an integer"):
        GraphedSteps(lambda *a: a, Adam(_params(), lr=0.01), **{name: value})


@pytest.mark.parametrize("task, knobs", [
    ("copy", dict(n_train=64, n_valid=4, n_test=4, max_len=20)),
    ("lm", dict(tokenizer="char", max_words=5, n_train=40, n_valid=4, n_test=4)),
])  # fmt: skip
@pytest.mark.usefixtures("on_standin")
def test_nothing_made_in_a_capture_outlives_it_but_its_outputs(tmp_path, monkeypatch, task, knobs):
    """What makes one pool safe for every shape: of the arrays a capture allocates (from
    the pool), none is held after it (by a cache, the optimizer, a gradient ...) but the
    step's outputs, which each replay's caller copies at once; the rest is the graph's own
    (the stand-in's record of the calls, pointers on a GPU), so a later capture may reuse
    their memory. Over batch shapes, an evaluation between steps, on the counting stand-in."""
    from minitransformer.config import TrainConfig
    from minitransformer.train import Trainer

    made, hold = [], record._hold

    def watched(arrays):
        if record._state.allocator is not None:  # inside a capture
            made.extend(weakref.ref(a) for a in arrays)
        return hold(arrays)

    monkeypatch.setattr(record, "_hold", watched)
    trainer = Trainer(TrainConfig(task=task, steps=12, dropout=0.1, out=str(tmp_path / "r"),
                                  progress=False, batch_size=4, preset="tiny", device="cuda:0",
                                  task_knobs=knobs))  # fmt: skip
    for i in range(16):
        trainer.train_step(next(trainer.stream))
        if i == 8:
            trainer.evaluate("valid", 4)
    trainer.read_back()
    steps = trainer.run_step
    assert steps.stats()["graphs"] >= 1 and made
    outputs = {id(out) for g in steps.graphs.values() for out in g.outputs}
    for g in steps.graphs.values():
        g.graph.calls = []  # the record of the calls (on a GPU: the graph's pointers)
    gc.collect()
    kept = [(a.shape, a.dtype) for a in (ref() for ref in made) if a is not None
            and id(a) not in outputs]  # fmt: skip
    assert kept == []
