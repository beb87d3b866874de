"""Timing one attention layer: forward + backward of one op, one head, per kind and length.

    rows = measure(["full", "local", "linear"], [256, 1024, 4096])
    rows[0]  # {"kind": "full", "length": 256, "median_s": ..., "peak_bytes": ..., ...}

One STEP is what a training step asks of one attention layer: q, k, v of shape (1, 1, T, d)
(one sequence, one head; T = S, self-attention), float32, random normal; ``out =
op(q, k, v)``, then ``out.backward(g)`` with a random upstream gradient g of out's shape,
so the backward computes dq, dk and dv. The kinds (``KINDS``):

    full     the plain op, ops/attention.py: the (T, T) scores and weights, O(T²·d) time
    blocked  the same numbers in key blocks of 64 (ops/blocked_attention.py): O(T²·d) time,
             O(T·64) memory
    local    each query reads the keys within ``window`` of it (ops/local_attention.py)
    strided  Child et al.'s strided pattern (ops/strided_attention.py); stride None: round(√T)
             at each T, their choice, which makes the time grow as T^1.5
    linear   Katharopoulos et al.'s linear attention, φ(x) = elu(x) + 1
             (ops/linear_attention.py): O(T·d²)

``causal=True`` gives full and blocked a lower-triangular (T, T) bool mask, built inside the
step (it is part of what causal full attention costs), and the others ``causal=True``.

What is measured, per kind and length: one warm-up step (not counted); one step under
``tracemalloc`` for the memory; then ``repeats`` timed steps (``time.perf_counter``, with
tracemalloc off: tracing slows allocation), reported as the median and the spread (min,
max) of the wall-clock time, and the median CPU time of this process
(``time.process_time``): on a machine other processes share, a step that waits for a core
takes longer on the clock but not on the CPU, so with one BLAS thread the CPU time is the
steadier measure of the algorithm's work. The memory is the PEAK that tracemalloc saw
during the step minus what was held just before it (the inputs): NumPy reports every array
buffer it allocates to tracemalloc, so this counts the arrays the step made (scores,
weights, saved tensors, gradients) and the Python objects around them, not memory outside
NumPy and Python (BLAS's own buffers).

The ops run as written (the reference ops; the fast tier's twins are not switched on), on
``threads`` BLAS threads (default 1: the cost of the algorithm, not of the machine's
parallelism; on a shared machine several threads wait for each other).
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import checks
from ...backend import host
from ...errors import ArgumentError
from ...tensor import Tensor

KINDS = ("full", "blocked", "local", "strided", "linear")
BLOCK_SIZE = 64  # blocked attention's keys per block
MAX_LENGTH = 65_536  # the longest T measured (strided's time grows as T^1.5 beyond it)
MAX_HEAD_SIZE = 1024
MAX_REPEATS = 100
FULL_ARRAYS = 4  # (T, T) float32 arrays full attention holds at once (3.1 measured, + room)


def full_attention_bytes(length: int, causal: bool = False) -> int:
    """About the most memory full attention's step holds at T = S = ``length``: four (T, T)
    float32 arrays (scores, weights, their gradients; about 3.1 measured), and the (T, T)
    bool mask when ``causal``."""
    return length * length * (4 * FULL_ARRAYS + (1 if causal else 0))


def default_stride(length: int) -> int:
    """Child et al.'s stride for length T: round(√T) (at least 1)."""
    return max(1, round(length**0.5))


def _causal_mask(length: int) -> np.ndarray:
    """(T, T) bool, True on and below the diagonal: query i reads keys j <= i."""
    return np.tril(np.ones((length, length), dtype=bool))


