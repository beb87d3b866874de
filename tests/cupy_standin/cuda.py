"""The stand-in's ``cupy.cuda``: one device, streams whose capture records calls
(``record.py``), graphs that run them again, memory pools that count what they are asked
for, events that are always done."""

from __future__ import annotations

import contextlib
import types

import numpy as _np

from .record import COUNT, _state


class Device:
    """``cupy.cuda.Device``: always GPU 0."""

    def __init__(self, id=0):
        self.id = 0 if id is None else id.id if isinstance(id, Device) else int(id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def synchronize(self):
        pass

    def use(self):
        pass

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("cuda", self.id))

    def __repr__(self):
        return f"<CUDA Device {self.id}>"

    compute_capability = "90"


_DEVICE0 = Device(0)


class _Memory:
    """``ndarray.data``: the address (``ptr``) of the first element."""

    def __init__(self, a):
        self.ptr = a.__array_interface__["data"][0]


class MemoryPool:
    """Counts the bytes its ``malloc`` was asked for (the arrays themselves are NumPy's);
    never frees them (``free_bytes`` 0)."""

    def __init__(self, allocator=None):
        self.held = 0

    def malloc(self, nbytes):
        self.held += nbytes
        return _Memory(_np.zeros(0))

    def free_bytes(self):
        return 0

    def used_bytes(self):
        return self.held

    def total_bytes(self):
        return self.held

    def free_all_blocks(self):
        self.held = 0


@contextlib.contextmanager
def _using_allocator(malloc=None):
    before = _state.allocator
    _state.allocator = malloc
    try:
        yield
    finally:
        _state.allocator = before


class Graph:
    """A captured step: the recorded calls, run again in order by ``launch``."""

    def __init__(self, calls):
        self.calls = calls

    def launch(self, stream=None):
        COUNT["launch:graph.launch"] += 1
        _state.depth += 1
        try:
            for call in self.calls:
                call()
        finally:
            _state.depth -= 1


class Stream:
    def __init__(self, non_blocking=False, null=False, ptds=False):
        self.ptr = 0 if null else id(self)

    def __enter__(self):
        _streams.append(self)
        return self

    def __exit__(self, *exc):
        _streams.pop()

    def begin_capture(self, mode=None):
        if _state.capture is not None:
            raise RuntimeError("stand-in: a capture is already running")
        _state.capture = []

    def end_capture(self):
        calls, _state.capture = _state.capture, None
        if calls is None:
            raise RuntimeError("stand-in: end_capture without begin_capture")
        return Graph(calls)

    def is_capturing(self):
        return _state.capture is not None

    def synchronize(self):
        pass

    def use(self):
        pass


class Event:
    def __init__(self, *args, **kw):
        self.done = True

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass


_streams = [Stream(null=True)]

cuda = types.ModuleType("cupy.cuda")
cuda.__path__ = []  # a package, for "from cupy.cuda.x import y"
cuda.Device, cuda.Stream, cuda.Event, cuda.MemoryPool = Device, Stream, Event, MemoryPool
cuda.Graph = Graph
cuda.is_available = lambda: True
cuda.get_current_stream = lambda: _streams[-1]
cuda.using_allocator = _using_allocator
cuda.nccl = types.SimpleNamespace(available=False)
runtime = cuda.runtime = types.ModuleType("cupy.cuda.runtime")
runtime.getDevice = lambda: 0
runtime.getDeviceCount = lambda: 1
runtime.memGetInfo = lambda: (40 << 30, 80 << 30)  # (free, total) bytes
runtime.runtimeGetVersion = lambda: 13020
runtime.driverGetVersion = lambda: 13000
runtime.getDeviceProperties = lambda i: {"name": b"stand-in (NumPy)", "totalGlobalMem": 80 << 30}
cuda.device = types.ModuleType("cupy.cuda.device")
cuda.device.Device = Device
memory_hook = cuda.memory_hook = types.ModuleType("cupy.cuda.memory_hook")
memory_hook.MemoryHook = type("MemoryHook", (contextlib.nullcontext,), {"name": "hook"})
SUBMODULES = {"cupy.cuda": cuda, "cupy.cuda.runtime": runtime, "cupy.cuda.device": cuda.device,
              "cupy.cuda.memory_hook": memory_hook}  # fmt: skip
