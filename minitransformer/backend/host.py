"""The machine this process runs on: what it is (facts), and how to tune it (process-wide).

Facts, one reader each:

- ``cpu_model()``: the CPU's marketing name (/proc/cpuinfo), or None; ``cpu_name()`` never
  None (falls back to ``platform``). Benchmark ratios differ between Intel and AMD, so
  every report names the CPU.
- ``blas_threads()`` / ``set_blas_threads(n)``: the thread count of the OpenBLAS NumPy
  loaded (through threadpoolctl); ``blas_info()``: which BLAS, which version, how many
  threads.
- ``hardware(device)``: the facts a result card records.

Tuning (``tune_host()``): process-wide, so the library never does it on import; the CLI,
which owns its process, calls it. It keeps freed memory with the process (glibc malloc) and
lets each NumPy product choose its BLAS thread count (``gemm_threads``; the product itself
is ``matmul`` below, which the backend gives every op as NumPy's ``xp.matmul``: the
reference math and the fast tier alike).
"""

from __future__ import annotations

import functools
import math
import os
import platform
import sys
import time
from typing import Any

import numpy as np  # NumPy's own facts: its version, where its OpenBLAS lives

# ----------------------------------------------------------------------------- CPU facts


def cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    """``cpu_model()``, or what ``platform`` knows when /proc/cpuinfo does not say."""
    return cpu_model() or platform.processor() or platform.machine()


def hardware(device: str) -> dict[str, Any]:
    """What a result card records about the machine a run used (``device`` as given)."""
    return dict(
        machine=platform.machine(),
        processor=cpu_name(),
        cpu_count=os.cpu_count(),
        python=platform.python_version(),
        numpy=np.__version__,
        device=device,
    )


# ----------------------------------------------------------------------------- BLAS facts


@functools.cache
def openblas_threads_api():
    """(get, set) of the thread count of the OpenBLAS that NumPy loaded, through
    threadpoolctl (the scientific-Python standard for this); None when NumPy's BLAS is not
    OpenBLAS or threadpoolctl is missing. Found once; each get/set is then one C call."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    numpy_libs = os.path.dirname(os.path.dirname(np.__file__))
    for lib in ThreadpoolController().lib_controllers:
        if lib.internal_api == "openblas" and lib.filepath.startswith(numpy_libs):
            # The C functions themselves when threadpoolctl exposes them (a switch per
            # product must cost one call; its public setter takes a lock and ~10 calls).
            symbol = getattr(lib, "_get_symbol", None)
            if symbol is not None and lib.threading_layer != "openmp":
                get, put = symbol("openblas_get_num_threads"), symbol("openblas_set_num_threads")
                if get is not None and put is not None:
                    return get, put
            return lib.get_num_threads, lib.set_num_threads
    return None


def blas_threads() -> int | None:
    """How many threads NumPy's OpenBLAS uses (None when it is not OpenBLAS)."""
    api = openblas_threads_api()
    return None if api is None else int(api[0]())


def set_blas_threads(n: int) -> int | None:
    """Make NumPy's OpenBLAS use ``n`` threads; return the previous count (None, and no
    change, when NumPy's BLAS is not OpenBLAS)."""
    api = openblas_threads_api()
    if api is None:
        return None
    previous = int(api[0]())
    api[1](int(n))
    return previous


def blas_info() -> dict[str, Any]:
    """NumPy's BLAS, its version and thread count (threadpoolctl), else NumPy's build
    config; the BLAS environment variables that are set."""
    info: dict[str, Any] = {"numpy": np.__version__}
    try:
        from threadpoolctl import threadpool_info

        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    except ImportError:
        pools = []
    if pools:
        p = pools[0]
        info.update(
            blas=f"{p.get('internal_api')} {p.get('version')}",
            threads=p.get("num_threads"),
            source="threadpoolctl",
            arch=p.get("architecture"),
        )
        return info
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["blas"] = f"{cfg.get('name')} {cfg.get('version')}"
        info["blas_config"] = cfg.get("openblas configuration", "")
    except Exception:  # noqa: BLE001 - show_config's layout differs across NumPy versions
        info["blas"] = "unknown"
    info["threads"] = blas_threads()
    info["source"] = "numpy.show_config"
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            info.setdefault("env", {})[var] = os.environ[var]
    return info


