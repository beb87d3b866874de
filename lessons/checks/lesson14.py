"""Lesson 14 (data parallelism): the checks of its exercises.

- ``check_14_1``: Exercise 1 (shards that finish together)
- ``check_14_2``: Exercise 2 (the ring, message by message)
- ``check_14_3``: Exercise 3 (where latency and bandwidth cost the same)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._shared import _exercise, _rng


@_exercise("Exercise 1 (shards that finish together)")
def check_14_1(balanced_split: Callable) -> None:
    """The learner's split of a batch's rows over N ranks: a partition (every row exactly once,
    N shards, empty ones allowed) whose heaviest shard holds at most n/N + (the longest row)
    tokens -- the bound of "give each row to the least-loaded rank", which an optimal split
    meets too. The inputs are made so that the strided split of ``shard_rows`` and a
    contiguous split both break the bound."""
    rng = _rng(26)
    cases = [
        (np.array([9, 1] * 6), 2),  # long/short alternating: strided puts every long row on 0
        (np.sort(rng.integers(1, 30, 24))[::-1], 4),  # sorted, as a contiguous split hurts
        (rng.integers(1, 40, 37), 5),  # N does not divide the rows
        (np.array([7, 3, 5]), 5),  # fewer rows than ranks
        (np.array([4]), 1),
    ]
    for tokens, N in cases:
        shards = balanced_split(tokens.copy(), N)
        shards = [np.asarray(s, dtype=np.int64).ravel() for s in shards]
        assert len(shards) == N, f"{len(tokens)} rows over N={N} ranks: return N shards"
        rows = np.concatenate(shards) if shards else np.array([], dtype=np.int64)
        assert sorted(rows.tolist()) == list(range(len(tokens))), (
            f"{len(tokens)} rows over N={N}: every row index 0..{len(tokens) - 1} must be in "
            f"exactly one shard (yours hold {sorted(rows.tolist())})"
        )
        loads = [int(tokens[s].sum()) for s in shards]
        bound = tokens.sum() / N + tokens.max()
        assert max(loads) <= bound + 1e-9, (
            f"rows of {tokens.tolist()} tokens over N={N}: your shards hold {loads} tokens; "
            f"the slowest rank waits on {max(loads)}, more than a balanced split needs. Hint: "
            "decide each row's rank by looking at how many tokens each rank holds already."
        )


class _Traffic:
    """The network of Exercise 2: ``send(src, dst, c)`` delivers chunk ``c`` of rank src's
    buffer (``np.array_split(buffer, N)[c]``) to dst and returns a copy of it, as dst receives
    it; every message is recorded. The buffers hold rank r's numbers as the bit 2^r times a
    per-element odd integer, so any value a rank holds tells exactly which ranks' numbers it
    sums -- a rank that sends (or ends with) numbers from a rank it has not heard from, or
    holds one rank's numbers twice, is caught. Every such sum is below 2^23: exact in float32,
    so a ring that moves its chunks as float32 is judged the same."""

    def __init__(self, N: int, size: int, rng: np.random.Generator) -> None:
        self.N, self.size = N, size
        # odd integers small enough that every sum of ranks' numbers is exact in float32 too
        self.scale = 2 * rng.integers(1, 2 ** (22 - N), size).astype(np.float64) + 1
        self.buffers = [self.scale * 2.0**r for r in range(N)]
        self.bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.empty(size), N)])
        # know[r][q, i]: rank r may hold rank q's number at element i (by messages so far)
        self.know = [np.eye(N, dtype=bool)[:, [r]].repeat(size, 1) for r in range(N)]
        self.log: list[tuple[int, int, int, int]] = []  # (src, dst, chunk, bytes)

    def owners(self, values: np.ndarray, where: slice) -> np.ndarray | None:
        """(N, len) bool: which ranks' numbers each value sums; None if no such sum."""
        m = np.asarray(values, dtype=np.float64) / self.scale[where]
        bits = np.rint(m)
        if not (np.all(np.abs(m - bits) < 1e-9) and np.all(bits >= 0) and np.all(bits < 2**self.N)):
            return None
        bits = bits.astype(np.int64)
        return np.array([(bits >> q) & 1 for q in range(self.N)], dtype=bool)

    def justified(self, r: int, values: np.ndarray, where: slice) -> bool:
        own = self.owners(values, where)
        return own is not None and not np.any(own & ~self.know[r][:, where])

    def send(self, src: int, dst: int, c: int) -> np.ndarray:
        N = self.N
        for name, v in (("src", src), ("dst", dst), ("chunk", c)):
            assert isinstance(v, int | np.integer) and 0 <= v < N, (
                f"N={N}: send(src, dst, chunk) takes three ints in 0..{N - 1}; {name}={v!r}"
            )
        where = slice(int(self.bounds[c]), int(self.bounds[c + 1]))
        data = np.array(self.buffers[src][where], dtype=np.float64)
        assert self.justified(src, data, where), (
            f"N={N}: rank {src} sent chunk {c} holding numbers it could not have: from a rank "
            "whose numbers have not reached it through send() yet, or one rank's numbers "
            "counted twice. Hint: a rank may only use its own buffer and what send() delivered."
        )
        self.know[dst][:, where] |= self.owners(data, where)
        self.log.append((int(src), int(dst), int(c), data.nbytes))
        return data


