"""The per-token decoding step replayed from CUDA graphs: greedy, beam search, generate.

A cached decoding step on a GPU is a few hundred small kernels for ONE token: bound by the
host (10-20 µs of Python and CuPy a launch), so caching the keys barely beats recomputing
them. A CUDA graph records the step's kernels once and replays them from one call. What a
graph freezes, and how decoding keeps it right:

- **Addresses.** A replay reads and writes the addresses of its capture. So the caches'
  buffers (``nn/kv_cache.py``: preallocated, written in place, reordered in place by beam
  search) are made once per decode shape and reused by every decode of that shape
  (``DecoderCache.reset``), as are the source's padding mask (``keep_source``) and the
  cross-attention keys (``KVCache.set_static``). The step's input, the previous token
  (B, 1), is copied into a fixed device buffer before each replay; its output, the logits
  (B, V), stays in the graph's memory (read before the next replay).
- **Positions.** A step at position p reads p + 1 cached positions: its kernels' shapes
  differ with p, so there is one graph per (shape, position): shape = (rows, source
  length, capacity) for the translator (the source padded as the training step's ids are,
  ``cuda_graph.bucket_length``: a few lengths, masked keys, the same tokens), (rows, prompt
  length, capacity) for a language model. Position 0 (the cross-attention keys, the
  prompt) always runs eagerly.
- **Host state.** Capture runs the step's Python once without its kernels: the caches'
  positions (``DecoderCache.positions()``: the offset, each layer's ``seen`` and spans)
  are taken back after it, and each replay sets them to where the eager step leaves them.
- **Memory.** Every graph allocates from ONE memory pool (``graph_pool.py``), shared by
  all shapes and positions (as PyTorch's graph pools): graphs run one after another on one
  stream, and each graph's output stays allocated, so no later capture is given it. The
  pool is bounded by ``max_bytes``, the graphs by ``max_graphs``.
- **Warm-up.** The first decode of a shape runs eagerly (its kernels compiled, its buffers
  made outside the pool); the next captures each position at its first step.

Eager fallback: a step runs eagerly, counted by reason in ``stats()["fallbacks"]``, when a
capture fails (the shape is then never captured again), past ``max_graphs`` or the memory
budget, or when the cache would have to grow (its buffers would move). ``on_fallback(line)``
is told once per reason. On the CPU none of this exists: ``use_graphs`` says False.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ... import backend, checks
from ...errors import ArgumentError
from ...nn import language_model
from .cuda_graph import bucket_length
from .graph_pool import GraphPool, OverBudget

MAX_GRAPHS = 1024  # per model: e.g. 8 shapes of 128 positions
MAX_BYTES = 1 << 30  # the shared pool's budget, 1 GiB
CAPTURE_FAILED = "capture failed"
TOO_MANY_GRAPHS = "too many graphs"
MEMORY_BUDGET = "memory budget"
CACHE_GROWS = "cache would grow"
AUTO = "'auto' replays each decoding step from a CUDA graph on a GPU"  # what "auto" does


def use_graphs(where: str, model: Any, use_graph: Any, use_cache: bool) -> bool:
    """Whether ``where`` replays its steps from CUDA graphs: ``use_graph`` "auto" (on a CUDA
    device with the fused kernels on, cached decoding), True (then a CUDA device is needed)
    or False. The CPU never does."""
    use_graph = checks.auto_or_flag(where, "use_graph", use_graph, AUTO)
    on_cuda = str(model.device).startswith("cuda")
    if use_graph is True and not (on_cuda and use_cache):
        raise ArgumentError(
            f"{where}: use_graph=True needs cached decoding on a CUDA device (the model is on "
            f"{model.device}{'' if use_cache else ', use_cache=False'}); pass use_graph='auto'"
        )
    if use_graph == "auto":
        return on_cuda and use_cache and _kernels_on
    return bool(use_graph)


_kernels_on = False  # the fused CUDA kernels in use (set by install, from fast/__init__.py)


def install(kernels_on: bool) -> None:
    """Told by the fast tier when CuPy is (again) first used: whether the fused kernels are
    on (MT_CUDA_KERNELS), which "auto" needs; and generate's hook set (nn/language_model)."""
    global _kernels_on
    _kernels_on = kernels_on
    language_model.graph_stepper = lm_stepper


_RUNNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def graphs_for(model: Any) -> DecodeGraphs:
    """The model's DecodeGraphs (one per model, made at its first graphed decode)."""
    runner = _RUNNERS.get(model)
    if runner is None:
        runner = _RUNNERS[model] = DecodeGraphs()
    runner.check_weights(model)
    return runner


