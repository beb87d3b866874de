"""Peak-memory meters of the benchmark: how much a worker's steps made it hold at their worst.

On the CPU: how much the worker's peak resident set grew from right after its imports to
the end of the timed steps (Linux: VmHWM reset through /proc/self/clear_refs; elsewhere
the growth of ``ru_maxrss``): the model, the optimizer state, gradients and the largest
step's activations and BLAS buffers, as the OS saw them. (tracemalloc would miss the BLAS
buffers and anything not allocated through Python's allocator.)

On a GPU, peak memory is *device* memory (host RSS says nothing there): what the array
library's caching allocator holds, CuPy's default memory pool (``total_bytes()``; the pool
keeps freed blocks, so what it holds after the steps is the most the steps needed) and
PyTorch's ``torch.cuda.max_memory_reserved()`` after a reset (the same notion).
"""

from __future__ import annotations

import resource
import sys


def _status_mb(field: str) -> float | None:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MiB; None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class _PeakMemory:
    """Peak resident memory added since ``start()``, in MiB.

    On Linux, writing 5 to /proc/self/clear_refs resets the peak (VmHWM) to the current
    resident set, so the peak afterwards minus the resident set at the reset is exactly
    what the model and the steps added at their worst. Elsewhere: the growth of
    ``ru_maxrss``, which underestimates when the new peak stays below an older one.
    """

    def start(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")
            self.method = "VmHWM after a reset (/proc/self/clear_refs) minus VmRSS at the reset"
            self.base = _status_mb("VmRSS")
        except OSError:
            self.base = None
        if self.base is None:
            self.method = "growth of ru_maxrss (a lower bound)"
            self.base = self._maxrss()

    @staticmethod
    def _maxrss() -> float:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, B on macOS
        return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024

    def added(self) -> float:
        peak = _status_mb("VmHWM") if self.method.startswith("VmHWM") else None
        return (peak if peak is not None else self._maxrss()) - self.base


class _DeviceMemory:
    """Peak memory held on a GPU by the caching allocator since ``start()``, in MiB:
    CuPy's default pool (``total_bytes()``) for ours, ``torch.cuda.max_memory_reserved()``
    for PyTorch."""

    def __init__(self, impl: str) -> None:
        self.impl = impl

    def start(self) -> None:
        if self.impl.startswith("torch"):
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_reserved()
            self.method = "torch.cuda.max_memory_reserved() growth (device memory)"
        else:
            import cupy

            self.pool = cupy.get_default_memory_pool()
            self.base = self.pool.total_bytes()
            self.method = "CuPy default memory pool total_bytes() growth (device memory)"

    def added(self) -> float:
        if self.impl.startswith("torch"):
            import torch

            peak = torch.cuda.max_memory_reserved()
        else:
            peak = self.pool.total_bytes()
        return (peak - self.base) / 2**20


def memory_meter(impl: str, device: str) -> _PeakMemory | _DeviceMemory:
    """The right peak-memory meter for ``impl`` on ``device``: device memory on a GPU,
    the process's resident set elsewhere (NumPy, and the strict test device, live in host
    memory)."""
    return _DeviceMemory(impl) if device.startswith("cuda") else _PeakMemory()