@_exercise("Exercise 2 (the ring, message by message)")
def check_14_2(ring_with_send: Callable) -> None:
    """Runs the learner's ring over a recording ``send``: every buffer must end as the sum,
    using only data that send delivered; the messages must come in 2(N-1) steps in which each
    rank sends one chunk to the same ring neighbour; so each rank sends 2(N-1) chunks, about
    2(N-1)/N of its buffer. Uneven chunk sizes (N does not divide the size) and N = 1 included."""
    rng = _rng(27)
    for N, size in [(1, 10), (2, 8), (3, 10), (4, 3), (5, 17), (8, 1000)]:
        net = _Traffic(N, size, rng)
        ring_with_send(net.buffers, net.send)
        expected = net.scale * (2.0**N - 1)
        bad = [r for r, b in enumerate(net.buffers) if not np.allclose(b, expected, rtol=1e-12)]
        assert not bad, (
            f"N={N}, {size} numbers a rank: ranks {bad} do not end with the sum of all buffers "
            "(in place). Hint: check the chunk a rank sends and the one it receives at each step "
            "of both phases (§2)."
        )
        for r, b in enumerate(net.buffers):
            assert np.shape(b) == (size,), f"N={N}: rank {r}'s buffer changed shape"
            assert net.justified(r, b, slice(None)), (
                f"N={N}: rank {r} ends holding numbers that never reached it through send(). "
                "Hint: every number a rank adds must come from send()'s return value."
            )
        src = [m[0] for m in net.log]
        steps = len(src) // N if N > 1 else 0
        assert len(src) == 2 * (N - 1) * N, (
            f"N={N}: {len(src)} messages in all; the ring takes 2(N-1) steps of one message per "
            "rank. Hint: count the steps of each phase in §2."
        )
        direction = {(m[1] - m[0]) % N for m in net.log}
        assert len(direction) <= 1 and direction <= {1, N - 1}, (
            f"N={N}: messages go from rank to rank {sorted(direction)} places on; in a ring every "
            "rank sends to the same neighbour (the next one, or the previous one) every time"
        )
        for k in range(steps):
            assert sorted(src[k * N : (k + 1) * N]) == list(range(N)), (
                f"N={N}: messages {k * N}..{(k + 1) * N - 1} (step {k + 1}) come from ranks "
                f"{src[k * N : (k + 1) * N]}; in each step every rank sends exactly one chunk. "
                "Hint: loop over the steps, and inside a step over the ranks."
            )
        item = np.dtype(np.float64).itemsize
        sizes = np.diff(net.bounds) * item
        for r in range(N):
            sent = sum(m[3] for m in net.log if m[0] == r)
            assert 2 * (N - 1) * sizes.min() <= sent <= 2 * (N - 1) * sizes.max(), (
                f"N={N}: rank {r} sent {sent} bytes of its {size * item}-byte buffer; the ring "
                "sends one chunk (a 1/N of the buffer) a step"
            )


@_exercise("Exercise 3 (where latency and bandwidth cost the same)")
def check_14_3(equal_terms_size: Callable) -> None:
    for N, alpha, BW in [(8, 5e-6, 12.5e9), (2, 2e-6, 5e9), (64, 1e-5, 25e9), (3, 1.0, 1.0)]:
        B = equal_terms_size(N, alpha, BW)
        # a float32 answer is right to float32 rounding; anything else to float64's
        rtol = 1e-6 if np.asarray(B).dtype == np.float32 else 1e-9
        B = float(B)
        latency, bandwidth = 2 * (N - 1) * alpha, 2 * (N - 1) / N * B / BW  # the terms of t_ring
        assert np.isclose(latency, bandwidth, rtol=rtol, atol=0), (
            f"N={N}, α={alpha}, BW={BW}: at B = {B:.4g} bytes the latency term is "
            f"{latency:.3g} s and the bandwidth term {bandwidth:.3g} s. Hint: both terms are in "
            "§3's formula for T_ring; look at what each of them counts (messages, and bytes a "
            "message) and how each depends on N and on B."
        )
