"""CUPTI, NVIDIA's profiling library, through ctypes: what a GPU ran inside a ``with`` block.

    with LaunchCounter() as n:
        ...                      # GPU work; synchronize before the block ends
    n.launches, n.copies         # kernels and copies the GPU ran (activity records)

Two views of the same work. The **activity API** records every kernel the GPU executes
(CONCURRENT_KERNEL records: CuPy's own kernels, cuBLAS's and CUB's alike) and every memcpy and
memset; these are the true counts. The **callback API** sees the launch *calls*, per API:
the driver API (``cuLaunchKernel``, how CuPy launches its kernels) and the runtime API
(``cudaLaunchKernel``, how cuBLAS and CUB launch theirs); a driver-API subscriber alone misses
every matmul. Measured on an H200: 10 ``cupy.matmul`` of 256 x 256 run 20 kernels, 10 adds 10,
10 sums 20.

Where ``libcupti`` cannot be loaded, or another profiler holds CUPTI's one subscriber, the
counts are None with the reason (``why``): never an error. Used by ``callcount``. Floors:
the standard library only (no CuPy: CUPTI sees the process's CUDA work, whoever made it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections import Counter
from pathlib import Path
from typing import Any

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


def libcupti() -> Any:
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


class LaunchCounter:
    """``with LaunchCounter() as n:``, then what CUPTI counted inside the block:

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

    def __enter__(self) -> LaunchCounter:
        lib = libcupti()
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
