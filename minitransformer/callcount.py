"""Count what one training step costs in calls: Python calls, and array-library calls.

On a GPU every array call is a kernel launch (~12 µs for CuPy), and on any device every
Python call is interpreter time, so at small sizes a step's speed is set by these counts,
not by its arithmetic. Two counts for one step of the Trainer (the copy task, ``tiny``):

- ``python_calls``: every call cProfile sees (Python functions and C builtins), on NumPy.
- ``array_calls``: calls from outside the array library into it, on the array-api-strict
  stand-in, where every array operation (functions and operators such as ``a * b``) is a
  visible Python call. Attribute reads (``.shape``, ``.dtype``, ``.device``) and the
  library's own internal calls are not counted: on CuPy they launch nothing.

    python -m minitransformer.callcount          # prints both counts for one tiny step
    python -m minitransformer.callcount --device cuda:0   # the same step's CuPy calls on a GPU

On a GPU (``count_cuda_step_calls``) three counts of the same step, each of what it can see:

- ``cupy_calls``: calls from outside CuPy into CuPy that ``sys.setprofile`` sees: CuPy's
  Python functions (``cupy.sum``, ``cupy.zeros``, ...) and C-level builtins and ndarray
  methods (``x.reshape``, ``x.astype``). Not seen: ufunc objects (``cupy.exp(x)``) and
  operators (``a * b``), which Python calls without a profile event.
- ``allocations``: arrays CuPy's memory pool hands out (a ``MemoryHook``): about one per
  launch that makes a new array, operators and ufuncs included; in-place ops and views
  are not counted.
- ``kernel_launches``: kernels the GPU ran, counted with CUPTI's activity API (one record per
  kernel: CuPy's, cuBLAS's and CUB's alike) through ctypes where ``libcupti`` is found, with
  ``copies`` (memcpy and memset records) beside it, and the launch calls each API saw
  (``driver_api_launches``: CuPy's kernels; ``runtime_api_launches``: cuBLAS and CUB) as a
  cross-check; None with the reason otherwise. The figure the launch target is about.
  ``probe_launches`` shows the counter counting 10 matmuls, 10 adds and 10 sums.

``tests/test_callcount.py`` pins a budget for both, so a regression fails CI. A tool on
the commands' floor, above the Trainer it measures.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import ctypes.util
import json
import os
import pstats
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import backend, kernels
from .backend.devices import cupy_module
from .errors import DeviceError
from .train import TrainConfig, Trainer

# Reads of array attributes and the strict library's Device objects: free on a GPU.
_NOT_CALLS = {
    "shape",
    "ndim",
    "dtype",
    "device",
    "size",
    "T",
    "mT",
    "__repr__",
    "__hash__",
    "__len__",
    "__init__",
    "_new",
}
_NOT_METHODS = ("Device.", "_DType.", "DType.")  # array-api-strict's, free on a GPU


def _trainer(device: str, tmp: str, dropout: float) -> Trainer:
    """A Trainer of the copy task on ``device``, writing (nothing it keeps) under ``tmp``."""
    cfg = TrainConfig(
        task="copy",
        device=device,
        out=tmp,
        progress=False,
        plots=False,
        dropout=dropout,
        task_knobs=dict(n_train=256, n_valid=8, n_test=8),
    )
    return Trainer(cfg)


def count_step_calls(dropout: float = 0.1, warmup_steps: int = 3) -> dict[str, Any]:
    """Python calls (NumPy) and array calls (strict stand-in) of one tiny training step."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer("cpu", tmp, dropout)
        batches = [next(trainer.stream) for _ in range(warmup_steps + 1)]
        for b in batches[:-1]:
            trainer.train_step(b)
        profile = cProfile.Profile()
        profile.enable()
        trainer.train_step(batches[-1])
        profile.disable()
        out["python_calls"] = pstats.Stats(profile).total_calls
        try:
            import array_api_strict  # noqa: F401
        except ImportError:
            return out
        trainer = _trainer("strict:device1", tmp, dropout)
        for b in batches[:-1]:
            trainer.train_step(b)
        counts = _calls_into(("array_api_strict",), lambda: trainer.train_step(batches[-1]))
        out["array_calls"] = sum(counts.values())
        out["array_calls_by_name"] = dict(counts.most_common())
    return out


