"""Lesson 14's exercise checks (lessons/checks/lesson14.py) tell right from wrong.

- check_14_1 (split a batch's rows so the ranks finish together): the strided and contiguous
  splits, lost or repeated rows and a greedy that never updates its loads fail; the reference
  (longest first), a greedy in the given order, a round-robin over sorted rows and answers as
  lists or tuples pass.
- check_14_2 (the ring through a recording ``send``): ``np.sum`` into every buffer (with or
  without messages around it), everyone-to-rank-0, one phase only, wrong chunk indices,
  adding in the all-gather, sending both ways and not using what ``send`` returns fail; the
  ring to the left, a step's messages gathered before they are applied, ranks visited in
  reverse and chunks carried as float32 pass.
- check_14_3: a float32 answer passes (it was rejected at rtol 1e-9); the failure message
  says where to look, not the formula.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
sys.path.insert(0, str(LESSONS))
checks = importlib.import_module("checks")
s14 = importlib.import_module("solutions.lesson14")


# ------------------------------------------------------------------ 14.1: balanced_split
def _greedy_in_order(tokens, N):  # least-loaded rank next, rows as they come
    shards, loads = [[] for _ in range(N)], [0] * N
    for i, t in enumerate(tokens):
        r = int(np.argmin(loads))
        shards[r].append(i)
        loads[r] += t
    return shards


def _round_robin_sorted(tokens, N):  # deal the rows, longest first, like cards
    order = np.argsort(tokens)[::-1]
    return tuple(order[r::N] for r in range(N))


def _greedy_no_update(tokens, N):  # the loads never change: every row on rank 0
    shards, loads = [[] for _ in range(N)], [0] * N
    for i in range(len(tokens)):
        shards[loads.index(min(loads))].append(i)
    return shards


SPLIT_WRONG = {
    "strided (shard_rows)": lambda t, N: [np.arange(r, len(t), N) for r in range(N)],
    "contiguous": lambda t, N: np.array_split(np.arange(len(t)), N),
    "contiguous after sorting": lambda t, N: np.array_split(np.argsort(t), N),
    "greedy that never updates": _greedy_no_update,
    "a row lost": lambda t, N: [s[s != 0] for s in s14.balanced_split(t, N)],
    "a row twice": lambda t, N: [
        np.append(s, 0) if r == 0 else s for r, s in enumerate(s14.balanced_split(t, N))
    ],
    "one shard too few": lambda t, N: s14.balanced_split(t, N)[: N - 1] if N > 1 else [],
    "1-based rows": lambda t, N: [s + 1 for s in s14.balanced_split(t, N)],
    "token counts, not rows": lambda t, N: [t[s] for s in s14.balanced_split(t, N)],
}
SPLIT_VALID = {
    "reference (longest first)": s14.balanced_split,
    "greedy in the given order": _greedy_in_order,
    "round robin over sorted rows, a tuple": _round_robin_sorted,
    "lists of Python ints": lambda t, N: [s.tolist() for s in s14.balanced_split(t, N)],
}


@pytest.mark.parametrize("name", SPLIT_WRONG)
def test_14_1_catches(name):
    with pytest.raises(AssertionError):
        checks.check_14_1(SPLIT_WRONG[name])


@pytest.mark.parametrize("name", SPLIT_VALID)
def test_14_1_accepts(name, capsys):
    assert checks.check_14_1(SPLIT_VALID[name]) == checks.CORRECT


# ------------------------------------------------------------------ 14.2: ring_with_send
def _sum_everywhere(buffers, send):  # no ring at all: what the old check let through
    total = np.sum(buffers, axis=0)
    for b in buffers:
        b[...] = total


def _sum_then_ring(buffers, send):  # the sum first, then the ring's messages for show
    _sum_everywhere(buffers, send)
    s14.ring_with_send([b.copy() for b in buffers], send)


def _ring_for_show_then_sum(buffers, send):  # the right messages, their data ignored
    N = len(buffers)
    for phase in range(2):
        for k in range(N - 1):
            for r in range(N):
                send(r, (r + 1) % N, (r - k + phase) % N)
    _sum_everywhere(buffers, send)


def _through_rank0(buffers, send):  # the naive all-reduce: everything to rank 0 and back
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for r in range(1, N):
        for c in range(N):
            chunks[0][c] += send(r, 0, c)
    for r in range(1, N):
        for c in range(N):
            chunks[r][c][...] = send(0, r, c)


def _ring(
    buffers,
    send,
    *,
    gather_index=1,
    add_in_gather=False,
    overwrite_in_scatter=False,
    phases=2,
    alternate=False,
):
    """The reference ring with one mistake switched on."""
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for k in range(N - 1):
        for r in range(N):
            dst = (r - 1) % N if alternate and k % 2 else (r + 1) % N
            c = (r - k) % N
            data = send(r, dst, c)
            if overwrite_in_scatter:
                chunks[dst][c][...] = data
            else:
                chunks[dst][c] += data
    for k in range(N - 1) if phases == 2 else ():
        for r in range(N):
            c = (r + gather_index - k) % N
            data = send(r, (r + 1) % N, c)
            if add_in_gather:
                chunks[(r + 1) % N][c] += data
            else:
                chunks[(r + 1) % N][c][...] = data


def _ring_left(buffers, send):  # the mirror image: chunks travel to the previous rank
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for k in range(N - 1):
        for r in range(N):
            c = (r + k) % N
            chunks[(r - 1) % N][c] += send(r, (r - 1) % N, c)
    for k in range(N - 1):
        for r in range(N):
            c = (r - 1 + k) % N
            chunks[(r - 1) % N][c][...] = send(r, (r - 1) % N, c)


def _ring_step_at_once(buffers, send):  # a step's messages all sent, then all applied
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for phase in range(2):
        for k in range(N - 1):
            inbox = [
                ((r + 1) % N, (r - k + phase) % N, send(r, (r + 1) % N, (r - k + phase) % N))
                for r in range(N)
            ]
            for dst, c, data in inbox:
                if phase == 0:
                    chunks[dst][c] += data
                else:
                    chunks[dst][c][...] = data


def _ring_reversed_ranks(buffers, send):  # ranks visited N-1 .. 0 inside a step
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for phase in range(2):
        for k in range(N - 1):
            for r in reversed(range(N)):
                c = (r - k + phase) % N
                data = send(r, (r + 1) % N, c)
                if phase == 0:
                    chunks[(r + 1) % N][c] += data
                else:
                    chunks[(r + 1) % N][c][...] = data


RING_WRONG = {
    "np.sum into every buffer": _sum_everywhere,
    "np.sum, then the ring for show": _sum_then_ring,
    "the ring's messages, then np.sum": _ring_for_show_then_sum,
    "everything through rank 0": _through_rank0,
    "reduce-scatter only": lambda b, s: _ring(b, s, phases=1),
    "all-gather sends the wrong chunk": lambda b, s: _ring(b, s, gather_index=0),
    "all-gather adds": lambda b, s: _ring(b, s, add_in_gather=True),
    "reduce-scatter overwrites": lambda b, s: _ring(b, s, overwrite_in_scatter=True),
    "both directions": lambda b, s: _ring(b, s, alternate=True),
    "send's data ignored": lambda b, s: [s(r, (r + 1) % len(b), 0) for r in range(len(b))],
}


def _ring_float32(buffers, send):  # the chunks carried as float32
    s14.ring_with_send(buffers, lambda src, dst, c: send(src, dst, c).astype(np.float32))


RING_VALID = {
    "chunks as float32": _ring_float32,
    "reference": s14.ring_with_send,
    "to the left": _ring_left,
    "a step at once": _ring_step_at_once,
    "ranks in reverse": _ring_reversed_ranks,
}


@pytest.mark.parametrize("name", RING_WRONG)
def test_14_2_catches(name):
    with pytest.raises(AssertionError):
        checks.check_14_2(RING_WRONG[name])


@pytest.mark.parametrize("name", RING_VALID)
def test_14_2_accepts(name):
    assert checks.check_14_2(RING_VALID[name]) == checks.CORRECT


def test_14_2_send_records_the_traffic():
    """The recording network: one chunk's bytes per message, a copy (not a view) returned."""
    from checks.lesson14 import _Traffic

    net = _Traffic(4, 10, np.random.default_rng(0))
    data = net.send(0, 1, 3)
    assert net.log == [(0, 1, 3, 2 * 8)]  # array_split(10, 4): sizes 3, 3, 2, 2
    data[...] = 0
    assert np.all(net.buffers[0] != 0)
    with pytest.raises(AssertionError):
        net.send(0, 4, 0)  # no rank 4


# ------------------------------------------------------------------ 14.3: equal_terms_size
@pytest.mark.parametrize(
    "answer",
    [
        lambda N, alpha, BW: np.float32(N * alpha * BW),
        lambda N, alpha, BW: (N - 1) * alpha / ((N - 1) / N / BW),
        lambda N, alpha, BW: np.float64(N) * alpha * BW,
    ],
    ids=["float32", "the terms divided", "np.float64"],
)
def test_14_3_accepts(answer):
    assert checks.check_14_3(answer) == checks.CORRECT


def test_14_3_message_points_to_the_text_not_the_formula():
    with pytest.raises(AssertionError) as err:
        checks.check_14_3(lambda N, alpha, BW: alpha * BW)
    message = str(err.value)
    assert "§3" in message
    for formula in ("solve for B", "N α BW", "N * alpha", "both sides", "set them equal"):
        assert formula not in message
