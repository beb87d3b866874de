"""How a Trainer runs its device step: replayed from CUDA graphs, or eagerly, and why.

``TrainConfig.cuda_graph`` (True by default) asks for graphs; the Trainer decides once, at
the start of ``train()`` (or at its first ``train_step``), so after a data-parallel world
was attached and after a resumed run's state was restored (the capture itself is lazy, at
each batch shape's third step: fast/gpu/cuda_graph.py):

- on the CPU (or any device but CUDA): mode ``"off"``, silently;
- on a CUDA device, with ``cuda_graph`` on, the fast tier on (``MT_CUDA_KERNELS`` unset or
  1), one process, no gradient hook and Adam: mode ``"graph"`` (``GraphedSteps`` become the
  trainer's ``run_step``);
- otherwise mode ``"eager"`` and ONE line on stderr saying why.

Each later fallback of a graphed run (a failed capture, too many shapes, the memory budget)
is said once per reason by ``GraphedSteps`` through the same channel (``say``), and
``report()`` (``Trainer.graph_report()``) counts them for the result card.
"""

from __future__ import annotations

import sys
from typing import Any

from .. import backend
from ..errors import TrainingError

EAGER = "every training step runs eagerly, not from CUDA graphs: "


def decide(trainer: Any) -> tuple[str, str | None]:
    """(mode, why) for this trainer now, with no side effect: ("off", why) off CUDA,
    ("graph", None), or ("eager", why)."""
    device = trainer.cfg.device
    if not device.startswith("cuda"):
        return "off", f"CUDA graphs need a CUDA device; this run is on {device}"
    if not trainer.cfg.cuda_graph:
        return "eager", "turned off (--no-cuda-graph)"
    why = obstacle(trainer)
    return ("graph", None) if why is None else ("eager", why)


def obstacle(trainer: Any) -> str | None:
    """Why a trainer on a CUDA device cannot replay its step from graphs, or None."""
    from ..fast import cuda_kernels_enabled
    from ..optim import Adam

    if not cuda_kernels_enabled():
        return ("MT_CUDA_KERNELS=0 turns the fused kernels off, and a captured step needs "
                "them (unset it to replay steps from graphs)")  # fmt: skip
    if trainer.world is not None:
        return (f"a data-parallel run ({trainer.world.size} ranks) all-reduces its "
                "gradients between processes in each step")  # fmt: skip
    if trainer.grad_hook is not None:
        return "a gradient hook (Trainer.grad_hook) runs in each step"
    if type(trainer.optimizer) is not Adam:
        name = type(trainer.optimizer).__name__
        return f"the optimizer is {name}, and a captured step updates with Adam only"
    return None


def choose(trainer: Any) -> None:
    """Decide the mode once (``decide``): install the graphs, or say in one line why every
    step runs eagerly (on a CUDA device only). Keeps graphs already installed
    (``Trainer.capture_steps``)."""
    if trainer._graph_mode is not None:
        return
    mode, why = decide(trainer)
    trainer._graph_mode = (mode, why)
    if mode == "graph":
        install(trainer)
    elif mode == "eager":
        say(trainer, EAGER + why)


def capture(trainer: Any, warmup: int = 2, max_graphs: int = 16,
            max_bytes: int | None = None) -> Any:  # fmt: skip
    """``Trainer.capture_steps``: the graphs installed now, or TrainingError naming what
    rules them out (whatever ``cfg.cuda_graph`` says: an explicit request)."""
    if not trainer.cfg.device.startswith("cuda"):
        raise TrainingError(
            "capture_steps: CUDA graphs need a GPU (--device cuda) with the fast tier on "
            f"(MT_CUDA_KERNELS unset or 1); this run is on {trainer.cfg.device}"
        )
    why = obstacle(trainer)
    if why is not None:
        raise TrainingError(f"capture_steps: {why}")
    trainer._graph_mode = ("graph", None)
    return install(trainer, warmup, max_graphs, max_bytes)


def install(trainer: Any, warmup: int = 2, max_graphs: int = 16,
            max_bytes: int | None = None) -> Any:  # fmt: skip
    """``GraphedSteps`` over the trainer's ``device_step`` as its ``run_step``: batches
    padded to a few shapes, the finite flag kept in a buffer of theirs, fallbacks said."""
    from ..fast.gpu.cuda_graph import GraphedSteps

    healthy = trainer._healthy
    if healthy is None:
        xp = backend.namespace_for_device(trainer.cfg.device)
        healthy = xp.ones((), dtype=xp.bool)
    pad = (trainer.model_cfg.pad_id, trainer.model_cfg.max_len)
    trainer.run_step = GraphedSteps(
        trainer.device_step, trainer.optimizer, warmup, max_graphs, pad=pad, carry=healthy,
        max_bytes=max_bytes, on_fallback=lambda line: say(trainer, line),
    )  # fmt: skip
    return trainer.run_step


def say(trainer: Any, line: str) -> None:
    """The one channel of the mode's lines: a note on stderr (``minitransformer: note:
    ...``, as ``runs.note`` writes it), once per line and run, from the process that
    reports; above the progress bar while there is one (a fallback comes mid-run)."""
    if line in trainer._graph_lines:
        return
    trainer._graph_lines.add(line)
    reporter = trainer.reporter
    if reporter.bar is None:
        reporter.note(f"cuda-graph: {line}", line)
    elif reporter.is_writer():
        reporter.bar.write(f"minitransformer: note: {line}", file=sys.stderr)


def report(trainer: Any) -> dict[str, Any]:
    """``Trainer.graph_report()``: {"requested": cfg.cuda_graph, "mode": "graph" | "eager" |
    "off", "why": str | None}, plus ``GraphedSteps.stats()``'s keys when graphs are in use
    (graphs, replays, eager_steps, fallbacks, pool_bytes, max_bytes). Before the mode is
    decided (no step yet): what ``decide`` would choose now."""
    mode, why = trainer._graph_mode or decide(trainer)
    result: dict[str, Any] = {"requested": bool(trainer.cfg.cuda_graph), "mode": mode, "why": why}
    stats = getattr(trainer.run_step, "stats", None)
    if mode == "graph" and stats is not None:
        result.update(stats())
    return result
