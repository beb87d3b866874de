"""The gradient all-reduce of ranks on GPUs: ``NcclAllreduce`` (each rank its own GPU) and
``HostStagedAllreduce`` (ranks that share a GPU, or lack NCCL); transport.py decides which.

Both compute what the CPU path computes, ``g ← Σ_r g_r`` in place on the flat gradient
buffer, and nothing more: there is NO division by the number of ranks, because each rank
scaled its loss by its share of the tokens, n_r / n, before backward (the package doc), so
the sum already is the whole batch's gradient.

NCCL (``cupy.cuda.nccl``). Rank 0 makes the communicator's unique id
(``nccl.get_unique_id()``), MPI broadcasts it, and every rank builds
``NcclCommunicator(size, uid, rank)`` with its GPU current. Each step, one
``allReduce(ptr, ptr, count, dtype, NCCL_SUM, stream)`` per buffer, in place (send and
receive the same pointer), queued on the current stream: the host does not wait for it, as
it does not wait for any kernel. So that a stuck peer cannot hang a rank forever (the GPU
would spin in the collective and the next host read would never return), a CUDA event is
recorded after the all-reduce and polled at the next step's all-reduce (one step later: the
GPU has normally long passed it) with the collective timeout: past it, CollectiveTimeout.

Host-staged. Download the buffer into a reused (pinned) host buffer, MPI Allreduce on the
host copy with the collective timeout (waiting.py), upload the sum. The download waits for
the GPU (a host sync each step) and both copies cross PCIe: correct, not fast.

CuPy is imported only by the functions that need it; the classes take their device
operations as arguments, so that the tests run them on NumPy with a fake ``nccl``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .waiting import TIMEOUT_ENV, CollectiveTimeout, Waiter

NCCL_DTYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}


def nccl_dtype(nccl: Any, dtype: Any) -> int:
    """NCCL's code of ``dtype`` (``nccl.NCCL_FLOAT32``: 7, ...); TypeError for another."""
    name = np.dtype(dtype).name
    if name not in NCCL_DTYPES:
        raise TypeError(f"no NCCL all-reduce for gradients of dtype {name}")
    return int(getattr(nccl, NCCL_DTYPES[name]))


class NcclAllreduce:
    """In-place NCCL sum of flat gradient buffers (see the module doc). ``device``: a
    context manager that makes this rank's GPU current (``cupy.cuda.Device(i)``);
    ``pointer(a)``: the device address of an array; ``stream()``: the current stream's
    handle; ``event()``: a new CUDA event (``record()``, ``done``). ``cupy_nccl`` builds
    one with CuPy's."""

    def __init__(self, waiter: Waiter, nccl: Any, device: Any, *, pointer: Any, stream: Any,
                 event: Any):  # fmt: skip
        self.waiter, self.nccl, self.device = waiter, nccl, device
        self.pointer, self.stream, self.event = pointer, stream, event
        uid = nccl.get_unique_id() if waiter.rank == 0 else None
        uid = waiter.bcast(uid, "start (NCCL's unique id)")
        with device:
            self.comm = nccl.NcclCommunicator(waiter.size, uid, waiter.rank)
        self.done: Any = None  # the event recorded after the last all-reduce
        self.last_what = ""

    def __call__(self, buffers: list[Any], what: str) -> None:
        """Queue ``Σ_r buffer`` in place for each buffer on the current stream."""
        with self.device:
            self.wait_previous()
            stream = self.stream()
            for b in buffers:
                code = nccl_dtype(self.nccl, b.dtype)
                ptr = self.pointer(b)
                self.comm.allReduce(ptr, ptr, int(b.size), code, self.nccl.NCCL_SUM, stream)
            if self.done is None:
                self.done = self.event()
            self.done.record()
        self.last_what = what

    def wait_previous(self) -> None:
        """Return once the previous all-reduce completed on the GPU (normally at once);
        CollectiveTimeout after the collective timeout."""
        if self.done is None or self.done.done:
            return
        t0 = time.monotonic()
        while not self.done.done:
            waited = time.monotonic() - t0
            if waited > self.waiter.timeout:
                self.abort()
                raise CollectiveTimeout(
                    f"rank {self.waiter.rank}: the NCCL {self.last_what} did not complete "
                    f"within the collective timeout of {self.waiter.timeout:g} s "
                    f"({TIMEOUT_ENV}): a rank is stuck; ending the job. {self.waiter.after()}"
                )
            time.sleep(min(0.05, max(50e-6, waited / 20)))

    def abort(self) -> None:
        """Abort the communicator (frees a GPU stuck in the collective), if NCCL can."""
        abort = getattr(self.comm, "abort", None)
        if abort is not None:
            try:
                abort()
            except Exception:  # noqa: BLE001 - ending the job anyway
                pass


class HostStagedAllreduce:
    """In-place sum of flat gradient buffers through host memory (see the module doc).
    ``host_empty(shape, dtype)`` allocates a host buffer (pinned on a GPU);
    ``download(device_array, host)`` and ``upload(host, device_array)`` copy."""

    def __init__(self, waiter: Waiter, *, host_empty: Any = np.empty, download: Any = None,
                 upload: Any = None):  # fmt: skip
        self.waiter = waiter
        self.host_empty = host_empty
        self.download = download or (lambda a, host: np.copyto(host, a))
        self.upload = upload or (lambda host, a: np.copyto(a, host))
        self.hosts: dict[int, Any] = {}  # buffer position -> its host copy, reused

    def __call__(self, buffers: list[Any], what: str) -> None:
        """Download each buffer, sum the host copies over MPI, upload the sums."""
        hosts = []
        for k, b in enumerate(buffers):
            host = self.hosts.get(k)
            if host is None or host.shape != tuple(b.shape) or host.dtype != b.dtype:
                host = self.hosts[k] = self.host_empty(tuple(b.shape), np.dtype(b.dtype))
            self.download(b, host)
            hosts.append(host)
        self.waiter.allreduce(hosts, what)
        for host, b in zip(hosts, buffers, strict=True):
            self.upload(host, b)


def cupy_nccl(waiter: Waiter, device: str, nccl: Any) -> NcclAllreduce:
    """``NcclAllreduce`` on GPU ``device`` ("cuda:N") with CuPy's pointers, stream, events."""
    import cupy

    return NcclAllreduce(
        waiter, nccl, cupy.cuda.Device(int(device.split(":")[1])),
        pointer=lambda a: a.data.ptr,
        stream=lambda: cupy.cuda.get_current_stream().ptr,
        event=lambda: cupy.cuda.Event(block=False, disable_timing=True),
    )  # fmt: skip


def cupy_host_staged(waiter: Waiter) -> HostStagedAllreduce:
    """``HostStagedAllreduce`` for CuPy buffers (NumPy ones, on a CPU rank of a mixed job,
    are summed in place): pinned host buffers, ``get(out=)`` and ``set``."""
    import cupyx

    def download(a: Any, host: np.ndarray) -> None:
        if isinstance(a, np.ndarray):
            np.copyto(host, a)
        else:
            a.get(out=host)  # waits for the GPU: the gradient must be complete

    def upload(host: np.ndarray, a: Any) -> None:
        if isinstance(a, np.ndarray):
            np.copyto(a, host)
        else:
            a.set(host)

    return HostStagedAllreduce(waiter, host_empty=cupyx.empty_pinned, download=download,
                               upload=upload)  # fmt: skip
