"""The key/value cache of cached decoding, preallocated: buffers allocated once, written in place.

Cached decoding projects only the new token's key and value at each step and attends over
every key seen so far, so a layer keeps them. Growing the kept keys by concatenation,
``k = concat([k, k_new])``, copies the whole cache every token: O(t) work at step t, O(L²)
for a decode of L tokens. Here each layer's keys and values live in one buffer allocated
with room for ``capacity`` positions, and a step writes its T new positions in place:

    buffer   k_buf (B, h_kv, C, d_k), v_buf (B, h_kv, C, d_v)   C = capacity, allocated once
    write    k_buf[:, :, end : end + T] = k_new (B, h_kv, T, d_k)  the rest is not copied
    views    k = k_buf[:, :, start : end], v likewise            what attention reads, no copy

``start`` is 0 unless the layer keeps only its last positions (local attention's window):
then ``keep_last(window)`` moves ``start`` forward, and the positions before it are reclaimed
when room is needed (the held ones moved to the front, at most ``window`` of them).

The capacity: the caller usually knows how many positions a decode takes (the source of
``model.new_cache(capacity=steps)`` in ``decode.py`` and ``TransformerLM.generate``), and
then the buffers are allocated once, at the first step (when the batch, heads, widths,
dtype and device are known). Without it (``capacity=None``), or when a decode runs past it,
the buffers grow geometrically: to max(needed, 2 × capacity, 16) positions, the held ones
copied once, so a decode of L tokens copies O(L) positions in all, never O(L²).

Beam search reorders the rows (``keep_rows``) in place, into the same buffers: their
addresses stay fixed for the whole decode, which a CUDA graph replaying the step needs
(``fast/gpu/decode_graph.py``).
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..ops.linear_attention_state import LinearAttentionState
from ..tensor import Tensor

MIN_GROWTH = 16  # the fewest positions a growing buffer is given


class PositionBuffer:
    """An array whose axis ``axis`` holds positions, with room for ``capacity`` of them.

    ``append(x)`` writes x's positions after the held ones, in place, and returns the view of
    every held position; ``view()`` is that view; ``keep_last(n)`` forgets all but the last n.
    The buffer itself (``data``) is made at the first append, shaped like x but with
    ``capacity`` positions on ``axis``. Used for a layer's keys and values (axis 2 of
    (B, h_kv, L, d)) and for the target's padding mask (axis 3 of (B, 1, 1, L)).
    """

    def __init__(self, axis: int, capacity: int | None = None):
        self.axis, self.capacity = axis, capacity
        self.data: Any = None  # the whole buffer, or None before the first append
        self.start = 0  # the held positions are [start : end] of axis ``axis``
        self.end = 0

    def _along(self, a: int, b: int) -> tuple[slice, ...]:
        """The index of positions a .. b - 1 (every other axis whole)."""
        return (slice(None),) * self.axis + (slice(a, b), ...)

    @property
    def rows(self) -> int | None:
        """The batch size held (None before the first append)."""
        return None if self.data is None else self.data.shape[0]

    @property
    def room(self) -> int:
        """How many positions the buffer holds in all (0 before the first append)."""
        return 0 if self.data is None else self.data.shape[self.axis]

    def view(self) -> Any:
        """The held positions, a view into the buffer (no copy); None before any append."""
        return None if self.data is None else self.data[self._along(self.start, self.end)]

    def append(self, x: Any) -> Any:
        """Write x's T positions after the held ones, in place; return ``view()``."""
        T = x.shape[self.axis]
        if self.data is None or x.shape[0] != self.data.shape[0]:
            self._allocate(x, max(T, self.capacity or MIN_GROWTH))
        elif self.end + T > self.room:
            self._make_room(T)
        self.data[self._along(self.end, self.end + T)] = x
        self.end += T
        return self.view()

    def keep_last(self, n: int) -> None:
        """Forget all but the last ``n`` held positions (local attention's window)."""
        self.start = max(self.start, self.end - n)

    def keep_rows(self, order: Any) -> None:
        """Keep the rows ``order`` (an int array along the batch axis). The same number of
        rows (beam search) is written back in place, into the same buffer; another number
        makes a buffer of that many rows."""
        if self.data is None:
            return
        xp = backend.namespace(self.data)
        held = self._along(self.start, self.end)
        rows = xp.take(self.data[held], order, axis=0)
        if rows.shape[0] == self.data.shape[0]:
            self.data[held] = rows  # in place: the buffer's address stays
        else:
            self._allocate(rows, self.room)
            self.data[self._along(0, rows.shape[self.axis])] = rows
            self.start, self.end = 0, rows.shape[self.axis]

    def reset(self) -> None:
        """Hold nothing again, keeping the buffer (a new decode of the same shape)."""
        self.start = self.end = 0

    def _allocate(self, like: Any, room: int) -> None:
        """A fresh zeroed buffer shaped like ``like`` with ``room`` positions; holds none."""
        xp = backend.namespace(like)
        shape = list(like.shape)
        shape[self.axis] = room
        self.data = xp.zeros(tuple(shape), dtype=like.dtype, device=like.device)
        self.start = self.end = 0

    def _make_room(self, T: int) -> None:
        """Room for T more positions: the held ones moved to the front when positions before
        them were forgotten (``keep_last``) and that makes room, else a buffer grown
        geometrically (module doc), the held positions copied into it."""
        held = self.end - self.start
        if self.start > 0 and held + T <= self.room:
            xp = backend.namespace(self.data)
            moved = xp.asarray(self.data[self._along(self.start, self.end)], copy=True)  # overlaps
            self.data[self._along(0, held)] = moved
            self.start, self.end = 0, held
            return
        old = self.data[self._along(self.start, self.end)]
        self._allocate(old, max(held + T, 2 * self.room, MIN_GROWTH))
        self.data[self._along(0, held)] = old
        self.end = held