def bucketed_source(src: Any, pad_id: int, max_len: int) -> Any:
    """src (B, S) device ids padded on the right with ``pad_id`` to ``bucket_length`` (a
    multiple of 16, at most max_len): padded keys are masked, so the tokens are those of src."""
    S = src.shape[1]
    L = bucket_length(S, max_len)
    if L == S:
        return src
    xp = backend.namespace(src)
    out = xp.full((src.shape[0], L), pad_id, dtype=src.dtype, device=src.device)
    out[:, :S] = src
    return out


class _StepGraph:
    """One captured step: the graph, its output (held: the pool never gives it away) and
    the caches' host positions before and after the step."""

    def __init__(self, graph: Any, output: Any, before: tuple, after: tuple):
        self.graph, self.output, self.before, self.after = graph, output, before, after


class DecodeGraphs:
    """Decoding steps replayed from CUDA graphs, one per (shape, position) (module doc).

    ``cache(shape, make)`` gives a decode its cache (made by ``make()`` at the shape's
    first decode, reset and reused after); ``step(shape, cache, ids, run)`` runs
    ``run(ids) -> logits (B, V)`` for the cache's next position, replayed when it can be.
    """

    def __init__(self, max_graphs: int = MAX_GRAPHS, max_bytes: int = MAX_BYTES,
                 on_fallback: Callable[[str], None] | None = None):  # fmt: skip
        self.max_graphs, self.on_fallback = max_graphs, on_fallback
        self.memory = GraphPool(max_bytes)  # one pool, every graph's
        self.caches: dict[tuple, Any] = {}  # shape -> its DecoderCache
        self.inputs: dict[tuple, Any] = {}  # shape -> its fixed (B, 1) input buffer
        self.decodes: dict[tuple, int] = {}  # shape -> decodes started
        self.graphs: dict[tuple, _StepGraph] = {}  # (*shape, position) -> graph
        self.failed: dict[tuple, str] = {}  # shape -> why its capture failed
        self.replays = self.eager_steps = 0
        self.fallbacks: dict[str, int] = {}  # reason -> steps run eagerly for it
        self._weights: tuple = ()

    def check_weights(self, model: Any) -> None:
        """Forget every graph and cache when the model's parameters are other arrays than
        at the last decode (a graph reads the weights where they were)."""
        weights = tuple(id(p.data) for p in model.parameters())
        if weights != self._weights:
            for kept in (self.caches, self.inputs, self.graphs, self.decodes, self.failed):
                kept.clear()
            self._weights = weights

    def cache(self, shape: tuple, make: Callable[[], Any]) -> Any:
        """The cache of a decode of ``shape``: the shape's own, emptied, or a new one."""
        self.decodes[shape] = self.decodes.get(shape, 0) + 1
        cache = self.caches.get(shape)
        if cache is None:
            cache = self.caches[shape] = make()
        else:
            cache.reset()
        return cache

    def stats(self) -> dict[str, Any]:
        """``graphs`` (captured steps), ``replays``, ``eager_steps`` (warm-up, position 0
        and fallbacks), ``fallbacks`` ({reason: steps}), ``pool_bytes``, ``max_bytes``."""
        return {"graphs": len(self.graphs), "replays": self.replays,
                "eager_steps": self.eager_steps, "fallbacks": dict(self.fallbacks),
                "pool_bytes": self.memory.total_bytes(),
                "max_bytes": self.memory.max_bytes}  # fmt: skip

    # ------------------------------------------------------------------ one step
    def step(self, shape: tuple, cache: Any, ids: Any, run: Callable[[Any], Any]) -> Any:
        """The logits (B, V) of the cache's next position given its input ``ids`` (B, 1):
        ``run(ids)`` eagerly, or its graph replayed (captured first when new)."""
        position = cache.offset
        if position == 0 or self.decodes[shape] < 2:  # the shape's warm-up, or position 0
            return self._eager(run, ids, None)
        if shape not in self.inputs:
            self.inputs[shape] = ids.copy()  # made outside the pool, once
        g = self.graphs.get((*shape, position))
        if g is None:
            reason = self._refusal(shape, cache)
            if reason is None:
                g, reason = self._capture(shape, cache, ids, run)
            if g is None:
                return self._eager(run, ids, reason)
        if cache.positions() != g.before:  # not where the capture stood: never replay it
            return self._eager(run, ids, CAPTURE_FAILED)
        self.inputs[shape][...] = ids  # the input, into the graph's fixed buffer
        g.graph.launch()
        cache.set_positions(g.after)  # what the eager step's Python would have done
        self.replays += 1
        return g.output

    def _eager(self, run: Callable[[Any], Any], ids: Any, reason: str | None) -> Any:
        self.eager_steps += 1
        if reason is not None:
            self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
            if self.fallbacks[reason] == 1 and self.on_fallback is not None:
                self.on_fallback(_fallback_line(reason, self))
        return run(ids)

    def _refusal(self, shape: tuple, cache: Any) -> str | None:
        """Why this step may not be captured, or None."""
        if shape in self.failed:
            return CAPTURE_FAILED
        if len(self.graphs) >= self.max_graphs:
            return TOO_MANY_GRAPHS
        if self.memory.full():
            return MEMORY_BUDGET
        for kv in cache.self_attn:  # a buffer that grows moves: the graphs would read the old
            if kv.keys.data is not None and kv.keys.end + 1 > kv.keys.room:
                return CACHE_GROWS
        if cache.tgt_keep.data is not None and cache.tgt_keep.end + 1 > cache.tgt_keep.room:
            return CACHE_GROWS
        return None

    def _capture(self, shape: tuple, cache: Any, ids: Any, run: Callable[[Any], Any]):
        """Capture ``run`` at the cache's position: (graph, None), or (None, the reason)."""
        import cupy as cp

        self.memory.open(cp)
        inputs, before = self.inputs[shape], cache.positions()
        inputs[...] = ids
        stream = cp.cuda.Stream(non_blocking=True)
        cp.cuda.Device().synchronize()
        output, error, graph = None, None, None
        with cp.cuda.using_allocator(self.memory.malloc), stream:
            stream.begin_capture()
            try:
                output = run(inputs)
            except Exception as err:  # noqa: BLE001 - counted as a fallback, then eager
                error = err
            finally:
                try:
                    graph = stream.end_capture()
                except Exception as err:  # noqa: BLE001
                    error = error or err
        after = cache.positions()
        cache.set_positions(before)  # its kernels did not run: the replay runs them
        if isinstance(error, OverBudget):
            return None, MEMORY_BUDGET
        if error is not None:
            self.failed[shape] = f"{type(error).__name__}: {error}"
            return None, CAPTURE_FAILED
        g = self.graphs[(*shape, before[0])] = _StepGraph(graph, output, before, after)
        return g, None


