"""Lesson 14 (data parallelism): the checks of its exercises.

- ``check_14_1``: Exercise 1 (shards that finish together)
- ``check_14_2``: Exercise 2 (the all-gather, message by message)
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
    tokens -- a bound an optimal split always meets (and the reference solution's rule
    guarantees). The inputs are made so that the strided split of ``shard_rows`` and a
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
        shards = balanced_split(tokens, N)
        shards = [np.asarray(s, dtype=np.int64).ravel() for s in shards]
        assert len(shards) == N, f"{len(tokens)} rows over N={N} ranks: return N shards"
        rows = np.concatenate(shards) if shards else np.array([], dtype=np.int64)
        assert sorted(rows.tolist()) == list(range(len(tokens))), (
            f"{len(tokens)} rows over N={N}: every row index 0..{len(tokens) - 1} must be in "
            f"exactly one shard (yours hold {sorted(rows.tolist())})"
        )
        loads = [int(tokens[s].sum()) for s in shards]
        bound = tokens.sum() / N + tokens.max()
        rows_each = [len(s) for s in shards]
        heavy = int(np.argmax(loads))
        hint = (
            "your shards hold about the same number of rows, but rows differ in length: a "
            "rank's time grows with its tokens, not its rows (the c·n of §4)"
            if max(rows_each) - min(rows_each) <= 1
            else f"look at which rows ended on rank {heavy} (rows {sorted(shards[heavy].tolist())})"
            " and where the longest rows went"
        )
        assert max(loads) <= bound + 1e-9, (
            f"rows of {tokens.tolist()} tokens over N={N}: your shards hold {loads} tokens; "
            f"the slowest rank waits on {max(loads)}, more than a balanced split needs (at "
            f"most {bound:.0f}: the average {tokens.sum() / N:.1f} plus the longest row). "
            f"Hint: {hint}."
        )


class _Traffic:
    """The network of Exercise 2. ``send(src, dst, c)`` delivers chunk ``c`` of rank src's
    buffer (``np.array_split(buffer, N)[c]``) to dst and returns a copy of it, as dst receives
    it; every message is recorded.

    The buffers hold rank r's numbers as the bit 2^r times a per-element odd integer, so any
    value a rank holds tells exactly which ranks' numbers it sums. ``know[r]`` records which
    ranks' numbers have reached rank r (element by element) through send(); ``audit`` fails a
    rank holding more (numbers that never reached it, or one rank's numbers counted twice).
    Every such sum is below 2^23: exact in float32, so a ring that moves its chunks as float32
    is judged the same.

    With ``blank`` on, the sender's copy of a chunk reads NaN from the moment send() takes it
    until the learner's function returns (then it is put back, unless the ring wrote there):
    a ring that copies a chunk out of another rank's buffer after sending it, instead of using
    what send() returned, moves NaN. A correct all-gather never reads a chunk it has sent.
    """

    def __init__(self, N: int, size: int, rng: np.random.Generator) -> None:
        self.N, self.size = N, size
        # odd integers small enough that every sum of ranks' numbers is exact in float32 too
        self.scale = 2 * rng.integers(1, 2 ** (22 - N), size).astype(np.float64) + 1
        self.buffers = [self.scale * 2.0**r for r in range(N)]
        self.bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.empty(size), N)])
        # know[r][q, i]: rank r may hold rank q's number at element i (by messages so far)
        self.know = [np.eye(N, dtype=bool)[:, [r]].repeat(size, 1) for r in range(N)]
        self.log: list[tuple[int, int, int, int]] = []  # (src, dst, chunk, bytes)
        self.blank = False
        self.hidden: dict[tuple[int, int], np.ndarray] = {}  # (rank, chunk): its sent copy

    def where(self, c: int) -> slice:
        return slice(int(self.bounds[c]), int(self.bounds[c + 1]))

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

    def buffer(self, r: int) -> np.ndarray:
        """Rank r's buffer, still the NumPy array of ``size`` floats the ring fills in place."""
        b = self.buffers[r]
        assert isinstance(b, np.ndarray) and b.shape == (self.size,) and b.dtype.kind == "f", (
            f"N={self.N}: rank {r}'s buffer is now {type(b).__name__} "
            f"{getattr(b, 'shape', '')}; fill the buffers in place (the chunks of "
            "np.array_split(buffer, N) are views into it)"
        )
        return b

    def audit(self) -> None:
        """Every rank holds only numbers that have reached it, each counted once."""
        assert isinstance(self.buffers, list) and len(self.buffers) == self.N, (
            f"N={self.N}: keep the list of {self.N} buffers (fill them in place)"
        )
        for r in range(self.N):
            b = self.buffer(r).astype(np.float64)
            for c in range(self.N):
                values = b[self.where(c)]
                if (r, c) in self.hidden and np.all(np.isnan(values)):
                    continue  # blanked by send(): the ring does not read it
                assert not np.isnan(values).any(), (
                    f"N={self.N}: rank {r}'s chunk {c} holds NaN. The check blanks the sender's "
                    "copy of a chunk with NaN once send() has taken it. Hint: your ring read a "
                    "chunk out of another rank's buffer; a rank may use only its own buffer and "
                    "what send() returned to it."
                )
                assert self.owners(values, self.where(c)) is not None, (
                    f"N={self.N}: rank {r}'s chunk {c} holds a sum in which some rank's numbers "
                    "are counted twice. Hint: after the reduce-scatter the chunks already hold "
                    "sums, and one that arrives complete holds every rank's numbers (§2: what "
                    "does the all-gather do with it?)"
                )
                assert self.justified(r, values, self.where(c)), (
                    f"N={self.N}: rank {r}'s chunk {c} holds numbers that have not reached it "
                    "through send(). Hint: every number a rank holds must come from its own "
                    "buffer or from what send() returned to it, after the call."
                )

    def send(self, src: int, dst: int, c: int) -> np.ndarray:
        N = self.N
        for name, v in (("src", src), ("dst", dst), ("chunk", c)):
            assert isinstance(v, int | np.integer) and 0 <= v < N, (
                f"N={N}: send(src, dst, chunk) takes three ints in 0..{N - 1}; {name}={v!r}"
            )
        self.audit()
        where = self.where(c)
        data = np.array(self.buffer(src)[where], dtype=np.float64)
        assert not np.isnan(data).any(), (
            f"N={N}: rank {src} sends chunk {c} a second time, without receiving it in between. "
            "Hint: in the all-gather each chunk passes each rank once."
        )
        own = self.owners(data, where)
        assert own is not None and self.justified(src, data, where), (
            f"N={N}: rank {src} sent chunk {c} holding numbers it could not have: from a rank "
            "whose numbers have not reached it through send() yet, or one rank's numbers "
            "counted twice. Hint: a rank may only use its own buffer and what send() delivered."
        )
        if self.blank:
            assert own.all(), (
                f"N={N}: rank {src} sent chunk {c} holding the sum of only "
                f"{int(own.sum(axis=0).min())} of the {N} ranks. Hint: after the reduce-scatter "
                "each rank holds one chunk complete; the all-gather moves complete chunks only "
                "(§2 and its figure)."
            )
        self.know[dst][:, where] |= own
        self.log.append((int(src), int(dst), int(c), data.nbytes))
        if self.blank:
            self.hidden[src, c] = data.copy()
            self.buffers[src][where] = np.nan
        return data

    def reduce_scatter(self) -> None:
        """§2's reduce-scatter, through send(): afterwards rank r holds chunk (r + 1) mod N
        complete. Then the log starts afresh, and blanking (all-gather rules) is on."""
        N = self.N
        chunks = [np.array_split(b, N) for b in self.buffers]
        for k in range(N - 1):
            for r in range(N):
                chunks[(r + 1) % N][(r - k) % N] += self.send(r, (r + 1) % N, (r - k) % N)
        self.log, self.blank = [], True

    def restore(self) -> None:
        """Put back the sent chunks the ring did not write over."""
        for (r, c), data in self.hidden.items():
            if np.all(np.isnan(self.buffers[r][self.where(c)])):
                self.buffers[r][self.where(c)] = data


@_exercise("Exercise 2 (the all-gather, message by message)", writes=(0,))  # fills buffers
def check_14_2(all_gather_with_send: Callable) -> None:
    """Runs §2's reduce-scatter, then the learner's all-gather, over a recording ``send``:
    every buffer must end as the sum, using only data that send delivered (read after the
    call, not out of the sender's buffer); the messages must come in N-1 steps in which each
    rank sends one complete chunk to the same ring neighbour; so each rank sends N-1 chunks,
    about (N-1)/N of its buffer. Uneven chunk sizes (N does not divide the size), an empty
    chunk and N = 1 included."""
    rng = _rng(27)
    for N, size in [(1, 10), (2, 8), (3, 10), (4, 3), (5, 17), (8, 1000)]:
        net = _Traffic(N, size, rng)
        net.reduce_scatter()
        all_gather_with_send(net.buffers, net.send)
        net.audit()
        net.restore()
        expected = net.scale * (2.0**N - 1)
        bad = [r for r, b in enumerate(net.buffers) if not np.allclose(b, expected, rtol=1e-12)]
        assert not bad, (
            f"N={N}, {size} numbers a rank: ranks {bad} do not end with the sum of all buffers "
            "(in place). Hint: after the reduce-scatter rank r holds only chunk (r + 1) mod N "
            "complete; every complete chunk must reach every other rank (§2 and its figure)."
        )
        src = [m[0] for m in net.log]
        steps = len(src) // N if N > 1 else 0
        assert len(src) == (N - 1) * N, (
            f"N={N}: {len(src)} messages in all; the all-gather takes N-1 steps of one message "
            "per rank. Hint: how many hops does a chunk need to reach every rank of the ring?"
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
        sizes = np.diff(net.bounds) * np.dtype(np.float64).itemsize
        for r in range(N):
            sent = sum(m[3] for m in net.log if m[0] == r)
            assert (N - 1) * sizes.min() <= sent <= (N - 1) * sizes.max(), (
                f"N={N}: rank {r} sent {sent} bytes of its {size * 8}-byte buffer; the ring "
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
