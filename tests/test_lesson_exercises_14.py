"""Lesson 14's exercise checks (lessons/checks/lesson14.py) tell right from wrong.

- check_14_1 (split a batch's rows so the ranks finish together): the strided and contiguous
  splits, lost or repeated rows and a greedy that never updates its loads fail; the reference
  (longest first), a greedy in the given order, a round-robin over sorted rows and answers as
  lists or tuples pass.
- check_14_2 (the all-gather through a recording ``send``, after the check's reduce-scatter):
  ``np.sum`` into every buffer (with or without messages around it), everyone-to-rank-0, the
  reduce-scatter's chunk indices, adding what arrives, a step short or too many, sending both
  ways, reading the sender's buffer instead of what ``send`` returned (after the call or
  before it), received chunks kept in a copy and the whole ring again fail, each with its own
  hint; the all-gather to the left, a step's messages gathered before they are applied, ranks
  visited in reverse and chunks carried as float32 pass.
- the ring figure (lessons/figures/ring_allreduce.py) draws 2(N-1) steps and one arrow per
  rank and step; no lesson cell before exercise 2 writes the all-gather.
- check_14_3: a float32 answer passes (it was rejected at rtol 1e-9); the failure message
  says where to look, not the formula.
"""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, hint_of

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


# ------------------------------------------------------------------ 14.2: all_gather_with_send
# The check runs section 2's reduce-scatter first: rank r then holds chunk (r + 1) mod N
# complete, and the answer finishes the all-reduce.
def _sum_everywhere(buffers, send):  # no ring at all
    total = np.sum(buffers, axis=0)
    for b in buffers:
        b[...] = total


def _sum_then_gather(buffers, send):  # the sum first, then the messages for show
    _sum_everywhere(buffers, send)
    s14.all_gather_with_send(buffers, send)


def _gather_for_show_then_sum(buffers, send):  # the right messages, their data ignored
    N = len(buffers)
    for k in range(N - 1):
        for r in range(N):
            send(r, (r + 1) % N, (r + 1 - k) % N)
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


def _gather(buffers, send, *, start=1, add=False, steps=None, alternate=False, shared=None):
    """The reference all-gather with one mistake switched on. ``shared``: read the chunk out
    of the sender's buffer "after" the send, or "before" it, instead of send's return value."""
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for k in range(N - 1 if steps is None else steps(N)):
        for r in range(N):
            dst = (r - 1) % N if alternate and k % 2 else (r + 1) % N
            c = (r + start - k) % N
            if shared == "before":
                chunks[dst][c][...] = chunks[r][c]
            data = send(r, dst, c)
            if shared == "after":
                data = chunks[r][c]
            if add:
                chunks[dst][c] += data
            else:
                chunks[dst][c][...] = data


def _whole_ring_again(buffers, send):  # the reduce-scatter once more, then the all-gather
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for k in range(N - 1):
        for r in range(N):
            chunks[(r + 1) % N][(r - k) % N] += send(r, (r + 1) % N, (r - k) % N)
    s14.all_gather_with_send(buffers, send)


def _gather_left(buffers, send):  # the mirror image: chunks travel to the previous rank
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for k in range(N - 1):
        for r in range(N):
            c = (r + 1 + k) % N
            chunks[(r - 1) % N][c][...] = send(r, (r - 1) % N, c)


def _gather_step_at_once(buffers, send):  # a step's messages all sent, then all applied
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for k in range(N - 1):
        inbox = [((r + 1) % N, (r + 1 - k) % N, send(r, (r + 1) % N, (r + 1 - k) % N))
                 for r in range(N)]  # fmt: skip
        for dst, c, data in inbox:
            chunks[dst][c][...] = data


def _gather_reversed_ranks(buffers, send):  # ranks visited N-1 .. 0 inside a step
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]
    for k in range(N - 1):
        for r in reversed(range(N)):
            c = (r + 1 - k) % N
            chunks[(r + 1) % N][c][...] = send(r, (r + 1) % N, c)


def _gather_in_a_copy(buffers, send):  # received chunks kept aside: send() reads the buffers
    N = len(buffers)
    mine = [b.copy() for b in buffers]
    chunks = [np.array_split(b, N) for b in mine]
    for k in range(N - 1):
        for r in range(N):
            c = (r + 1 - k) % N
            chunks[(r + 1) % N][c][...] = send(r, (r + 1) % N, c)
    for b, m in zip(buffers, mine, strict=True):
        b[...] = m


def _gather_float32(buffers, send):  # the chunks carried as float32
    s14.all_gather_with_send(buffers, lambda src, dst, c: send(src, dst, c).astype(np.float32))


