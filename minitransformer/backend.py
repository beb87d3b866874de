"""Which array library does the math: NumPy on the CPU, CuPy on a GPU.

This is the ONLY module that imports numpy or cupy by name for array math. Everything
else asks for the *namespace* of its input arrays (``namespace(x)``) and calls the
array-API functions on it (``xp.exp``, ``xp.matmul``, ...), so the same model code runs
on every backend.

Devices are plain strings:

- ``"cpu"``            NumPy arrays.
- ``"cuda"``, ``"cuda:N"`` CuPy arrays on GPU N (CuPy is imported only when asked for).
- ``"strict:NAME"``     arrays of ``array_api_strict`` on its fake device NAME
  (``CPU_DEVICE``, ``device1``, ``device2``). The tests use this as a stand-in for a GPU:
  it allows only the standard API and refuses to mix devices, so code that silently falls
  back to NumPy or forgets a ``device=`` fails there the way it would fail on CuPy.

Beyond the standard, the library needs three things the array API does not have; they
live here: a random generator that lives on the device, scatter-add (for the embedding
gradient), and conversion to NumPy.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import numpy as np

from .errors import DeviceError

Array = Any  # an array of any supported backend (numpy.ndarray, cupy.ndarray, strict Array)

_default_device = "cpu"


# ----------------------------------------------------------------------------- devices


def set_default_device(device: str) -> None:
    """Set the device that creation functions use when none is given (CLI ``--device``)."""
    global _default_device
    _default_device = normalize_device(device)


def get_default_device() -> str:
    return _default_device


def normalize_device(device: Any) -> str:
    """Turn "cpu" / "cuda" / "cuda:1" / "strict:device1" / a strict Device into a name."""
    if device is None:
        return _default_device
    if not isinstance(device, str):
        return device_of_array_device(device)
    name = device.strip()
    if name == "cpu":
        return "cpu"
    if name == "cuda" or name == "gpu":
        return "cuda:0"
    if name.startswith("cuda:") and name[5:].isdigit():
        return name
    if name == "strict":
        return "strict:CPU_DEVICE"
    if name.startswith("strict:"):
        return name
    raise DeviceError(
        f"unknown device {device!r}: use 'cpu', 'cuda' (or 'cuda:N'), "
        "or 'strict:NAME' for the array-api-strict test backend"
    )


def device_of_array_device(dev: Any) -> str:
    """Name of a backend's own device object (a strict Device, a cupy Device, 'cpu')."""
    text = repr(dev)
    if "array_api_strict.Device" in text:
        return "strict:" + text.split("'")[1]
    if dev == "cpu":
        return "cpu"
    if hasattr(dev, "id"):  # cupy.cuda.Device
        return f"cuda:{dev.id}"
    raise DeviceError(f"unknown device object {dev!r}")


@functools.cache
def _cupy():
    """Import CuPy on first use, with one clear sentence when it cannot work."""
    try:
        import cupy
    except ImportError:
        raise DeviceError(
            "device 'cuda' needs CuPy, which is not installed: "
            "pip install 'minitransformer[gpu]' (or cupy-cuda12x) on a machine with an NVIDIA GPU"
        ) from None
    try:
        available = cupy.cuda.is_available()
    except Exception:  # noqa: BLE001 - any driver problem means "no usable GPU"
        available = False
    if not available:
        raise DeviceError(
            "device 'cuda' was asked for, but CuPy finds no usable NVIDIA GPU/driver "
            "on this machine: use device='cpu', or run on a machine with a GPU"
        )
    return cupy


def _strict():
    try:
        import array_api_strict
    except ImportError:
        raise DeviceError(
            "device 'strict:...' needs array-api-strict: pip install array-api-strict "
            "(it is in the 'dev' extra)"
        ) from None
    return array_api_strict


def device_of(x: Array) -> str:
    """The device name of an array ("cpu", "cuda:0", "strict:device1")."""
    if isinstance(x, np.ndarray | np.generic):
        return "cpu"
    mod = type(x).__module__
    if mod.startswith("cupy"):
        return f"cuda:{x.device.id}"
    if mod.startswith("array_api_strict"):
        return device_of_array_device(x.device)
    raise DeviceError(f"not an array of a supported backend: {type(x).__name__}")


# ----------------------------------------------------------------------------- namespaces


