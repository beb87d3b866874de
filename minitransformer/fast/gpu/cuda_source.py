"""The CUDA C sources of the GPU kernels (``fast/cuda/*.cu``), and their one-time build.

Each fused GPU kernel is readable CUDA C in a file of its own under ``fast/cuda/``, named
after the reference it replaces (``layer_norm.cu`` beside ``ops/layernorm.py``). The files
are plain CUDA C with ``extern "C"`` entry points and no system ``#include`` (a shared
header of this folder, ``block_reduce.cuh``, is inlined by ``source``): the same text is
compiled by CuPy's NVRTC at run time (``kernel``) and by ``nvcc -ptx`` in the tests, so a
typo fails CI on a machine with no GPU.

    kernel("layer_norm.cu", "layer_norm_forward_f32")   # a cupy.RawKernel, built once

Floors: imports NumPy and (lazily, on a GPU) CuPy only.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import numpy as np

SOURCES = Path(__file__).parents[1] / "cuda"  # fast/cuda/

# the C++ standard NVRTC and nvcc compile the sources with (the same for both)
OPTIONS = ("--std=c++17",)
# what CuPy appends to every RawModule's options (cupy/cuda/compiler.py), after ours, so it
# wins: float32 subnormals are flushed to zero in every kernel that runs. The compile tests
# build with OPTIONS + CUPY_APPENDS: the code that runs.
CUPY_APPENDS = ("-ftz=true",)

_ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


def files() -> list[str]:
    """The names of the CUDA source files (``layer_norm.cu``, ...), sorted."""
    return sorted(p.name for p in SOURCES.glob("*.cu"))


_LOCAL_INCLUDE = re.compile(r'^#include\s+"([\w.]+)".*$', flags=re.M)


def source(file: str) -> str:
    """The text of ``fast/cuda/<file>``, with each ``#include "NAME.cuh"`` line replaced
    by the text of ``fast/cuda/NAME.cuh`` (the shared block reductions): NVRTC is given
    one text and no folder to look in, where nvcc finds the header next to the file."""
    text = (SOURCES / file).read_text(encoding="utf-8")
    return _LOCAL_INCLUDE.sub(lambda m: (SOURCES / m.group(1)).read_text(encoding="utf-8"), text)


def entry_points(text: str) -> list[str]:
    """The ``extern "C" __global__`` kernel names a CUDA source defines. A macro that stamps
    out one kernel per dtype must spell the whole ``extern "C" __global__ void NAME##_f32(``
    line out per dtype, or list the names in a comment ``// kernels: a_f32 a_f64``, so that
    the names can be read without a preprocessor."""
    names = _ENTRY.findall(text)
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("// kernels:"):
            names += line.split(":", 1)[1].split()
    return sorted(set(names))


# the dtypes the kernels take, and the suffix of their entry points (NAME_f32, NAME_f64)
SUFFIX = {np.dtype(np.float32): "_f32", np.dtype(np.float64): "_f64"}
DTYPES = frozenset(SUFFIX)  # float32, float64: what the kernels take (the twins' dtypes)


@functools.cache
def _module(file: str) -> Any:
    import cupy

    return cupy.RawModule(code=source(file), options=OPTIONS)


@functools.cache
def kernel(file: str, name: str) -> Any:
    """The kernel ``name`` of ``fast/cuda/<file>`` as a ``cupy.RawKernel``: the file is
    compiled once per process (NVRTC; CuPy caches the binary on disk), each kernel looked
    up once."""
    return _module(file).get_function(name)


def kernel_for(file: str, name: str, dtype: Any) -> Any:
    """The kernel ``name`` + ``SUFFIX[dtype]`` of ``fast/cuda/<file>`` (built once)."""
    return kernel(file, name + SUFFIX[dtype])


def launch_rows(kernel: Any, rows: int, block: int, args: tuple) -> None:
    """One block per row: ``kernel`` over ``rows`` rows (none: no launch, CUDA refuses an
    empty grid; the outputs, made with ``cupy.empty``, are then empty too)."""
    if rows:
        kernel((rows,), (block,), args)


def block_size(n: int) -> int:
    """Threads per block for a row of n elements: 128 up to 512 elements, 256 up to 4096,
    else 1024 (each thread then handles at most ~4 elements before the larger blocks)."""
    return 128 if n <= 512 else 256 if n <= 4096 else 1024


BLOCK = 256  # threads per block of the elementwise grid-stride loops (dropout, Adam, clip)
MAX_GRID = 65536  # blocks of those loops at most


def elementwise_grid(n: int) -> int:
    """Blocks for a grid-stride loop over n elements: ceil(n / BLOCK), 1..MAX_GRID."""
    return max(1, min((n + BLOCK - 1) // BLOCK, MAX_GRID))


_TRUE: dict[int, Any] = {}  # device id -> a 0-d True on it (the "no flag" flag)


def true_on(like: Any) -> Any:
    """A 0-d bool True on ``like``'s device (made once per device): the flag of a kernel
    that takes one, where the caller gave none."""
    dev = like.device.id
    t = _TRUE.get(dev)
    if t is None:
        import cupy

        t = _TRUE[dev] = cupy.ones((), dtype=cupy.bool_)
    return t


@functools.cache
def elementwise(in_params: str, out_params: str, operation: str, name: str) -> Any:
    """A ``cupy.ElementwiseKernel`` of a one-line operation written in the twin's own file,
    made once per signature (CuPy compiles it for each dtype on its first call)."""
    import cupy

    return cupy.ElementwiseKernel(in_params, out_params, operation, name)


def contiguous(cp: Any, *arrays: Any) -> list[Any]:
    """The arrays, each made C-contiguous (``cp.ascontiguousarray``, ``cp`` the twin's CuPy)
    only where it is not (None stays None): the common case (the parameters, the kernels'
    own outputs) costs a flag read, not a CuPy call each, and the whole list one call."""
    return [a if a is None or a.flags.c_contiguous else cp.ascontiguousarray(a) for a in arrays]