def _calls_into(prefixes: tuple[str, ...], run: Callable[[], Any]) -> Counter[str]:
    """The calls, by name, that code outside the modules named ``prefixes...`` makes into
    them while ``run()`` runs: Python functions ("call" events) and C functions ("c_call":
    CuPy's ufuncs and Cython methods), not the library's calls to itself, attribute reads
    (``_NOT_CALLS``) or array-api-strict's Device and DType methods."""
    counts: Counter[str] = Counter()

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            if not frame.f_globals.get("__name__", "").startswith(prefixes):
                return
            back = frame.f_back
            if back is not None and back.f_globals.get("__name__", "").startswith(prefixes):
                return
            code = frame.f_code
            if code.co_name in _NOT_CALLS or code.co_qualname.startswith(_NOT_METHODS):
                return
            counts[code.co_name] += 1
        elif event == "c_call":  # frame: the caller
            if frame.f_globals.get("__name__", "").startswith(prefixes):
                return
            module = (
                getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
            )
            if module and module.startswith(prefixes) and arg.__name__ not in _NOT_CALLS:
                counts[arg.__name__] += 1

    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return counts


# ----------------------------------------------------------------------------- on a GPU

_CUPY = ("cupy", "cupyx", "cupy_backends")

# CUPTI callback ids of kernel launches (CUDA 13.0's cupti_driver_cbid.h, cupti_runtime_cbid.h).
# Driver API: cuLaunch, cuLaunchGrid, cuLaunchKernel(_ptsz), cuLaunchCooperativeKernel(_ptsz,
# MultiDevice), cuGraphLaunch(_ptsz), cuLaunchKernelEx(_ptsz). CuPy's own kernels come this way.
_LAUNCH_CBIDS = frozenset({115, 116, 307, 442, 477, 478, 480, 514, 515, 652, 653})
# Runtime API: cudaLaunchKernel(_ptsz), cudaLaunchCooperativeKernel(_ptsz), cudaGraphLaunch
# (_ptsz), cudaLaunchKernelExC(_ptsz). cuBLAS (every matmul) and CUB (CuPy's reductions) come
# this way: a driver-API subscriber alone does not see them.
_RUNTIME_LAUNCH_CBIDS = frozenset({211, 214, 269, 270, 311, 312, 430, 431})
_CUPTI_DOMAIN_DRIVER_API, _CUPTI_DOMAIN_RUNTIME_API, _CUPTI_API_ENTER = 1, 2, 0
# CUPTI activity kinds (cupti_activity.h): what the GPU ran, one record each
_KIND_MEMCPY, _KIND_MEMSET, _KIND_CONCURRENT_KERNEL = 1, 2, 10
_CUPTI_FLUSH_FORCED = 1


def _libcupti() -> Any:
    """CUPTI (the CUDA profiling library) through ctypes, or a string saying why not. The
    copy that ships with CuPy's CUDA wheels (nvidia-cuda-cupti) is tried first."""
    names = [ctypes.util.find_library("cupti"), "libcupti.so", "libcupti.so.13", "libcupti.so.12"]
    try:
        import nvidia  # the CUDA wheels' namespace package (nvidia-cuda-cupti)

        names[:0] = sorted(
            (str(f) for root in nvidia.__path__ for f in Path(root).glob("*/lib/libcupti.so*")),
            reverse=True,  # the newest first
        )
    except ImportError:
        pass
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root:
            for sub in ("lib", "lib64", "extras/CUPTI/lib64", "targets/x86_64-linux/lib"):
                names.append(str(Path(root, sub, "libcupti.so")))
    for name in names:
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    return "libcupti not found (set CUDA_PATH to the CUDA toolkit)"