def namespace(*arrays: Array):
    """The array namespace of the given arrays (numpy, cupy or array_api_strict).

    NumPy (>= 2) and CuPy arrays are served by ``array_api_compat``'s wrappers so that
    standard names (``concat``, ``permute_dims``, ``astype``) work on both; NumPy gets its
    own module when it already is compliant, which avoids a wrapper call per function.
    """
    for x in arrays:
        if isinstance(x, np.ndarray | np.generic):
            return _numpy_namespace()
        mod = type(x).__module__
        if mod.startswith("cupy"):
            import array_api_compat

            return array_api_compat.array_namespace(x)
        if mod.startswith("array_api_strict"):
            return _strict()
    return _numpy_namespace()


@functools.cache
def _numpy_namespace():
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":
        return _lean_numpy()
    import array_api_compat.numpy

    return array_api_compat.numpy


def _reshape(x: Array, /, shape: tuple[int, ...], *, copy: bool | None = None) -> Array:
    """``numpy.reshape`` in one Python call: the ndarray method directly, the full
    function (three Python calls: dispatcher, wrapper, method) only for the rare cases."""
    if copy is None and type(x) is np.ndarray:
        return x.reshape(shape)
    return np.reshape(x, shape, copy=copy)


def _sum(x: Array, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    """``numpy.sum`` in one Python call: ``add.reduce`` (what ``numpy.sum`` runs for an
    ndarray after three Python calls of dispatch)."""
    if type(x) is np.ndarray:
        return np.add.reduce(x, axis=axis, dtype=dtype, keepdims=keepdims)
    return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


def _lean_numpy() -> types.ModuleType:
    """NumPy's namespace with two changes: ``reshape`` is ``_reshape`` and ``sum`` is
    ``_sum``. A training step reshapes ~240 times (2-D GEMMs, heads, LayerNorm rows) and sums
    ~60 times; through NumPy's Python wrappers that is ~900 Python calls. Every other name
    is NumPy's own object (the namespace is a copy of NumPy's module dict; names NumPy makes
    lazily are looked up on first use). NumPy itself is not modified."""
    ns = types.ModuleType("numpy", np.__doc__)
    ns.__dict__.update(
        {k: v for k, v in vars(np).items() if k not in ("__getattr__", "__dir__", "__spec__")}
    )
    ns.reshape, ns.sum = _reshape, _sum
    ns.__getattr__ = lambda name: getattr(np, name)  # lazy attributes (PEP 562)
    return ns


def namespace_for_device(device: str):
    """The namespace that creates arrays on ``device``."""
    device = normalize_device(device)
    if device == "cpu":
        return _numpy_namespace()
    if device.startswith("cuda"):
        _cupy()  # the clear error first, when CuPy or a GPU is missing
        import array_api_compat.cupy

        return array_api_compat.cupy
    return _strict()


def _native_device(device: str):
    """The backend's own device object for a device name."""
    if device == "cpu":
        return "cpu"
    if device.startswith("cuda"):
        return _cupy().cuda.Device(int(device.split(":")[1]))
    return _strict().Device(device.split(":", 1)[1])


def is_array(x: Any) -> bool:
    """True for an array of any supported backend (not Python or NumPy scalars)."""
    if isinstance(x, np.ndarray):
        return True
    mod = type(x).__module__
    return mod.startswith("cupy") or mod.startswith("array_api_strict")


# ----------------------------------------------------------------------------- creation and moves


def resolve_dtype(xp, dtype: Any):
    """A dtype of namespace ``xp`` from a name ("float32") or a dtype object."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        return getattr(xp, dtype)
    if xp is np or getattr(xp, "__name__", "").endswith("numpy"):
        return np.dtype(dtype)
    name = getattr(dtype, "name", None) or str(dtype)
    return getattr(xp, name.split(".")[-1])


# (type, dtype) -> name: NumPy computes .name in Python; the type keeps dtypes of two
# libraries that hash alike (NumPy's and array-api-strict's float32) from being compared
_dtype_names: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """'float32', 'int64', ... for the dtype of any backend."""
    key = (type(dtype), dtype)
    try:
        return _dtype_names[key]
    except (KeyError, TypeError):  # first sight of this dtype, or an unhashable one
        pass
    name = getattr(dtype, "name", None)
    if not isinstance(name, str):
        name = str(dtype).split(".")[-1].rstrip("'>")
    try:
        _dtype_names[key] = name
    except TypeError:
        pass
    return name


def asarray(data: Any, dtype: Any = None, device: str | None = None) -> Array:
    """Make an array of ``data`` on ``device`` (default: the default device)."""
    device = normalize_device(device)
    xp = namespace_for_device(device)
    dt = resolve_dtype(xp, dtype)
    if is_array(data) and not isinstance(data, np.ndarray) and device_of(data) != device:
        data = to_numpy(data)  # across backends/devices, go through the host
    if device == "cpu":
        return np.asarray(data, dtype=dt)
    if device.startswith("cuda"):
        cp = _cupy()
        with cp.cuda.Device(int(device.split(":")[1])):
            return cp.asarray(data, dtype=dt)
    if not is_array(data):
        data = np.asarray(data)
        if dt is None:
            dt = resolve_dtype(xp, data.dtype.name)
    return xp.asarray(data, dtype=dt, device=_native_device(device))


def host_array_with_default_dtype(data: Any) -> tuple[np.ndarray, str | None]:
    """Python data as a NumPy array plus PyTorch's default dtype for it (float32 for
    floats, int64 for integers, bool for booleans)."""
    probe = np.asarray(data)
    return probe, {"f": "float32", "i": "int64", "u": "int64", "b": "bool"}.get(probe.dtype.kind)


def to_numpy(x: Array) -> np.ndarray:
    """Copy (or view, for NumPy) an array of any backend into a NumPy array on the host."""
    if isinstance(x, np.ndarray | np.generic):
        return np.asarray(x)
    mod = type(x).__module__
    if mod.startswith("cupy"):
        return x.get()
    if mod.startswith("array_api_strict"):
        xs = _strict()
        return np.asarray(x.to_device(xs.Device("CPU_DEVICE")))
    raise DeviceError(f"cannot convert {type(x).__name__} to NumPy")


def to_device(x: Array, device: str) -> Array:
    """Move an array to ``device`` (a no-op when it is already there)."""
    device = normalize_device(device)
    if device_of(x) == device:
        return x
    return asarray(to_numpy(x), device=device)


# ----------------------------------------------------------------------------- beyond the standard


def scatter_add(table: Array, ids: Array, values: Array) -> Array:
    """table[ids[i]] += values[i] for every i, *repeats included*, in place; returns table.

    Shapes: table (V, D), ids (N,) int, values (N, D). This is the embedding gradient.
    NumPy sorts the ids and sums each run of equal ids with ``add.reduceat`` (much faster
    than ``np.add.at``); CuPy uses ``cupyx.scatter_add``; the strict stand-in, which has no
    scatter, uses the dense form ``one_hot(ids).T @ values`` (correct, only slower).
    """
    if isinstance(table, np.ndarray):
        if ids.size == 0:
            return table
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
        table[sorted_ids[starts]] += np.add.reduceat(values[order], starts, axis=0)
        return table
    mod = type(table).__module__
    if mod.startswith("cupy"):
        import cupyx

        cupyx.scatter_add(table, ids, values)
        return table
    xp = namespace(table)
    one_hot = xp.astype(
        ids[:, None] == xp.arange(table.shape[0], device=table.device)[None, :], values.dtype
    )  # (N, V)
    table += xp.matmul(one_hot.mT, values)
    return table


class Generator:
    """A seeded random generator for a device: a host stream for initialisation, and
    counter-based draws for dropout.

    - ``normal``/``uniform`` (weight initialisation, done once) come from one seeded PCG64
      stream on the host, moved to the device.
    - ``random`` (dropout masks, drawn every step) is *counter-based*: draw number c of a
      generator with seed s depends on (s, c) alone. So the whole state that matters for a
      resumed run is two integers, ``{"seed", "counter"}``, on every device. On NumPy a
      PCG64 keyed by (s, c) makes the samples; on other devices (CuPy, the strict stand-in)
      an integer hash of (element index, s, c) computed with array-API operations makes
      them where they will be used, with no host transfer (``counter_uniform``).
    """

    def __init__(self, seed: int = 0, device: str | None = None):
        self.device = normalize_device(device)
        self.seed = int(seed)
        self.counter = 0
        self._stream = np.random.Generator(np.random.PCG64(self.seed))

    def _out(self, a: Array) -> Array:
        return a if self.device == "cpu" else asarray(a, device=self.device)

    def random(self, shape: tuple[int, ...], dtype: str = "float32") -> Array:
        """Uniform samples in [0, 1), draw number ``counter`` of this seed (then counter+1)."""
        c, self.counter = self.counter, self.counter + 1
        if self.device == "cpu":
            keyed = np.random.Generator(np.random.PCG64([self.seed, c]))
            return keyed.random(shape, dtype=np.dtype(dtype))
        return counter_uniform(namespace_for_device(self.device), self.device, shape,
                               self.seed, c, dtype)  # fmt: skip

    def normal(self, shape: tuple[int, ...], std: float = 1.0, dtype: str = "float32") -> Array:
        """Normal samples with mean 0 and standard deviation ``std`` (the host stream)."""
        a = self._stream.standard_normal(shape, dtype=np.dtype(dtype))
        if std != 1.0:
            a *= std
        return self._out(a)

    def uniform(self, shape: tuple[int, ...], low: float, high: float, dtype: str = "float32"):
        """Uniform samples in [low, high) (the host stream)."""
        a = self._stream.random(shape, dtype=np.dtype(dtype)) * (high - low) + low
        return self._out(a)

    def keep_mask(self, shape: tuple[int, ...], p: float) -> Array:
        """Dropout's mask: bool, True (keep) with probability 1 - p; draw ``counter``.

        On NumPy: u >= p for a float32 uniform u. Elsewhere the hash bits are compared
        with an integer threshold, bits >= round(p * 2^32) (P = 1 - p to 2^-32), which
        skips the three calls that turn bits into floats."""
        if self.device == "cpu":
            return self.random(shape) >= p  # draw ``counter`` as float32 uniforms
        c, self.counter = self.counter, self.counter + 1
        bits = counter_bits(namespace_for_device(self.device), self.device, shape, self.seed, c)
        return bits >= min(round(p * 2**32), 2**32 - 1)

    def state(self) -> dict:
        """A JSON-serialisable snapshot: device, seed, the draw counter and the host
        stream's state."""
        st = self._stream.bit_generator.state
        return {
            "device": self.device,
            "seed": self.seed,
            "counter": self.counter,
            "bit_generator": {
                "state": {k: str(v) for k, v in st["state"].items()},
                "has_uint32": st["has_uint32"],
                "uinteger": st["uinteger"],
            },
        }

    def set_state(self, state: dict) -> None:
        """Restore ``state()``. A snapshot of an older version (no counter) restarts the
        counter at 0: its masks cannot be repeated exactly."""
        self.seed = int(state["seed"])
        self.counter = int(state.get("counter", 0))
        self._stream = np.random.Generator(np.random.PCG64(self.seed))
        bg = state.get("bit_generator")
        if isinstance(bg, dict):
            self._stream.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {k: int(v) for k, v in bg["state"].items()},
                "has_uint32": bg["has_uint32"],
                "uinteger": bg["uinteger"],
            }


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a well-mixed 64-bit integer of ``x`` (host arithmetic)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def _hash32(x: Array) -> Array:
    """lowbias32 (C. Wellons): an invertible uint32 -> uint32 hash with strong avalanche."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


def counter_bits(xp, device: str, shape: tuple[int, ...], seed: int, counter: int) -> Array:
    """32 random bits per element on ``device`` from (seed, counter), counter-based:

        k1, k2 = two 32-bit keys mixed from (seed, counter) on the host
        bits[i] = hash(hash(i ^ k1) ^ k2)        i = 0 .. n-1 (uint32 math)

    Array-API operations only, so it runs on any backend, makes the bits where they are
    used (no host transfer), and repeats exactly from (seed, counter).
    """
    n = 1
    for d in shape:
        n *= int(d)
    key = _mix64((seed & 0xFFFFFFFF) << 32 | (counter & 0xFFFFFFFF))
    k1, k2 = key & 0xFFFFFFFF, key >> 32
    idx = xp.arange(n, dtype=xp.uint32, device=_native_device(device))
    return xp.reshape(_hash32(_hash32(idx ^ k1) ^ k2), shape)


def counter_uniform(xp, device: str, shape: tuple[int, ...], seed: int, counter: int,
                    dtype: str = "float32") -> Array:  # fmt: skip
    """Uniform samples in [0, 1) from ``counter_bits``: u = (bits >> 8) / 2^24. 24 bits per
    sample: the resolution of float32 in [0, 1)."""
    bits = counter_bits(xp, device, shape, seed, counter) >> 8
    return xp.astype(bits, getattr(xp, dtype)) * (1.0 / (1 << 24))


def cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else None. Benchmark ratios
    differ between Intel and AMD machines, so every report names the CPU."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cuda_available() -> bool:
    """True when CuPy is installed and sees a GPU (never raises)."""
    try:
        _cupy()
        return True
    except DeviceError:
        return False


def synchronize(device: str) -> None:
    """Wait for queued GPU work (for honest timings); a no-op on the CPU."""
    device = normalize_device(device)
    if device.startswith("cuda"):
        _cupy().cuda.Device(int(device.split(":")[1])).synchronize()


# ----------------------------------------------------------------------------- BLAS threads

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


@functools.cache
def _openblas_threads_api():
    """(get, set) of the thread count of the OpenBLAS that NumPy loaded, through
    threadpoolctl (the scientific-Python standard for this); None when NumPy's BLAS is not
    OpenBLAS or threadpoolctl is missing. Found once; each get/set is then one C call."""
    import os

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
    api = _openblas_threads_api()
    return None if api is None else int(api[0]())


def set_blas_threads(n: int) -> int | None:
    """Make NumPy's OpenBLAS use ``n`` threads; return the previous count (None, and no
    change, when NumPy's BLAS is not OpenBLAS)."""
    api = _openblas_threads_api()
    if api is None:
        return None
    previous = int(api[0]())
    api[1](int(n))
    return previous


