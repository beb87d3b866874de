"""A whole training step captured once as a CUDA graph, then replayed: one launch per step.

On a GPU every step is bound by the host: a tiny step is ~500 kernels, each costing 10-20 µs
of Python and CuPy to launch, while the GPU needs 2-3 µs for most of them. A CUDA graph
records the kernels of one step (their arguments and pointers included) and replays them
all from one call, so the Python of the step runs once, at capture.

    steps = GraphedSteps(body, optimizer)         # body(*ids) -> (loss, norm), device work only
    loss, norm = steps(src, tgt_in, tgt_out)      # host ids (checked); one graph per shape

The trainer (``Trainer.capture_steps``, train/trainer.py) installs one as the device part of
its step, with the two things a graph needs and an eager step does not, both kept here:

- **Buckets** (``pad=(pad_id, max_len)``): the ids padded on the right to a multiple of
  ``BUCKET`` (``bucketed``), so that a run has a few batch shapes and each shape's graph is
  replayed; the loss and the gradients are those of the unpadded batch.
- **A flag carried from step to step** (``carry=``, the trainer's "every step so far was
  finite"): body(flag, *ids) -> (*outputs, flag). A graph reads and writes fixed
  addresses, so the flag lives in one device buffer here, which every step, eager or
  replayed, reads and overwrites in place (the copy is captured with the graph): after a
  bad step no update is ever applied, as in an eager run.

What a graph freezes, and how each is kept right:

- **Inputs.** The ids are copied (one host-to-device copy per step, with the per-step values
  below) into device buffers the graph reads.
- **Per-step values.** A kernel argument is frozen at capture. Dropout's keys (a fresh draw
  each call) and Adam's bias corrections (a function of the step count) are therefore read
  by the ``*_graph`` kernels from device slots (``recorder``, below), which every replay
  refills with what the eager step would compute: keys of the generator's next draws
  (``counter_keys``), Adam's scalars at the optimizer's next step and learning rate. So a
  replayed step gives the eager step's numbers (the same kernels on the same values).
- **Memory.** Arrays made during capture come from ONE memory pool shared by all the shapes'
  graphs (``graph_pool.py``: never handed to anything else; PyTorch shares graph pools
  the same way): a replay writes the addresses its capture was given, which no array
  outside the graphs may be given. Sharing is safe because the graphs never run at once
  (one stream, one step at a time) and what a replay leaves for later is only its outputs,
  kept alive in ``_Graph.outputs`` (so never handed to another capture) and copied out
  right after the launch; every other array of a capture is made and used within its own
  replay. Parameters, gradients' flat buffers, Adam's moments and the carried flag are made
  before the first capture (the warm-up steps), outside the pool. The pool is bounded by
  ``max_bytes``: a capture that would grow it past the budget stops (that shape runs
  eagerly, fallback "memory budget"); half of the device memory free at the first capture
  by default (``BUDGET_FRACTION``).
- **Host-side counters.** Capture runs the step's Python once without running its kernels:
  the optimizer does not count it (``Optimizer.uncounted``) and the generators' draws are
  taken back (``Generator.advance``); each replay counts its step as ``Optimizer.step``
  would (``Optimizer.advance``) and advances the generators past its draws. Only these
  public methods are used: the optimizer's and the generator's bookkeeping stay theirs.
- **Matrix products.** CuPy refuses cuBLAS under capture (cupy issue #6290); ``xp.matmul`` is
  ``fast/gpu/cublas.py``, which calls cuBLAS's C API itself and may be captured.

A shape is captured at its third step (two eager steps first: every kernel compiled, the
optimizer's state made); at most ``max_graphs`` shapes are kept, others run eagerly. Needs a
step whose update is the whole flat group (every parameter has a gradient: one Adam launch
per group, over all of it): anything else runs eagerly, as does everything when capture
fails (``failed`` says why).

**Fallbacks are said and counted.** A step that runs eagerly past its shape's warm-up is a
fallback, counted by reason in ``stats()["fallbacks"]``: ``"capture failed"``, ``"too many
shapes"`` (past ``max_graphs``), ``"memory budget"``. ``on_fallback(line)`` is called once
per reason (per error, for failed captures), with a line that names it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...backend.random import counter_keys
from ...errors import ArgumentError
from .graph_pool import GraphPool, OverBudget, mib

SLOT_BYTES = 64 * 1024  # per-step values of one graph: dropout keys (8 B) and Adam (16 B) each
BUCKET = 16  # with ``pad``, the ids are padded to a multiple of this length
BUDGET_FRACTION = 0.5  # max_bytes by default: this much of the device memory free at capture

# the reasons a step runs eagerly past its shape's warm-up (stats()["fallbacks"]' keys)
CAPTURE_FAILED = "capture failed"
TOO_MANY_SHAPES = "too many shapes"
MEMORY_BUDGET = "memory budget"


def bucket_length(n: int, max_len: int) -> int:
    """n positions rounded up to a multiple of BUCKET, at most max_len (and at least n)."""
    return max(n, min(max_len, -(-n // BUCKET) * BUCKET))


def bucketed(ids: tuple[Any, ...], pad_id: int, max_len: int) -> tuple[Any, ...]:
    """(src (B, S), tgt_in (B, T), tgt_out (B, T)) host ids padded on the right with
    ``pad_id`` to one length L, max(S, T) rounded up to a multiple of BUCKET (at most
    max_len), so that a run has a few batch shapes and each shape's captured step is
    replayed. The loss and the gradients are those of the unpadded batch: padded source
    keys are masked, padded targets ignored, and no real position attends to a later one."""
    L = bucket_length(max(a.shape[1] for a in ids), max_len)
    return tuple(np.pad(a, ((0, 0), (0, L - a.shape[1])), constant_values=pad_id) for a in ids)


def upload(a: np.ndarray) -> Any:
    """A host array copied to the current GPU: the ids of a step run eagerly."""
    import cupy

    return cupy.asarray(a)


class Recorder:
    """The device slots of one capture (``recorder`` while it runs): the CuPy twins ask it
    for their per-step values (``fast/cupy/dropout.py``, ``fast/cupy/adam.py``)."""

    def __init__(self, device_buffer: Any, start: int):
        self.buf, self.start, self.used = device_buffer, start, start
        # (generator, k, byte offset) per dropout slot: the generator's k-th draw of a step
        self.dropout: list[tuple[Any, int, int]] = []
        # (byte offset, dtype, scalars) of the Adam slots; scalars(dtype, lr=..., t=...):
        # the launch's scalar arguments, whose last two a replay writes into the slot
        self.adam: list[tuple[int, Any, Any]] = []
        self.adam_sizes: list[int] = []  # the elements each Adam launch updated
        self.first: dict[int, tuple[Any, int]] = {}  # id -> (generator, counter at capture)

    def _slot(self, nbytes: int) -> int:
        offset = self.used
        if offset + nbytes > self.start + SLOT_BYTES:
            raise RuntimeError("cuda_graph: more per-step values than SLOT_BYTES holds")
        self.used = offset + (nbytes + 7) // 8 * 8
        return offset

    def dropout_keys(self, generator: Any, p: float) -> tuple[Any, int]:
        first = self.first.setdefault(id(generator), (generator, generator.counter))[1]
        k = generator.counter - first
        threshold = generator.dropout_keys(p)[2]  # advances the counter, as eagerly
        offset = self._slot(8)
        self.dropout.append((generator, k, offset))
        return self.buf[offset : offset + 8].view(np.uint32), threshold

    def adam_slot(self, p: Any, scalars: Callable[..., tuple]) -> Any:
        """The slot of Adam's two per-step scalars for the update of ``p`` (its flat group,
        if the update is whole); ``scalars(dtype, lr=..., t=...)``: all the launch's scalars
        (``fast/cupy/adam.py``'s ``adam_scalars``), the last two of which a replay writes."""
        dtype = np.dtype(p.dtype)
        offset = self._slot(2 * dtype.itemsize)
        self.adam.append((offset, dtype, scalars))
        self.adam_sizes.append(p.size)
        return self.buf[offset : offset + 2 * dtype.itemsize].view(dtype)

    def rewind(self) -> list[tuple[Any, int]]:
        """Take back each generator's draws of the capture (``Generator.advance``: the
        kernels that would use them did not run); return (generator, its draws per step),
        what each replay advances it by."""
        draws = []
        for gen, first in self.first.values():
            draws.append((gen, gen.counter - first))
            gen.advance(first - gen.counter)
        return draws


# While GraphedSteps captures a step, ``recorder`` is its Recorder: the per-step values a
# kernel would take by value (a dropout draw's keys, Adam's bias corrections), which a graph
# would freeze, are then read from device slots that each replay refills.
recorder: Recorder | None = None


class _Graph:
    """One captured step: its graph, buffers and slots (its memory: the shared pool's)."""

    def __init__(self) -> None:
        self.graph: Any = None
        self.device: Any = None  # uint8: the ids, then the slots
        self.host: np.ndarray | None = None  # its host twin, filled before each replay
        self.ids: list[tuple[int, int]] = []  # (byte offset, nbytes) of each input
        self.inputs: list[Any] = []  # device views of the ids
        self.outputs: tuple[Any, ...] = ()
        self.recorder: Recorder | None = None
        self.draws: list[tuple[Any, int]] = []  # (generator, draws per step)


class GraphedSteps:
    """Training steps of ``body`` replayed from CUDA graphs, one per input shape (module doc).

    ``body(*device_ids)`` runs one whole step on the device (forward, backward, clip,
    ``optimizer.step``) and returns device arrays (the loss and the gradient norm); it must
    not read anything back to the host. ``pad=(pad_id, max_len)``: the ids are bucketed
    first (``bucketed``). ``carry``: a 0-d device array, a flag carried from step to step;
    body(flag, *device_ids) -> (*outputs, flag), the flag kept here (a copy of ``carry``,
    in ``self.carry``) and overwritten in place by each step. ``max_bytes``: the budget of
    the graphs' shared memory pool (None: ``BUDGET_FRACTION`` of the device memory free at
    the first capture). ``on_fallback(line)``: told once per distinct reason a step runs
    eagerly (module doc); ``stats()``: what ran how.
    """

    def __init__(self, body: Callable[..., tuple[Any, ...]], optimizer: Any,
                 warmup: int = 2, max_graphs: int = 16, *, pad: tuple[int, int] | None = None,
                 carry: Any = None, max_bytes: int | None = None,
                 on_fallback: Callable[[str], Any] | None = None):  # fmt: skip
        from ...optim import Adam

        if type(optimizer) is not Adam:
            raise TypeError("GraphedSteps: the captured update is Adam's (fast/cupy/adam.py)")
        for name, value, least in (("warmup", warmup, 0), ("max_graphs", max_graphs, 0),
                                   ("max_bytes", max_bytes, 1)):  # fmt: skip
            if value is None and name == "max_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ArgumentError(f"GraphedSteps: {name} must be an integer of at least "
                                    f"{least}, got {value!r}")  # fmt: skip
        self.body, self.optimizer = body, optimizer
        self.warmup, self.max_graphs, self.pad = warmup, max_graphs, pad
        self.memory = GraphPool(max_bytes, BUDGET_FRACTION)  # the graphs' one pool
        self.on_fallback = on_fallback
        self.carry = None if carry is None else carry.copy()  # one buffer, every step's
        self.graphs: dict[tuple, _Graph] = {}
        self.seen: dict[tuple, int] = {}
        self.failed: dict[tuple, str] = {}  # shape -> why it runs eagerly
        self.reasons: dict[tuple, str] = {}  # shape -> its fallback reason (CAPTURE_FAILED ...)
        self.replays = 0
        self.eager_steps = 0  # warm-up steps and fallbacks
        self.fallbacks: dict[str, int] = {}  # reason -> eager steps past the warm-up
        self._said: set[tuple[str, str]] = set()  # (reason, error) on_fallback was told

    # ------------------------------------------------------------------ one step
    def __call__(self, *ids: np.ndarray) -> tuple[Any, ...]:
        if self.pad is not None:  # a few shapes, so that each shape's graph is replayed
            ids = bucketed(ids, *self.pad)
        ids = tuple(np.ascontiguousarray(a) for a in ids)
        key = tuple((a.shape, a.dtype.str) for a in ids)
        g = self.graphs.get(key)
        if g is None:
            self.seen[key] = n = self.seen.get(key, 0) + 1
            if n > self.warmup:
                g = self._capture_or_fall_back(key, ids)
            if g is None:  # eagerly
                self.eager_steps += 1
                return self._run(*(upload(a) for a in ids))
        return self._replay(g, ids)

    def stats(self) -> dict[str, Any]:
        """What ran how: ``graphs`` (shapes captured), ``replays``, ``eager_steps`` (the
        shapes' warm-up steps and the fallbacks), ``fallbacks`` ({reason: eager steps past
        the warm-up}), ``pool_bytes`` (what the graphs' shared pool holds) and ``max_bytes``
        (its budget; None until the first capture chooses the default)."""
        return {
            "graphs": len(self.graphs),
            "replays": self.replays,
            "eager_steps": self.eager_steps,
            "fallbacks": dict(self.fallbacks),
            "pool_bytes": self.memory.total_bytes(),
            "max_bytes": self.memory.max_bytes,
        }

    def _capture_or_fall_back(self, key: tuple, ids: tuple[np.ndarray, ...]) -> _Graph | None:
        """A shape past its warm-up: its graph, captured now, or None (a fallback, counted
        and said) when it was refused before, there are ``max_graphs`` graphs already, the
        pool is at its budget, or the capture fails."""
        if key not in self.failed:
            if len(self.graphs) >= self.max_graphs:
                self.failed[key] = f"{self.max_graphs} shapes have graphs already"
                self.reasons[key] = TOO_MANY_SHAPES
            elif self.memory.full():
                self.failed[key] = f"the pool holds {mib(self.memory.total_bytes())}"
                self.reasons[key] = MEMORY_BUDGET
            else:
                g = self._capture(key, ids)
                if g is not None:
                    return g
        reason = self.reasons[key]
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
        said = (reason, self.failed[key] if reason == CAPTURE_FAILED else "")
        if said not in self._said:  # once per reason (per error, for failed captures)
            self._said.add(said)
            if self.on_fallback is not None:
                self.on_fallback(self._fallback_line(key, reason))
        return None

    def _fallback_line(self, key: tuple, reason: str) -> str:
        """The line ``on_fallback`` is told when a step first falls back for ``reason``."""
        if reason == TOO_MANY_SHAPES:
            return (f"batch shapes past the first {self.max_graphs} captured run eagerly, "
                    "not from CUDA graphs (one graph per shape; too many shapes)")  # fmt: skip
        if reason == MEMORY_BUDGET:
            budget = mib(self.memory.max_bytes)
            return (f"batch shapes past the CUDA graphs' memory budget ({budget}) "
                    "run eagerly, not from CUDA graphs")  # fmt: skip
        shape = "x".join(str(n) for n in key[0][0])
        return (f"the step of batch shape {shape} could not be captured as a CUDA graph "
                f"({self.failed[key]}); it, and any shape that fails so, runs eagerly")  # fmt: skip

    def _run(self, *device_ids: Any) -> tuple[Any, ...]:
        """The body on device ids; with a carried flag, the flag read from its buffer and
        the new one written back into it (in place: a graph keeps the buffer's address)."""
        if self.carry is None:
            return tuple(self.body(*device_ids))
        *outputs, flag = self.body(self.carry, *device_ids)
        self.carry[...] = flag
        return tuple(outputs)

    def _replay(self, g: _Graph, ids: tuple[np.ndarray, ...]) -> tuple[Any, ...]:
        self._fill(g, ids)
        g.device[: g.recorder.used].set(g.host[: g.recorder.used])  # one copy to the GPU
        g.graph.launch()
        self.replays += 1
        return tuple(out.copy() for out in g.outputs)  # out of the graph's memory, at once

    def _fill(self, g: _Graph, ids: tuple[np.ndarray, ...]) -> None:
        """Write this step's ids and per-step values into ``g.host``, and count the step on
        the host as the eager one would: the optimizer's step (``Optimizer.advance``: each
        group's t), the generators' draws (``Generator.advance``)."""
        opt, host, rec = self.optimizer, g.host, g.recorder
        for (offset, nbytes), a in zip(g.ids, ids, strict=True):
            host[offset : offset + nbytes] = a.reshape(-1).view(np.uint8)
        steps = opt.advance()  # every parameter: the capture updated whole groups
        for (offset, dtype, scalars), t in zip(rec.adam, steps, strict=True):
            values = scalars(dtype, lr=opt.lr, betas=opt.betas, eps=opt.eps,
                             weight_decay=opt.weight_decay, t=t)[6:]  # fmt: skip
            host[offset : offset + 2 * dtype.itemsize] = np.array(values, dtype).view(np.uint8)
        for gen, k, offset in rec.dropout:  # the k-th draw from the generator's counter now
            k1, k2 = counter_keys(gen.seed, gen.counter + k)
            host[offset : offset + 8] = np.array([k1, k2], np.uint32).view(np.uint8)
        for gen, n in g.draws:
            gen.advance(n)

    # ------------------------------------------------------------------ capture
    def _capture(self, key: tuple, ids: tuple[np.ndarray, ...]) -> _Graph | None:
        """Capture the body at these shapes; None (and ``failed[key]``, ``reasons[key]``)
        when it cannot be."""
        import cupy as cp

        global recorder
        opt = self.optimizer
        if any(n not in group.state for group in opt.groups for n in opt.state_names):
            self.failed[key], self.reasons[key] = (  # made under capture, a replay would zero it
                "Adam's state is made at its first step, which must run eagerly (warmup >= 1)",
                CAPTURE_FAILED)  # fmt: skip
            return None
        g = _Graph()
        offset = 0
        for a in ids:
            g.ids.append((offset, a.nbytes))
            offset += (a.nbytes + 7) // 8 * 8
        g.device = cp.zeros((offset + SLOT_BYTES,), dtype=cp.uint8)
        g.host = np.zeros((offset + SLOT_BYTES,), dtype=np.uint8)
        for (o, nbytes), a in zip(g.ids, ids, strict=True):
            g.inputs.append(g.device[o : o + nbytes].view(a.dtype).reshape(a.shape))
            g.inputs[-1].set(a)
        g.recorder = Recorder(g.device, offset)
        stream = cp.cuda.Stream(non_blocking=True)
        cp.cuda.Device().synchronize()
        self.memory.open(cp)  # the first capture: the pool, and its budget
        error, over = None, False
        # the capture runs the step's Python, not its kernels: the optimizer does not count it
        with opt.uncounted(), cp.cuda.using_allocator(self.memory.malloc), stream:
            recorder = g.recorder
            stream.begin_capture()
            try:
                g.outputs = self._run(*g.inputs)
            except Exception as err:  # noqa: BLE001 - reported in failed[], then eager
                error, over = f"{type(err).__name__}: {err}", isinstance(err, OverBudget)
            finally:
                recorder = None
                try:
                    graph = stream.end_capture()
                except Exception as err:  # noqa: BLE001
                    error = error or f"{type(err).__name__}: {err}"
                    graph = None
        g.draws = g.recorder.rewind()  # ... nor do the generators
        whole = [group.data.size for group in opt.groups]
        if error is None and g.recorder.adam_sizes != whole:
            error = (f"Adam's launches updated {g.recorder.adam_sizes} elements, not each "
                     f"flat group whole ({whole}): some parameters had no gradient")  # fmt: skip
        if error is not None:
            self.failed[key] = error
            self.reasons[key] = MEMORY_BUDGET if over else CAPTURE_FAILED
            return None
        g.graph = graph
        self.graphs[key] = g
        return g