# ------------------------------------------------------------------- BLAS threads per product

# A GEMM split across BLAS threads stalls whenever one of its threads is not running: on a
# shared machine, other processes hold the cores and every split product waits for a
# descheduled worker. Measured on 2 vCPUs with other jobs running (load ~4): (1024, 64) @
# (64, 256) took 12-16 ms on 2 OpenBLAS threads vs 0.3 ms on one; a base-model step 8.0 s
# vs 1.7 s. So NumPy products run on ONE thread when they are small (at most SMALL_GEMM
# multiply-adds, about 128^3, where splitting costs more than it gains), and larger ones on
# no more threads than there are cores left free by other processes over the last half
# second (/proc/stat, Linux; elsewhere the configured count). The threshold was 2^26 (about
# 400^3); measured on an idle 2-vCPU AMD EPYC, 2^21 made a tiny step 15% and a small step
# 25% faster (the (1024, 64) @ (64, 256) class of products gains from two threads when both
# cores are free), and with both cores busy it changed nothing (0.99-1.03x): the free-core
# count, not the size, is what protects a busy machine.
SMALL_GEMM = 1 << 21
_LOAD_WINDOW_S = 0.5


def busy_cpu_seconds() -> float | None:
    """CPU seconds the machine's cores have been busy since boot (everything but idle and
    I/O wait, from /proc/stat's first line); None where /proc/stat cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class _CpuLoad:
    """Cores used by OTHER processes: /proc/stat's busy time minus this process's own CPU
    time, over windows of _LOAD_WINDOW_S (0.0 where it cannot be read)."""

    def __init__(self):
        self.last: tuple[float, float, float] | None = None
        self.others = 0.0

    def sample(self) -> float:
        now = time.monotonic()
        if self.last is not None and now - self.last[0] < _LOAD_WINDOW_S:
            return self.others
        all_busy = busy_cpu_seconds()
        if all_busy is None:
            return 0.0  # not Linux: no way to tell, keep the configured threads
        own = sum(os.times()[:2])
        if self.last is not None:
            t0, all0, own0 = self.last
            self.others = max(0.0, ((all_busy - all0) - (own - own0)) / (now - t0))
        self.last = (now, all_busy, own)
        return self.others


_cpu_load = _CpuLoad()
_CPUS = os.cpu_count() or 1  # read once: os.cpu_count() reads a file, ~10 µs, each product


def gemm_threads(configured: int, multiply_adds: int) -> int:
    """BLAS threads for one product: 1 when small, else at most the cores others leave free."""
    if configured <= 1 or multiply_adds <= SMALL_GEMM:
        return 1
    free = _CPUS - _cpu_load.sample()
    return max(1, min(configured, int(free + 0.5)))


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``numpy.matmul(a, b)`` (into ``out`` if given); a stack of rows times one matrix,
    a (..., n, k) @ b (k, m), as ONE 2-D product (rows, k) @ (k, m) (NumPy would loop over the
    stack, each product on one thread). With a BLAS thread count chosen for the product
    (``gemm_threads``: one thread for small products, at most the free cores for large ones)
    once ``tune_host()`` has run. The backend's NumPy namespace serves it as ``xp.matmul``,
    so this is the one place the policy applies (``tensordot`` below comes here too)."""
    stacked = b.ndim == 2 and a.ndim > 2
    if stacked:
        shape, k = a.shape, a.shape[-1]  # (rows from size: attribute reads, no calls)
        rows = a.size // k if k else math.prod(shape[:-1])
        a = a.reshape(rows, k)  # (rows, k)
        if out is not None:
            out = out.reshape(rows, b.shape[-1])  # a view of a contiguous buffer
    if not gemm_tuning:  # an attribute read: untuned, a product costs no extra call
        y = np.matmul(a, b, out=out)
    else:
        get, put = _threads_api  # set with gemm_tuning; get and put are C calls
        threads = get()
        n, m = a.shape[-2] if a.ndim > 1 else 1, b.shape[-1] if b.ndim > 1 else 1
        multiply_adds = n * a.shape[-1] * m
        use = 1 if multiply_adds <= SMALL_GEMM else gemm_threads(threads, multiply_adds)
        if use == threads:
            y = np.matmul(a, b, out=out)
        else:
            put(use)
            try:
                y = np.matmul(a, b, out=out)
            finally:
                put(threads)
    return y.reshape(*shape[:-1], b.shape[-1]) if stacked else y


