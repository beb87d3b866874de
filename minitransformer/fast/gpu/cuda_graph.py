"""A whole training step captured once as a CUDA graph, then replayed: one launch per step.

On a GPU every step is bound by the host: a tiny step is ~500 kernels, each costing 10-20 µs
of Python and CuPy to launch, while the GPU needs 2-3 µs for most of them. A CUDA graph
records the kernels of one step (their arguments and pointers included) and replays them
all from one call, so the Python of the step runs once, at capture.

    steps = GraphedSteps(body, optimizer)         # body(*ids) -> (loss, norm), device work only
    loss, norm = steps(src, tgt_in, tgt_out)      # host ids (checked); one graph per shape

What a graph freezes, and how each is kept right:

- **Inputs.** The ids are copied (one host-to-device copy per step, with the per-step values
  below) into device buffers the graph reads.
- **Per-step values.** A kernel argument is frozen at capture. Dropout's keys (a fresh draw
  each call) and Adam's bias corrections (a function of the step count) are therefore read
  by the ``*_graph`` kernels from device slots (``recorder``, below), which every replay
  refills with what the eager step would compute: keys of the generator's next draws
  (``counter_keys``), ``adam_scalars`` at the optimizer's next step and learning rate. So a
  replayed step gives the eager step's numbers (the same kernels on the same values).
- **Memory.** Arrays made during capture come from a memory pool of the graph's own (CuPy's
  ``MemoryPool``, never handed to anything else), as PyTorch's graph pools: a replay writes
  the same addresses, which no later array may be given.
- **Host-side counters.** Capture runs the step's Python once without running its kernels;
  the optimizer's counts, the generators' counters and the flag are put back after it, and
  each replay advances them as an eager step would.
- **Matrix products.** CuPy refuses cuBLAS under capture (cupy issue #6290); ``xp.matmul`` is
  ``fast/gpu/cublas.py``, which calls cuBLAS's C API itself and may be captured.

A shape is captured at its third step (two eager steps first: every kernel compiled, the
optimizer's state made); at most ``max_graphs`` shapes are kept, others run eagerly. Needs a
step whose update is the whole flat group (every parameter has a gradient): anything else
runs eagerly, as does everything when capture fails (``failed`` says why).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...backend.random import counter_keys

SLOT_BYTES = 64 * 1024  # per-step values of one graph: dropout keys (8 B) and Adam (16 B) each


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

    def adam_slot(self, dtype: Any, scalars: Callable[..., tuple]) -> Any:
        dtype = np.dtype(dtype)
        offset = self._slot(2 * dtype.itemsize)
        self.adam.append((offset, dtype, scalars))
        return self.buf[offset : offset + 2 * dtype.itemsize].view(dtype)

    def rewind(self) -> list[tuple[Any, int]]:
        """Put each generator's counter back where capture found it; return (generator,
        its draws per step), what each replay advances it by."""
        draws = []
        for gen, first in self.first.values():
            draws.append((gen, gen.counter - first))
            gen.counter = first
        return draws


# While GraphedSteps captures a step, ``recorder`` is its Recorder: the per-step values a
# kernel would take by value (a dropout draw's keys, Adam's bias corrections), which a graph
# would freeze, are then read from device slots that each replay refills.
recorder: Recorder | None = None


class _Graph:
    """One captured step: its graph, pool, buffers and slots."""

    def __init__(self) -> None:
        self.graph: Any = None
        self.pool: Any = None
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
    not read anything back to the host, and state it keeps from step to step (the trainer's
    "every step so far was finite" flag) must be updated in place.
    """

    def __init__(self, body: Callable[..., tuple[Any, ...]], optimizer: Any,
                 warmup: int = 2, max_graphs: int = 16):  # fmt: skip
        from ...optim import Adam

        if type(optimizer) is not Adam:
            raise TypeError("GraphedSteps: the captured update is Adam's (fast/cupy/adam.py)")
        self.body, self.optimizer = body, optimizer
        self.warmup, self.max_graphs = warmup, max_graphs
        self.graphs: dict[tuple, _Graph] = {}
        self.seen: dict[tuple, int] = {}
        self.failed: dict[tuple, str] = {}  # shape -> why it runs eagerly
        self.replays = 0

    # ------------------------------------------------------------------ one step
    def __call__(self, *ids: np.ndarray) -> tuple[Any, ...]:
        import cupy as cp

        ids = tuple(np.ascontiguousarray(a) for a in ids)
        key = tuple((a.shape, a.dtype.str) for a in ids)
        g = self.graphs.get(key)
        if g is None:
            self.seen[key] = n = self.seen.get(key, 0) + 1
            if n > self.warmup and key not in self.failed and len(self.graphs) < self.max_graphs:
                g = self._capture(key, ids)
            if g is None:  # eagerly
                return self.body(*(cp.asarray(a) for a in ids))
        return self._replay(g, ids)

    def _replay(self, g: _Graph, ids: tuple[np.ndarray, ...]) -> tuple[Any, ...]:
        self._fill(g, ids)
        g.device[: g.recorder.used].set(g.host[: g.recorder.used])  # one copy to the GPU
        g.graph.launch()
        self.replays += 1
        return tuple(out.copy() for out in g.outputs)

    def _fill(self, g: _Graph, ids: tuple[np.ndarray, ...]) -> None:
        """Write this step's ids and per-step values into ``g.host`` and advance the host-side
        counters (the optimizer's, the generators') as the eager step would."""
        opt, host, rec = self.optimizer, g.host, g.recorder
        for (offset, nbytes), a in zip(g.ids, ids, strict=True):
            host[offset : offset + nbytes] = a.reshape(-1).view(np.uint8)
        # what Optimizer.step does on the host, then the values its kernels would take
        opt.step_count += 1
        for i in range(len(opt.param_steps)):
            opt.param_steps[i] += 1
        for (offset, dtype, scalars), gi in zip(rec.adam, range(len(opt.groups)), strict=True):
            t = opt.param_steps[opt._members[gi][0]]
            values = scalars(dtype, lr=opt.lr, betas=opt.betas, eps=opt.eps,
                             weight_decay=opt.weight_decay, t=t)[6:]  # fmt: skip
            host[offset : offset + 2 * dtype.itemsize] = np.array(values, dtype).view(np.uint8)
        for gen, k, offset in rec.dropout:  # the k-th draw from the generator's counter now
            k1, k2 = counter_keys(gen.seed, gen.counter + k)
            host[offset : offset + 8] = np.array([k1, k2], np.uint32).view(np.uint8)
        for gen, n in g.draws:
            gen.counter += n

    # ------------------------------------------------------------------ capture
    def _capture(self, key: tuple, ids: tuple[np.ndarray, ...]) -> _Graph | None:
        """Capture the body at these shapes; None (and ``failed[key]``) when it cannot be."""
        import cupy as cp

        opt = self.optimizer
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
        saved = (opt.step_count, list(opt.param_steps), opt.lr)
        g.pool = cp.cuda.MemoryPool()
        stream = cp.cuda.Stream(non_blocking=True)
        cp.cuda.Device().synchronize()
        error = None
        global recorder
        with cp.cuda.using_allocator(g.pool.malloc), stream:
            recorder = g.recorder
            stream.begin_capture()
            try:
                g.outputs = tuple(self.body(*g.inputs))
            except Exception as err:  # noqa: BLE001 - reported in failed[], then eager
                error = f"{type(err).__name__}: {err}"
            finally:
                recorder = None
                try:
                    graph = stream.end_capture()
                except Exception as err:  # noqa: BLE001
                    error = error or f"{type(err).__name__}: {err}"
                    graph = None
        # the capture ran the step's Python, not its kernels: put the counters back
        opt.step_count, opt.param_steps, opt.lr = saved[0], saved[1], saved[2]
        g.draws = g.recorder.rewind()
        if error is None and not all(all(h) for h in opt._has_grad):
            error = "some parameters had no gradient: the update is not the whole flat group"
        if error is None and len(g.recorder.adam) != len(opt.groups):
            error = f"{len(g.recorder.adam)} Adam launches for {len(opt.groups)} groups"
        if error is not None:
            self.failed[key] = error
            return None
        g.graph = graph
        self.graphs[key] = g
        return g