class _DriverLaunches:
    """``with _DriverLaunches() as n:``, then what CUPTI counted inside the block:

    - ``n.launches``: kernels the GPU ran (CUPTI's activity records of kind
      CONCURRENT_KERNEL: every kernel once, however it was launched: CuPy's through the
      driver API, cuBLAS's and CUB's through the runtime API, and inside libraries);
    - ``n.copies``: memory copies and memsets the GPU ran (activity records);
    - ``n.driver_launches``, ``n.runtime_launches``: launch calls made through each API
      (callbacks; a cross-check: a runtime launch may also show as a driver call);
    - ``n.driver_calls``: every driver-API call.

    ``n.launches`` is None and ``n.why`` says why where CUPTI cannot be used (not found, or
    another profiler holds its one subscriber); the activity counts alone may be missing
    (``n.activity_why``), then ``launches`` is the driver- plus runtime-API launch calls."""

    def __init__(self) -> None:
        self.launches: int | None = None
        self.copies: int | None = None
        self.driver_calls = 0
        self.driver_launches = 0
        self.runtime_launches = 0
        self.records: Counter[int] = Counter()
        self.why = ""
        self.activity_why = ""
        self._lib: Any = None
        self._activity = False
        self._handle = ctypes.c_void_p()
        callback_type = ctypes.CFUNCTYPE(
            None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p
        )
        self._callback = callback_type(self._on_call)  # kept: C holds the pointer

    def _on_call(self, userdata: Any, domain: int, cbid: int, data: Any) -> None:  # noqa: ARG002
        if ctypes.cast(data, ctypes.POINTER(ctypes.c_int))[0] != _CUPTI_API_ENTER:
            return  # CUpti_CallbackData starts with the site: count each call once
        if domain == _CUPTI_DOMAIN_DRIVER_API:
            self.driver_calls += 1
            self.driver_launches += cbid in _LAUNCH_CBIDS
        elif domain == _CUPTI_DOMAIN_RUNTIME_API:
            self.runtime_launches += cbid in _RUNTIME_LAUNCH_CBIDS

    def __enter__(self) -> _DriverLaunches:
        lib = _libcupti()
        if isinstance(lib, str):
            self.why = lib
            return self
        status = lib.cuptiSubscribe(ctypes.byref(self._handle), self._callback, None)
        if status == 0:
            status = lib.cuptiEnableDomain(1, self._handle, _CUPTI_DOMAIN_DRIVER_API)
            if status == 0:
                status = lib.cuptiEnableDomain(1, self._handle, _CUPTI_DOMAIN_RUNTIME_API)
            if status != 0:
                lib.cuptiUnsubscribe(self._handle)
        if status != 0:
            self.why = f"CUPTI refused (CUptiResult {status}: no driver, or another profiler)"
            return self
        self._lib, self.launches = lib, 0
        status = _ACTIVITY.register(lib, self.records)
        for kind in (_KIND_CONCURRENT_KERNEL, _KIND_MEMCPY, _KIND_MEMSET):
            if status == 0:
                status = lib.cuptiActivityEnable(kind)
        if status != 0:
            self.activity_why = f"CUPTI's activity API refused (CUptiResult {status})"
        self._activity = status == 0
        return self

    def __exit__(self, *exc: object) -> None:
        lib = self._lib
        if lib is None:
            return
        if self._activity:
            lib.cuptiActivityFlushAll(_CUPTI_FLUSH_FORCED)  # the records reach _completed
            for kind in (_KIND_CONCURRENT_KERNEL, _KIND_MEMCPY, _KIND_MEMSET):
                lib.cuptiActivityDisable(kind)
            lib.cuptiActivityFlushAll(_CUPTI_FLUSH_FORCED)
            _ACTIVITY.records = None
        lib.cuptiEnableDomain(0, self._handle, _CUPTI_DOMAIN_DRIVER_API)
        lib.cuptiEnableDomain(0, self._handle, _CUPTI_DOMAIN_RUNTIME_API)
        lib.cuptiUnsubscribe(self._handle)
        self._lib = None
        if self._activity:
            self.launches = self.records[_KIND_CONCURRENT_KERNEL]
            self.copies = self.records[_KIND_MEMCPY] + self.records[_KIND_MEMSET]
        else:
            self.launches = self.driver_launches + self.runtime_launches