# _LEADING[n]: every axis of an n-axis array but the last (its rows), without a call
_LEADING = [()] + [tuple(range(n - 1)) for n in range(1, 65)]


def tensordot(a: Any, b: Any, /, *, axes: Any = 2) -> Any:
    """``numpy.tensordot(a, b, axes)``; contracting every leading axis of two arrays with
    the same leading shape (a weight's gradient: x^T g summed over all rows) it is one 2-D
    product through ``matmul``, (k, rows) @ (rows, m), with its thread policy."""
    if type(axes) is tuple and len(axes) == 2 and a.ndim == b.ndim:
        rows = _LEADING[a.ndim]
        if axes[0] == rows and axes[1] == rows and a.shape[:-1] == b.shape[:-1]:
            k, m = a.shape[-1], b.shape[-1]
            n = a.size // k if k else b.size // m if m else math.prod(a.shape[:-1])
            return matmul(a.reshape(n, k).T, b.reshape(n, m))
    return np.tensordot(a, b, axes=axes)


# ----------------------------------------------------------------------------- host memory

# glibc returns large freed buffers (mmap'd, or the top of the heap) to the OS, and the next
# array of that size page-faults on every 4 KiB page as it is first written. A training
# step frees and makes hundreds of such arrays; on this (virtual) machine the faults cost
# 20-25% of a tiny step. So, on glibc, buffers below MMAP_MAX_BYTES come from the heap and
# up to TRIM_BYTES of freed heap stays with the process for the next step. Opt out with
# MINITRANSFORMER_MALLOC=default.
MMAP_MAX_BYTES, TRIM_BYTES = 64 << 20, 512 << 20


def _keep_freed_memory() -> bool:
    import ctypes

    if (
        not sys.platform.startswith("linux")
        or os.environ.get("MINITRANSFORMER_MALLOC") == "default"
    ):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, ...): leave the allocator alone
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_MAX_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_BYTES)
    )


malloc_tuned = False  # set by tune_host(): the library alone changes nothing process-wide
gemm_tuning = False
_threads_api: Any = None  # openblas_threads_api() once gemm_tuning is on


def tune_host() -> dict[str, bool]:
    """Tune THIS process for training on the CPU (process-wide, so never done at import):
    glibc keeps freed buffers (see MMAP_MAX_BYTES), and NumPy products choose their BLAS
    thread count per product (see SMALL_GEMM). The CLI calls it; returns what was done."""
    global malloc_tuned
    if not malloc_tuned:
        malloc_tuned = _keep_freed_memory()
    return {"malloc": malloc_tuned, "gemm_threads": tune_products(True)}


def tune_products(on: bool) -> bool:
    """Switch the per-product BLAS thread choice of ``matmul`` on or off (on only where
    NumPy's BLAS is OpenBLAS); return whether it is on. ``tune_host`` switches it on."""
    global gemm_tuning, _threads_api
    _threads_api = openblas_threads_api() if on else None
    gemm_tuning = _threads_api is not None
    return gemm_tuning