def attention(kind: str, q: Tensor, k: Tensor, v: Tensor, *, window: int, stride: int,
              causal: bool) -> Tensor:  # fmt: skip
    """``kind``'s attention of q, k, v (T = S): the op itself, checked by its own wrapper.
    The new ops are imported here, when first asked for, from their own modules."""
    length = q.shape[-2]
    if kind == "full":
        from ...ops.attention import scaled_dot_product_attention

        return scaled_dot_product_attention(q, k, v, mask=_causal_mask(length) if causal else None)
    if kind == "blocked":
        from ...ops.blocked_attention import blocked_attention

        mask = _causal_mask(length) if causal else None
        return blocked_attention(q, k, v, mask=mask, block_size=BLOCK_SIZE)
    if kind == "local":
        from ...ops.local_attention import local_attention

        return local_attention(q, k, v, window, causal=causal)
    if kind == "strided":
        from ...ops.strided_attention import strided_attention

        return strided_attention(q, k, v, stride, causal=causal)
    from ...ops.linear_attention import linear_attention

    return linear_attention(q, k, v, causal=causal)


def _step(kind: str, arrays: Sequence[np.ndarray], **options: Any) -> None:
    """One forward + backward of ``kind`` on fresh leaf Tensors (no gradient carried over)."""
    q, k, v = (Tensor(a, requires_grad=True) for a in arrays[:3])
    out = attention(kind, q, k, v, **options)
    out.backward(arrays[3])


def _peak_bytes(kind: str, arrays: Sequence[np.ndarray], **options: Any) -> int:
    """The most memory one step held above what was held before it, as tracemalloc counts."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        _step(kind, arrays, **options)
        return max(0, tracemalloc.get_traced_memory()[1] - before)
    finally:
        if started:
            tracemalloc.stop()


def measure_one(kind: str, length: int, *, d: int = 64, window: int = 64,
                stride: int | None = None, causal: bool = False, repeats: int = 3,
                seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """One row: ``kind`` at T = S = ``length`` (arguments as ``measure``, trusted here)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((1, 1, length, d), dtype=np.float32) for _ in range(4)]
    used_stride = default_stride(length) if stride is None else stride
    options = dict(window=window, stride=used_stride, causal=causal)
    gc.collect()
    _step(kind, arrays, **options)  # warm-up: first-call imports and caches, not timed
    peak = _peak_bytes(kind, arrays, **options)
    times, cpu_times = [], []
    for _ in range(repeats):
        gc.collect()
        start, cpu_start = time.perf_counter(), time.process_time()
        _step(kind, arrays, **options)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    row: dict[str, Any] = dict(
        kind=kind, length=length, median_s=statistics.median(times), min_s=min(times),
        max_s=max(times), times_s=times, cpu_median_s=statistics.median(cpu_times),
        cpu_times_s=cpu_times, peak_bytes=peak,
    )  # fmt: skip
    row.update({"local": {"window": window}, "strided": {"stride": used_stride},
                "blocked": {"block_size": BLOCK_SIZE}}.get(kind, {}))  # fmt: skip
    return row


