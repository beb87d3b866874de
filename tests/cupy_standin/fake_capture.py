"""A lighter CuPy for the graph runners' own tests (``tests/fast/test_cuda_graph.py`` for
``fast/gpu/cuda_graph.py``, ``tests/test_decode_graph.py`` for ``fast/gpu/decode_graph.py``):
only the calls the runners make, on plain NumPy arrays.

Unlike the counting stand-in (this package's ``cuda.Stream``, whose capture records the
stand-in's calls), a capture here records nothing: the captured body's Python runs for real,
its arithmetic too (plain NumPy arrays have no kernels to record). What a graph's ``launch``
does is the test's: ``fake_cupy(replay)`` calls ``replay(frame)`` at each launch, ``frame``
being the local variables of the runner's function that ended the capture (its ``_capture``).

    launches = []
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(lambda frame: launches.append(1)))
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable

import numpy as np

from .cuda import Stream as StandinStream


class CaptureStream(StandinStream):
    """``cupy.cuda.Stream`` whose capture records nothing: ``end_capture`` returns a graph
    whose ``launch`` calls ``replay`` with the capturing frame's local variables (as they
    were when the capture ended), or raises ``RuntimeError(fail)`` where ``fail`` is set.
    ``fake_cupy`` makes a subclass for each fake, with its ``replay`` and ``fail``."""

    replay: Callable[[dict], None] = staticmethod(lambda frame: None)
    fail: str | None = None

    def begin_capture(self, mode=None):
        pass

    def end_capture(self):
        if self.fail is not None:
            raise RuntimeError(self.fail)
        frame = dict(sys._getframe(1).f_locals)  # the runner's _capture, at the capture's end
        return types.SimpleNamespace(launch=lambda: self.replay(frame))


class DeviceArray(np.ndarray):
    """A NumPy array with CuPy's ``set`` (a host-to-device copy)."""

    def set(self, a):
        self[...] = a


class Pool:
    """CuPy's MemoryPool, counted: ``malloc`` makes a new block unless a freed one fits
    (blocks are freed when the returned pointer is dropped)."""

    def __init__(self):
        self.blocks: list[list] = []  # [nbytes, in use]

    def malloc(self, nbytes):
        for block in self.blocks:
            if not block[1] and block[0] >= nbytes:
                break
        else:
            block = [nbytes, False]
            self.blocks.append(block)
        block[1] = True
        return _Pointer(block)

    def total_bytes(self):
        return sum(b[0] for b in self.blocks)

    def free_bytes(self):
        return sum(b[0] for b in self.blocks if not b[1])


class _Pointer:
    def __init__(self, block):
        self.block = block

    def __del__(self):
        self.block[1] = False


def fake_cupy(
    replay: Callable[[dict], None], free: int = 2**30, fail: str | None = None
) -> types.SimpleNamespace:
    """CuPy's calls that the graph runners make, on NumPy: ``cuda.Stream`` a
    ``CaptureStream`` class (``replay`` at each graph launch; ``fail``: end_capture raises), a
    counted ``Pool``, the device with ``free`` bytes free, ``zeros`` of ``DeviceArray``s;
    ``alloc(n)`` takes n bytes from the allocator of the ``using_allocator`` block it runs
    in, as a captured body's allocation would."""

    @contextlib.contextmanager
    def using_allocator(malloc):
        fake.allocator = malloc  # what the body's fake.alloc(n) calls while captured
        try:
            yield
        finally:
            fake.allocator = None

    class Stream(CaptureStream):
        """This fake's streams (a class of its own: a test may patch its methods)."""

    Stream.replay, Stream.fail = staticmethod(replay), fail
    cuda = types.SimpleNamespace(
        MemoryPool=Pool, Stream=Stream, using_allocator=using_allocator,
        Device=lambda: types.SimpleNamespace(synchronize=lambda: None),
        runtime=types.SimpleNamespace(memGetInfo=lambda: (free, 2 * free)),
    )  # fmt: skip
    zeros = lambda shape, dtype: np.zeros(shape, dtype).view(DeviceArray)  # noqa: E731
    fake = types.SimpleNamespace(zeros=zeros, uint8=np.uint8, asarray=np.asarray, cuda=cuda,
                                 allocator=None, alloc=lambda n: fake.allocator(n))  # fmt: skip
    return fake
