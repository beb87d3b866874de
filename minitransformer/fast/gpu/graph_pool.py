"""The one memory pool a set of CUDA graphs allocates from, bounded by a byte budget.

A captured graph replays into the addresses its capture was given, so its memory may never
be handed to an array outside the graphs: it comes from a CuPy ``MemoryPool`` of the
graphs' own. One pool serves every graph of a set (the training step's shapes,
``cuda_graph.py``; decoding's positions, ``decode_graph.py``), as PyTorch's graph pools
may be shared: the graphs of a set run one after another on one stream.

The pool is bounded by ``max_bytes``: its allocator (``malloc``, installed with
``cupy.cuda.using_allocator`` around a capture) raises ``OverBudget`` rather than grow the
pool past it, so the capture stops and its step runs eagerly. The pool's blocks are never
freed (``free_all_blocks`` would hand graphs' addresses to other arrays), and the budget
keeps CuPy's own free-on-out-of-memory path away from it. ``max_bytes=None``: the budget is
``fraction`` of the device memory free when the pool is made.
"""

from __future__ import annotations

from typing import Any


class OverBudget(MemoryError):
    """A capture would grow the graphs' pool past ``max_bytes`` (raised by its allocator)."""


class GraphPool:
    """The pool of a set of graphs (module doc): made at the first capture (``open``)."""

    def __init__(self, max_bytes: int | None, fraction: float = 0.5):
        self.pool: Any = None  # CuPy's MemoryPool, once open
        self.max_bytes, self.fraction = max_bytes, fraction

    def open(self, cp: Any) -> None:
        """Make the pool (and the default budget) at the first capture; later, nothing."""
        if self.pool is None:
            self.pool = cp.cuda.MemoryPool()
            if self.max_bytes is None:
                self.max_bytes = max(1, int(cp.cuda.runtime.memGetInfo()[0] * self.fraction))

    def total_bytes(self) -> int:
        """What the pool holds (0 before the first capture)."""
        return 0 if self.pool is None else int(self.pool.total_bytes())

    def full(self) -> bool:
        """Whether the pool holds its budget already (no new capture may start)."""
        return self.pool is not None and self.pool.total_bytes() >= self.max_bytes

    def malloc(self, nbytes: int) -> Any:
        """The captures' allocator: the pool's, refusing (``OverBudget``) to grow it past
        ``max_bytes``, before CuPy's pool would free its blocks to find room."""
        pool = self.pool
        if pool.free_bytes() < nbytes and pool.total_bytes() + nbytes > self.max_bytes:
            raise OverBudget(f"the pool would pass its budget of {mib(self.max_bytes)}")
        memory = pool.malloc(nbytes)
        if pool.total_bytes() > self.max_bytes:  # a new block despite the free bytes
            raise OverBudget(f"the pool would pass its budget of {mib(self.max_bytes)}")
        return memory


def mib(nbytes: int | None) -> str:
    """Bytes as MiB, for the lines that name a budget or a pool."""
    return "?" if nbytes is None else f"{nbytes / 2**20:.1f} MiB"