class _ActivityBuffers:
    """CUPTI's activity buffers: CUPTI asks for an empty buffer, fills it with records, and
    hands it back; each record starts with its kind (a uint32), which is counted into
    ``records``. The two callbacks are registered once per process (CUPTI keeps them)."""

    def __init__(self) -> None:
        self.records: Counter[int] | None = None
        self._lib: Any = None
        self._buffers: dict[int, Any] = {}  # kept alive while CUPTI writes into them
        requested = ctypes.CFUNCTYPE(
            None,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_size_t),
        )
        completed = ctypes.CFUNCTYPE(
            None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
            ctypes.c_size_t,
        )  # fmt: skip
        self._requested = requested(self._on_requested)
        self._completed = completed(self._on_completed)

    def register(self, lib: Any, records: Counter[int]) -> int:
        """Count the next records into ``records``; CUPTI's status (0: registered)."""
        self.records = records
        if self._lib is None:
            status = lib.cuptiActivityRegisterCallbacks(self._requested, self._completed)
            if status != 0:
                return status
            self._lib = lib
        return 0

    def _on_requested(self, buffer: Any, size: Any, max_records: Any) -> None:
        block = ctypes.create_string_buffer(1 << 22)  # malloc'd: 16-byte aligned
        address = ctypes.addressof(block)
        self._buffers[address] = block
        buffer[0], size[0], max_records[0] = address, len(block), 0

    def _on_completed(self, context, stream, buffer, size, valid) -> None:  # noqa: ARG002
        record = ctypes.c_void_p()
        while valid and self.records is not None:
            status = self._lib.cuptiActivityGetNextRecord(
                ctypes.c_void_p(buffer), ctypes.c_size_t(valid), ctypes.byref(record)
            )
            if status != 0:  # CUPTI_ERROR_MAX_LIMIT_REACHED: the buffer is read
                break
            self.records[ctypes.cast(record, ctypes.POINTER(ctypes.c_uint32))[0]] += 1
        self._buffers.pop(buffer, None)


_ACTIVITY = _ActivityBuffers()


def probe_launches(device: str = "cuda:0", repeat: int = 10) -> dict[str, Any]:
    """What the launch counter sees of ``repeat`` calls of each kind, alone: a cuBLAS
    matmul, a CuPy elementwise add, a CuPy (CUB) sum. Each should count >= ``repeat``
    kernels: fewer means that kind of launch is missed."""
    cp = cupy_module()
    out: dict[str, Any] = {}
    with cp.cuda.Device(int(backend.normalize_device(device).split(":")[1])):
        a = cp.ones((256, 256), dtype=cp.float32)
        probes = {"matmul": lambda: cp.matmul(a, a), "add": lambda: a + a, "sum": lambda: a.sum()}
        for name, fn in probes.items():
            fn()
            cp.cuda.Device().synchronize()
            with _DriverLaunches() as d:
                for _ in range(repeat):
                    fn()
                cp.cuda.Device().synchronize()
            out[name] = {
                "kernels": d.launches,
                "driver_api": d.driver_launches,
                "runtime_api": d.runtime_launches,
                "why_not": d.why or d.activity_why or None,
            }
    return out


def call_costs(device: str = "cuda:0") -> dict[str, float]:
    """Host microseconds per CuPy call (the launch overhead a step pays per call): an
    elementwise add, a view, a cuBLAS matmul, an allocation, and one fused-kernel wrapper
    (a RawKernel launch; when the fused kernels are registered)."""
    import time

    cp = cupy_module()
    with cp.cuda.Device(int(backend.normalize_device(device).split(":")[1])):
        a = cp.ones((64, 64), dtype=cp.float32)
        calls: dict[str, Callable[[], Any]] = {
            "add": lambda: a + a,
            "reshape (a view)": lambda: a.reshape(4096),
            "matmul 64x64": lambda: cp.matmul(a, a),
            "empty": lambda: cp.empty((64, 64), cp.float32),
        }
        fast = kernels.find(a)
        if fast is not None and hasattr(fast, "softmax"):
            calls["fused softmax"] = lambda: fast.softmax(a, -1)
        out = {}
        for name, fn in calls.items():
            fn()
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            out[name] = round(1e6 * (time.perf_counter() - t0) / 2000, 2)
            cp.cuda.Device().synchronize()
    return out