def _fallback_line(reason: str, graphs: DecodeGraphs) -> str:
    """The one line ``on_fallback`` is told the first time a step runs eagerly for reason."""
    if reason == CAPTURE_FAILED:
        why = "; ".join(sorted(set(graphs.failed.values()))) or "the cache moved"
        return f"decoding steps run eagerly: a step could not be captured as a CUDA graph ({why})"
    if reason == TOO_MANY_GRAPHS:
        return f"decoding steps past the first {graphs.max_graphs} CUDA graphs run eagerly"
    if reason == MEMORY_BUDGET:
        budget = graphs.memory.max_bytes
        return f"decoding steps past the graphs' memory budget ({budget:,} B) run eagerly"
    return "decoding steps run eagerly where the key/value cache has to grow (its buffers move)"


def stepper(model: Any, shape: tuple, capacity: int,
            forward: Callable[[Any, Any], Any]) -> tuple[Any, Callable[[Any], Any]]:  # fmt: skip
    """(cache, step) of a decode of ``shape`` replayed from the model's graphs: the shape's
    cache (made for ``capacity`` positions at its first decode, reset and reused after) and
    ``step(ids)``, ``forward(ids, cache) -> logits (B, V)`` (checked ids, no host read) run
    eagerly or replayed (``DecodeGraphs.step``)."""
    graphs = graphs_for(model)
    cache = graphs.cache(shape, lambda: model.new_cache(capacity=capacity))

    def run(ids: Any) -> Any:  # the step a graph captures
        return forward(ids, cache)

    return cache, lambda ids: graphs.step(shape, cache, ids, run)


def lm_stepper(lm: Any, prompt: Any, capacity: int, use_graph: Any) -> tuple[Any, Any] | None:
    """TransformerLM.generate's cached steps from CUDA graphs: (cache, step(ids) -> logits
    (B, V)) for prompts ``prompt`` (B, L) on the device, or None where ``use_graph`` says
    no (the CPU, "auto" with the kernels off, False). The prompt itself runs eagerly
    (position 0); the shape is (rows, prompt length, capacity)."""
    if not use_graphs("TransformerLM.generate", lm, use_graph, True):
        return None

    def forward(ids: Any, cache: Any) -> Any:  # checked ids, no host read
        return lm(ids, cache, checked=True).data[:, -1, :]

    return stepper(lm, (prompt.shape[0], prompt.shape[1], capacity), capacity, forward)