GATHER_WRONG = {  # name: (answer, words the failure's message must contain)
    "np.sum into every buffer": (_sum_everywhere, "counted twice"),
    "np.sum, then the all-gather for show": (_sum_then_gather, "counted twice"),
    "the all-gather's messages, then np.sum": (_gather_for_show_then_sum, "NaN"),
    "everything through rank 0": (_through_rank0, "complete"),
    "the reduce-scatter's chunks": (lambda b, s: _gather(b, s, start=0), "complete"),
    "adds what arrives": (lambda b, s: _gather(b, s, add=True), "counted twice"),
    "one step short": (lambda b, s: _gather(b, s, steps=lambda N: N - 2), "sum of all"),
    "one step too many": (lambda b, s: _gather(b, s, steps=lambda N: N), "messages in all"),
    "both directions": (lambda b, s: _gather(b, s, alternate=True), ""),
    "reads the sender's buffer after send": (lambda b, s: _gather(b, s, shared="after"), "NaN"),
    "writes the sender's chunk before send": (
        lambda b, s: _gather(b, s, shared="before"),
        "not reached it",
    ),
    "send's data ignored": (lambda b, s: [s(r, (r + 1) % len(b), 0) for r in range(len(b))], ""),
    "the whole ring again": (_whole_ring_again, "complete"),
    "received chunks kept in a copy": (_gather_in_a_copy, "complete"),  # send reads the buffer
}


def _buffers_replaced_by_tensors(buffers, send):  # new objects, not the buffers filled
    import minitransformer as mt

    for r in range(len(buffers)):
        buffers[r] = mt.tensor(buffers[r])


GATHER_WRONG["buffers replaced by Tensors"] = (_buffers_replaced_by_tensors, "in place")
GATHER_WRONG["buffers replaced by a shorter array"] = (
    lambda b, s: b.__setitem__(0, b[0][:1]),
    "in place",
)

GATHER_VALID = {
    "reference": s14.all_gather_with_send,
    "chunks as float32": _gather_float32,
    "to the left": _gather_left,
    "a step at once": _gather_step_at_once,
    "ranks in reverse": _gather_reversed_ranks,
}


@pytest.mark.parametrize("name", GATHER_WRONG)
def test_14_2_catches(name):
    answer, words = GATHER_WRONG[name]
    assert words in hint_of(checks.check_14_2, answer)


@pytest.mark.parametrize("name", GATHER_VALID)
def test_14_2_accepts(name):
    assert checks.check_14_2(GATHER_VALID[name]) == checks.CORRECT


def test_14_2_send_records_the_traffic():
    """The recording network: one chunk's bytes per message, a copy (not a view) returned;
    in the all-gather the sender's copy is blanked until the answer returns, then put back."""
    from checks.lesson14 import _Traffic

    net = _Traffic(4, 10, np.random.default_rng(0))
    data = net.send(0, 1, 3)
    assert net.log == [(0, 1, 3, 2 * 8)]  # array_split(10, 4): sizes 3, 3, 2, 2
    data[...] = 0
    assert np.all(net.buffers[0] != 0)
    with pytest.raises(AssertionError):
        net.send(0, 4, 0)  # no rank 4
    net = _Traffic(3, 9, np.random.default_rng(0))
    net.reduce_scatter()
    assert net.log == [] and net.blank
    kept = net.buffers[0][3:6].copy()  # rank 0 holds chunk 1 complete
    assert np.all(net.send(0, 1, 1) == kept) and np.all(np.isnan(net.buffers[0][3:6]))
    net.restore()
    assert np.all(net.buffers[0][3:6] == kept)


def test_no_lesson_cell_writes_the_all_gather():
    """Exercise 2 is not given away: no cell before it sends chunks in an all-gather (the
    simulation and the MPI script show the reduce-scatter; MPI's Allgatherv does the rest)."""
    nb = json.loads((LESSONS / "14_data_parallelism.ipynb").read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"]]
    exercise = next(i for i, c in enumerate(cells) if "def all_gather_with_send(" in c)
    before = "\n".join(cells[:exercise])
    figure = (LESSONS / "figures" / "ring_allreduce.py").read_text(encoding="utf-8")
    for text in (before, figure):  # the all-gather's index arithmetic, in any spelling
        assert "1 - k)" not in text and "1 + k)" not in text and "-k + 1" not in text
    assert "travel once around the ring" in before and "Allgatherv" in before


# ------------------------------------------------------------------ ring figure
def test_ring_figure_draws_every_step():
    """lessons/figures/ring_allreduce.py: 2(N-1) steps that end with every chunk complete, one
    panel per step plus one after each phase, one arrow per rank and step."""
    from figures.ring_allreduce import ring_figure, ring_schedule

    for N in (2, 3, 4, 5):
        steps, final = ring_schedule(N)
        assert [s[0] for s in steps] == ["reduce-scatter"] * (N - 1) + ["all-gather"] * (N - 1)
        assert all(x == frozenset(range(N)) for row in final for x in row)
        after_rs = steps[N - 1][2]
        assert all(after_rs[r][(r + 1) % N] == frozenset(range(N)) for r in range(N))
        for _, _, _, sends in steps:
            assert sorted(s for s, _, _ in sends) == list(range(N))
            assert all(d == (s + 1) % N for s, d, _ in sends)
    fig = ring_figure(4)
    assert len(fig.axes) == 2 * 4
    arrows = [p for ax in fig.axes for p in ax.patches if p.get_gid() == "send"]
    assert len(arrows) == 2 * (4 - 1) * 4
    assert sum(p.get_gid() == "chunk" for ax in fig.axes for p in ax.patches) == 8 * 4 * 4
    fig.canvas.draw()
    with pytest.raises(ValueError):
        ring_schedule(1)


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
    message = hint_of(checks.check_14_3, lambda N, alpha, BW: alpha * BW)
    assert "§3" in message
    for formula in ("solve for B", "N α BW", "N * alpha", "both sides", "set them equal"):
        assert formula not in message