class KVCache:
    """Projected keys and values (B, h_kv, L, d_k) of one attention layer, seen so far
    (h_kv = cfg.kv_heads, or the h heads of the paper's attention).

    ``static=False`` (self-attention): each call writes the new positions' k and v into the
    buffers (``append``), preallocated for ``capacity`` positions (module doc); ``k`` and
    ``v`` are views (B, h_kv, held, d) of the positions held. ``static=True``
    (cross-attention): the first call projects key/value (the memory) and later calls reuse
    them (``k``, ``v``). ``seen``: the positions a self-attention cache has taken in so far
    (the next one's position, which rotary positions need; local attention holds fewer).
    ``state``: linear attention's running sums, kept instead of keys and values.
    """

    def __init__(self, static: bool = False, capacity: int | None = None):
        self.static, self.capacity = static, capacity
        self.keys = PositionBuffer(axis=2, capacity=capacity)
        self.values = PositionBuffer(axis=2, capacity=capacity)
        self.state: LinearAttentionState | None = None  # linear attention's sums
        self.seen = 0
        self._k: Tensor | None = None  # the views (or a static cache's arrays) as Tensors
        self._v: Tensor | None = None

    @property
    def k(self) -> Tensor | None:
        """The keys held, (B, h_kv, held, d_k); None while empty."""
        return self._k

    @property
    def v(self) -> Tensor | None:
        """The values held, (B, h_kv, held, d_v); None while empty."""
        return self._v

    @property
    def rows(self) -> int | None:
        """The batch size of what the cache holds (None while empty)."""
        if self._k is not None:
            return self._k.shape[0]
        return None if self.state is None or self.state.z is None else self.state.z.shape[0]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new positions' k (B, h_kv, T, d_k) and v in place after the held ones;
        return every held position's keys and values (views, no copy)."""
        self._k = Tensor._wrap(self.keys.append(k.data))
        self._v = Tensor._wrap(self.values.append(v.data))
        return self._k, self._v

    def keep_last(self, n: int) -> None:
        """Hold only the last ``n`` positions (local attention: a query reads no further)."""
        self.keys.keep_last(n)
        self.values.keep_last(n)
        self._k, self._v = Tensor._wrap(self.keys.view()), Tensor._wrap(self.values.view())

    def set_static(self, k: Tensor, v: Tensor) -> None:
        """A cross-attention cache's keys and values of the memory, computed once. Written
        into the same buffers when a decode of the same shape used them before (fixed
        addresses), else kept as they are."""
        if self.keys.data is not None and self.keys.data.shape == k.shape:
            self.keys.data[...] = k.data
            self.values.data[...] = v.data
            k, v = Tensor._wrap(self.keys.data), Tensor._wrap(self.values.data)
        else:
            self.keys.data, self.values.data = k.data, v.data
        self._k, self._v = k, v

    def keep_rows(self, order: Any) -> None:
        """Keep the rows ``order`` (an int array, along the batch axis) of everything held:
        beam search keeps the caches of the beams that survived, in place (same buffers)."""
        if self._k is not None:
            self.keys.keep_rows(order)
            self.values.keep_rows(order)
            self._k, self._v = Tensor._wrap(self.keys.view()), Tensor._wrap(self.values.view())
        state = self.state
        if state is not None and state.z is not None:
            xp = backend.namespace(order)
            kv, z = xp.take(state.kv, order, axis=0), xp.take(state.z, order, axis=0)
            if kv.shape == state.kv.shape:  # in place: the sums' addresses stay
                state.kv[...], state.z[...] = kv, z
            else:
                state.kv, state.z = kv, z

    def positions(self) -> tuple[int, ...]:
        """The host side of what is held: (seen, keys' start and end, values' start and
        end). A CUDA graph of a step advances the buffers but not these; its replay sets
        them (``set_positions``) as the eager step would (fast/gpu/decode_graph.py)."""
        k, v = self.keys, self.values
        return (self.seen, k.start, k.end, v.start, v.end)

    def set_positions(self, positions: tuple[int, ...]) -> None:
        """Set what ``positions()`` returned, and the views ``k`` and ``v`` to match."""
        self.seen, self.keys.start, self.keys.end, self.values.start, self.values.end = positions
        if self.keys.data is not None and not self.static:
            self._k, self._v = Tensor._wrap(self.keys.view()), Tensor._wrap(self.values.view())

    def reset(self) -> None:
        """Empty again for a new decode of the same shape, keeping every buffer (a CUDA
        graph's fixed addresses): nothing held, ``seen`` 0, linear attention's sums 0."""
        self.keys.reset()
        self.values.reset()
        self.seen = 0
        self._k = self._v = None  # a static cache's buffers: refilled by set_static
        if self.state is not None and self.state.kv is not None:
            self.state.kv[...] = 0
            self.state.z[...] = 0