def count_cuda_step_calls(
    device: str = "cuda:0", dropout: float = 0.1, warmup_steps: int = 3
) -> dict[str, Any]:
    """The CuPy calls, pool allocations and (with CUPTI) kernel launches of one tiny training
    step on ``device`` (see the module doc for what each sees). DeviceError without CuPy
    and a GPU. The kernels' switch (``MT_CUDA_KERNELS``) is as the environment sets it."""
    device = backend.normalize_device(device)
    if not device.startswith("cuda"):
        raise DeviceError(f"count_cuda_step_calls: {device!r} is not a GPU; use 'cuda:N'")
    cp = cupy_module()  # the clear DeviceError without CuPy or a GPU
    from cupy.cuda import memory_hook

    class Allocations(memory_hook.MemoryHook):
        name = "minitransformer.callcount"
        n = 0

        def malloc_postprocess(self, **kwargs: Any) -> None:  # noqa: ARG002
            Allocations.n += 1

    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer(device, tmp, dropout)
        batches = [next(trainer.stream) for _ in range(warmup_steps + 1)]
        for b in batches[:-1]:
            trainer.train_step(b)  # kernels compiled, memory pool warm
        backend.synchronize(device)
        with _DriverLaunches() as driver, Allocations():
            counts = _calls_into(_CUPY, lambda: trainer.train_step(batches[-1]))
            backend.synchronize(device)
    return {
        "device": device,
        "cuda_kernels": kernels.cuda_kernels_enabled(),
        "cupy_version": cp.__version__,
        "cupy_calls": sum(counts.values()),
        "cupy_calls_by_name": dict(counts.most_common()),
        "allocations": Allocations.n,
        "kernel_launches": driver.launches,
        "copies": driver.copies,
        "driver_api_launches": driver.driver_launches if driver.launches is not None else None,
        "runtime_api_launches": driver.runtime_launches if driver.launches is not None else None,
        "driver_calls": driver.driver_calls if driver.launches is not None else None,
        "kernel_launches_why_not": driver.why or driver.activity_why or None,
    }


def _main_cuda(device: str) -> int:
    try:
        counts = count_cuda_step_calls(device)
        counts["probe"] = probe_launches(device)
        counts["call_us"] = call_costs(device)
    except DeviceError as e:
        print(f"callcount --device {device}: no GPU to count on here ({e})")
        return 2
    launches = counts["kernel_launches"]
    print(
        f"one tiny training step on {counts['device']} (copy task, dropout 0.1, "
        f"MT_CUDA_KERNELS={'1' if counts['cuda_kernels'] else '0'}, CuPy "
        f"{counts['cupy_version']}): {counts['cupy_calls']} CuPy calls seen by the profiler, "
        f"{counts['allocations']} pool allocations, "
        + (
            f"{launches} kernel launches and {counts.get('copies')} copies run by the GPU (CUPTI; "
            f"launch calls: {counts.get('driver_api_launches')} driver API, "
            f"{counts.get('runtime_api_launches')} runtime API)"
            if launches is not None
            else f"kernel launches not counted: {counts['kernel_launches_why_not']}"
        )
    )
    top = list(counts["cupy_calls_by_name"].items())[:12]
    if top:
        print("most frequent CuPy calls: " + ", ".join(f"{k} {v}" for k, v in top))
    probe = counts.get("probe") or {}
    if probe:
        print(
            "the counter's probe, 10 calls each: "
            + ", ".join(f"{k} {v['kernels']} kernels" for k, v in probe.items())
        )
    print(
        "host microseconds per CuPy call: "
        + ", ".join(f"{k} {v}" for k, v in (counts.get("call_us") or {}).items())
    )
    # the same counts as one JSON line, for tools (gpucheck reads it)
    print(json.dumps({k: v for k, v in counts.items() if k != "cupy_calls_by_name"}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m minitransformer.callcount [--device cuda:0]``: print the counts of one tiny
    step: on the CPU (default) Python calls and array calls; on a GPU its CuPy calls."""
    parser = argparse.ArgumentParser(prog="python -m minitransformer.callcount")
    parser.add_argument(
        "--device", default="cpu", help="cpu (default: Python and strict array calls) or cuda:N"
    )
    args = parser.parse_args(argv)
    try:
        device = backend.normalize_device(args.device)
    except DeviceError as e:
        parser.error(str(e))
    if device.startswith("cuda"):
        return _main_cuda(device)
    if device != "cpu":
        parser.error(f"--device {args.device}: use cpu or cuda:N")
    counts = count_step_calls()
    print(
        f"one tiny training step (copy task, dropout 0.1): {counts['python_calls']} Python "
        f"calls (NumPy), {counts.get('array_calls', 'n/a')} array calls (strict stand-in)"
    )
    top = list(counts.get("array_calls_by_name", {}).items())[:12]
    if top:
        print("most frequent array calls: " + ", ".join(f"{k} {v}" for k, v in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