class _CpuLoad:
    """Cores used by OTHER processes: /proc/stat's busy time minus this process's own CPU
    time, over windows of _LOAD_WINDOW_S (0.0 where it cannot be read)."""

    def __init__(self):
        self.last: tuple[float, float, float] | None = None
        self.others = 0.0

    def sample(self) -> float:
        import os
        import time

        now = time.monotonic()
        if self.last is not None and now - self.last[0] < _LOAD_WINDOW_S:
            return self.others
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return 0.0  # not Linux: no way to tell, keep the configured threads
        all_busy = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # - idle
        own = sum(os.times()[:2])
        if self.last is not None:
            t0, all0, own0 = self.last
            self.others = max(0.0, ((all_busy - all0) - (own - own0)) / (now - t0))
        self.last = (now, all_busy, own)
        return self.others


_cpu_load = _CpuLoad()


def gemm_threads(configured: int, multiply_adds: int) -> int:
    """BLAS threads for one product: 1 when small, else at most the cores others leave free."""
    import os

    if configured <= 1 or multiply_adds <= SMALL_GEMM:
        return 1
    free = (os.cpu_count() or 1) - _cpu_load.sample()
    return max(1, min(configured, int(free + 0.5)))


_gemm_tuning = False  # set by tune_host(): the library alone changes no thread settings


