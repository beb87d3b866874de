"""Every CUDA source of the GPU kernels compiles with NVRTC, the run-time compiler CuPy uses
(``cupy.RawModule``), as well as with nvcc (test_cuda_compile.py). The two differ: nvcc puts
the CUDA headers in front of every file, NVRTC gives a file nothing but its built-in
functions, so a source that nvcc takes can still fail on a GPU the first time it is built.
NVRTC needs no GPU to compile (the architecture is named, ``-arch=compute_90``), so this
runs here: the library comes from the ``nvidia-cuda-nvrtc`` wheel of the dev extra (Linux),
or a CUDA toolkit. Skipped, with the reason, where neither is present."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
from pathlib import Path

import pytest

from minitransformer.fast.gpu import cuda_source

ARCHS = ("compute_90", "compute_80")


def _find_nvrtc() -> str | None:
    """The path of libnvrtc: the pip wheel's (nvidia/cu13/lib), a toolkit's, or the loader's."""
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec is not None else []:
        for found in sorted(Path(root).glob("cu*/lib/libnvrtc.so*")):
            if "builtins" not in found.name:
                return str(found)
    for root in sorted(Path("/usr/local").glob("cuda*/lib*")):
        for found in sorted(root.glob("libnvrtc.so*")):
            return str(found)
    return ctypes.util.find_library("nvrtc")


LIBRARY = _find_nvrtc()
needs_nvrtc = pytest.mark.skipif(
    LIBRARY is None, reason="libnvrtc not found: pip install nvidia-cuda-nvrtc (the dev extra)"
)


def nvrtc_compile(text: str, name: str, arch: str) -> tuple[int, str]:
    """NVRTC's result code (0: compiled) and its log for one source, with the options CuPy
    compiles with (``cuda_source.OPTIONS`` and the ``-ftz=true`` it appends) for the
    architecture named."""
    lib = ctypes.CDLL(LIBRARY)
    prog = ctypes.c_void_p()
    made = lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), name.encode(), 0, None, None)
    assert made == 0, f"nvrtcCreateProgram returned {made}"
    options = [*cuda_source.OPTIONS, *cuda_source.CUPY_APPENDS, f"-arch={arch}"]
    argv = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    try:
        result = lib.nvrtcCompileProgram(prog, len(options), argv)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        return result, log.value.decode(errors="replace").strip()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("file", cuda_source.files())
def test_each_cuda_source_compiles_with_nvrtc_as_cupy_builds_it(file, arch):
    result, log = nvrtc_compile(cuda_source.source(file), file, arch)
    assert result == 0 and not log, f"NVRTC -arch={arch} {file}:\n{log}"


@needs_nvrtc
def test_the_nvrtc_check_fails_what_only_nvcc_takes():
    """A header include (nvcc finds it, NVRTC does not) and an undefined name both fail; a
    source with only built-ins compiles."""
    good = 'extern "C" __global__ void f(float* x) { x[0] = expf(x[0]) + fmaxf(x[0], 1.0f); }'
    assert nvrtc_compile(good, "good.cu", "compute_90") == (0, "")
    include = "#include <cmath>\n" + good
    result, log = nvrtc_compile(include, "include.cu", "compute_90")
    assert result != 0 and "cmath" in log
    typo = good.replace("expf", "expff")
    result, log = nvrtc_compile(typo, "typo.cu", "compute_90")
    assert result != 0 and "expff" in log


def test_a_shared_header_is_inlined_for_nvrtc():
    """``#include "block_reduce.cuh"`` (nvcc finds it beside the file) becomes the header's
    text in what NVRTC is given: no include is left, the reductions are defined once."""
    for file in cuda_source.files():
        text = cuda_source.source(file)
        assert not any(line.lstrip().startswith("#include") for line in text.splitlines()), file
        if '#include "block_reduce.cuh"' in (cuda_source.SOURCES / file).read_text():
            assert text.count("T block_reduce(") == 1, file