def check_settings(kinds: Any, lengths: Any, d: Any, window: Any, stride: Any, causal: Any,
                   repeats: Any, memory_limit_gib: Any) -> tuple[list[str], list[int]]:  # fmt: skip
    """``measure``'s arguments checked (ArgumentError naming the argument and the fix);
    return the kinds and the lengths (sorted)."""
    where = "measure"
    if isinstance(kinds, str) or not isinstance(kinds, Sequence) or not kinds:
        raise ArgumentError(f"{where}: kinds must be a list of names of {KINDS}, got "
                            f"{checks.short(kinds)}; e.g. kinds=['full', 'local']")  # fmt: skip
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or len(set(kinds)) != len(kinds):
        raise ArgumentError(f"{where}: kinds must be different names of {', '.join(KINDS)}; "
                            f"got {checks.short(list(kinds))}")  # fmt: skip
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence) or not lengths:
        raise ArgumentError(f"{where}: lengths must be a list of whole numbers, got "
                            f"{checks.short(lengths)}; e.g. lengths=[256, 1024, 4096]")  # fmt: skip
    for length in lengths:
        checks.positive_int(where, "each of lengths", length, "e.g. lengths=[256, 1024]")
        if length > MAX_LENGTH:
            raise ArgumentError(f"{where}: lengths go up to {MAX_LENGTH:,}, got {length:,}; "
                                "measure shorter sequences")  # fmt: skip
    if len(set(lengths)) != len(lengths):
        raise ArgumentError(f"{where}: lengths must differ, got {checks.short(list(lengths))}")
    checks.positive_int(where, "d", d, "the head size, e.g. d=64")
    if d > MAX_HEAD_SIZE:
        raise ArgumentError(f"{where}: d must be at most {MAX_HEAD_SIZE}, got {d}")
    checks.positive_int(where, "window", window, "the local window, e.g. window=64")
    if stride is not None:
        checks.positive_int(where, "stride", stride, "or stride=None for round(sqrt(T))")
    checks.flag(where, "causal", causal)
    checks.positive_int(where, "repeats", repeats, "the timed steps per row, e.g. repeats=3")
    if repeats > MAX_REPEATS:
        raise ArgumentError(f"{where}: repeats must be at most {MAX_REPEATS}, got {repeats}")
    memory_limit_gib = checks.real(where, "memory_limit_gib", memory_limit_gib, 0.0,
                                   low_open=True, fix="e.g. memory_limit_gib=8")  # fmt: skip
    lengths = sorted(int(n) for n in lengths)
    if "full" in kinds:
        over = [n for n in lengths if full_attention_bytes(n, causal) > memory_limit_gib * 2**30]
        if over:
            raise ArgumentError(
                f"{where}: full attention at T = {over[0]:,} needs about "
                f"{full_attention_bytes(over[0], causal) / 2**30:.1f} GiB, over "
                f"memory_limit_gib={memory_limit_gib:g}; measure shorter lengths, raise "
                "memory_limit_gib, or leave 'full' out of kinds"
            )
    return list(kinds), lengths


def measure(kinds: Sequence[str] = KINDS, lengths: Sequence[int] = (256, 1024, 4096), *,
            d: int = 64, window: int = 64, stride: int | None = None, causal: bool = False,
            repeats: int = 3, threads: int | None = 1, memory_limit_gib: float = 8.0,
            log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Time forward + backward of each kind at each length; one row per (kind, length).

    kinds: names of ``KINDS``; lengths: T = S, whole numbers up to 65,536; d: the head size;
    window: local's window; stride: strided's stride (None: round(√T) at each T); causal:
    every kind causal; repeats: the timed steps per row (after one warm-up and one traced
    step); threads: NumPy's BLAS threads while measuring (None: leave them as they are);
    memory_limit_gib: full attention's lengths whose footprint (``full_attention_bytes``)
    would exceed this many GiB are refused before anything runs; log: called with a line
    per row as it is measured.

    Each row: ``kind``, ``length``, ``median_s``, ``min_s``, ``max_s``, ``times_s`` (every
    timed step's wall-clock seconds), ``cpu_median_s``, ``cpu_times_s`` (the same steps'
    CPU seconds), ``peak_bytes`` (the step's peak above its inputs, tracemalloc),
    and the kind's size (``window``, ``stride`` or ``block_size``). See the module doc.
    """
    kinds, lengths = check_settings(kinds, lengths, d, window, stride, causal, repeats,
                                    memory_limit_gib)  # fmt: skip
    if threads is not None:
        checks.positive_int("measure", "threads", threads, "BLAS threads, e.g. threads=1")
    previous = host.set_blas_threads(threads) if threads is not None else None
    rows = []
    try:
        for length in lengths:
            for kind in kinds:
                row = measure_one(kind, length, d=d, window=window, stride=stride,
                                  causal=causal, repeats=repeats)  # fmt: skip
                rows.append(row)
                if log is not None:
                    log(f"{kind:>8} T = {length:>6,}: {row['median_s'] * 1e3:10.2f} ms, "
                        f"peak {row['peak_bytes'] / 2**10:12,.0f} KiB")  # fmt: skip
    finally:
        if previous is not None:
            host.set_blas_threads(previous)
    return rows


__all__ = ["BLOCK_SIZE", "KINDS", "MAX_LENGTH", "attention", "check_settings", "default_stride",
           "full_attention_bytes", "measure", "measure_one"]  # fmt: skip