def matmul(xp, a: Array, b: Array) -> Array:
    """``xp.matmul(a, b)``; after ``tune_host()``, on NumPy with OpenBLAS, with the thread
    count of ``gemm_threads`` (see SMALL_GEMM above). Otherwise plain ``xp.matmul``."""
    if not _gemm_tuning or type(a) is not np.ndarray:
        return xp.matmul(a, b)
    api = _openblas_threads_api()
    if api is None:
        return xp.matmul(a, b)
    threads = api[0]()
    use = gemm_threads(threads, a.shape[-2] * a.shape[-1] * b.shape[-1])
    if use == threads:
        return xp.matmul(a, b)
    api[1](use)
    try:
        return xp.matmul(a, b)
    finally:
        api[1](threads)


# ----------------------------------------------------------------------------- host memory

# glibc returns large freed buffers (mmap'd, or the top of the heap) to the OS, and the next
# array of that size page-faults on every 4 KiB page as it is first written. A training
# step frees and makes hundreds of such arrays; on this (virtual) machine the faults cost
# 20-25% of a tiny step. So, on glibc, buffers below MMAP_MAX_BYTES come from the heap and
# up to TRIM_BYTES of freed heap stays with the process for the next step. Opt out with
# MINITRANSFORMER_MALLOC=default. Importing the library changes none of this: the CLI (which
# owns its process) calls tune_host(); a program that wants the same calls it explicitly.
MMAP_MAX_BYTES, TRIM_BYTES = 64 << 20, 512 << 20


def _keep_freed_memory() -> bool:
    import ctypes
    import os
    import sys

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


malloc_tuned = False


def tune_host() -> dict[str, bool]:
    """Tune THIS process for training on the CPU (process-wide, so never done at import):
    glibc keeps freed buffers (see MMAP_MAX_BYTES), and NumPy products choose their BLAS
    thread count per product (see SMALL_GEMM). The CLI calls it; returns what was done."""
    global malloc_tuned, _gemm_tuning
    if not malloc_tuned:
        malloc_tuned = _keep_freed_memory()
    _gemm_tuning = _openblas_threads_api() is not None
    return {"malloc": malloc_tuned, "gemm_threads": _gemm_tuning}


# ----------------------------------------------------------------------------- default generators

_generators: dict[str, Generator] = {}
_base_seed = 0


def manual_seed(seed: int) -> None:
    """Seed the default generator of every device (dropout, initialisation)."""
    global _base_seed
    _base_seed = int(seed)
    _generators.clear()


def default_generator(device: str) -> Generator:
    """The generator ops use on ``device`` when none is passed (see ``manual_seed``)."""
    device = normalize_device(device)
    if device not in _generators:
        _generators[device] = Generator(_base_seed, device)
    return _generators[device]
