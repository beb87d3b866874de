"""Every CUDA source of the GPU kernels (minitransformer/fast/cuda/*.cu) compiles with
``nvcc -ptx`` for sm_90 (H100) and sm_80 (A100), warnings counted as failures, so a typo
fails CI on a machine with no GPU; the compile check itself is tested on a small valid, a
broken and a warning CUDA snippet. Every ``kernel("FILE.cu", "NAME")`` in the kernel
modules names an entry point of that file. Skipped where nvcc is not on PATH (a learner's
laptop); CI's machines have CUDA 13's nvcc.

The files compile once each, all of them in parallel (two at a time: CI has two cores), in
one session fixture; each test reads its result."""

from __future__ import annotations

import ast
import fnmatch
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from minitransformer.fast.gpu import cuda_source

ARCHS = ("sm_90", "sm_80")
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not on PATH")
KERNEL_MODULES = Path(cuda_source.__file__).parents[1]  # minitransformer/fast/


def compile_ptx(path: Path, arch: str, out_dir: Path) -> tuple[bool, str, float]:
    """``nvcc -ptx`` of one file for one architecture, every warning an error: (compiled
    without a word, what nvcc said, seconds)."""
    out = out_dir / f"{path.stem}.{arch}.ptx"
    cmd = [
        NVCC,
        "-ptx",
        *cuda_source.OPTIONS,
        *cuda_source.CUPY_APPENDS,
        f"-arch={arch}",
        "-Werror",
        "all-warnings",
    ]
    start = time.perf_counter()
    proc = subprocess.run(
        [*cmd, "-o", str(out), str(path)], capture_output=True, text=True, timeout=300
    )
    said = (proc.stdout + proc.stderr).strip()
    return proc.returncode == 0 and not said and out.exists(), said, time.perf_counter() - start


@pytest.fixture(scope="session")
def compiled(tmp_path_factory) -> dict[tuple[str, str], tuple[bool, str, float]]:
    """Every (file, arch) compiled once, two at a time."""
    out_dir = tmp_path_factory.mktemp("ptx")
    jobs = [(f, a) for f in cuda_source.files() for a in ARCHS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda j: compile_ptx(cuda_source.SOURCES / j[0], j[1], out_dir), jobs)
        return dict(zip(jobs, results, strict=True))


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("file", cuda_source.files())
def test_each_cuda_source_compiles_without_warnings(compiled, file, arch):
    ok, said, seconds = compiled[(file, arch)]
    assert ok, f"nvcc -ptx -arch={arch} {file} ({seconds:.1f} s):\n{said}"


SNIPPETS = {
    "valid": r"""
// kernels: scale_f32
extern "C" __global__ void scale_f32(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * __int_as_float(0x3f800000) * x[i];
}
""",
    "broken": r"""
extern "C" __global__ void scale_f32(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x
    if (i < n) y[i] = a * x[i];
}
""",
    "warning": r"""
extern "C" __global__ void scale_f32(const float* x, float* y, float a, int n) {
    int unused = 3;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
""",
}


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", ["valid", "broken", "warning"])
def test_the_compile_check_passes_valid_cuda_and_fails_errors_and_warnings(tmp_path, kind, arch):
    path = tmp_path / f"{kind}.cu"
    path.write_text(SNIPPETS[kind], encoding="utf-8")
    ok, said, _ = compile_ptx(path, arch, tmp_path)
    assert ok == (kind == "valid"), said
    if kind == "valid":
        assert ".entry scale_f32" in (tmp_path / f"valid.{arch}.ptx").read_text()


def test_entry_points_reads_extern_c_kernels_and_the_kernels_comment():
    text = """
    extern "C" __global__ void layer_norm_f32(const float* x) {}
    extern "C"  __global__  void  layer_norm_f64 (const double* x) {}
    __global__ void helper(int n) {}           // not an entry point: no extern "C"
    __device__ float warp_sum(float v) { return v; }
    // kernels: adam_f32 adam_f64
    #define STAMP(NAME, T) extern "C" __global__ void NAME##_x(T* p) {}
    """
    assert cuda_source.entry_points(text) == [
        "adam_f32", "adam_f64", "layer_norm_f32", "layer_norm_f64",
    ]  # fmt: skip
    assert cuda_source.entry_points(SNIPPETS["valid"]) == ["scale_f32"]
    assert cuda_source.entry_points("") == []


def kernel_references(tree: ast.AST) -> list[tuple[str, str | re.Pattern, int]]:
    """(file, name or a pattern of an f-string name, line) of every ``kernel("F.cu", NAME)``
    or ``cuda_source.kernel(...)`` call whose file is a string; an f-string name becomes a
    pattern with ``\\w+`` for each value it formats. ``kernel_for("F.cu", "NAME", dtype)``
    asks for both entry points, NAME_f32 and NAME_f64."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        file, name = node.args[0], node.args[1]
        if called not in ("kernel", "kernel_for") or not isinstance(file, ast.Constant):
            continue
        if called == "kernel_for" and isinstance(name, ast.Constant):
            for suffix in cuda_source.SUFFIX.values():
                found.append((file.value, name.value + suffix, node.lineno))
        elif isinstance(name, ast.Constant):
            found.append((file.value, name.value, node.lineno))
        elif isinstance(name, ast.JoinedStr):
            parts = [
                re.escape(v.value) if isinstance(v, ast.Constant) else r"\w+" for v in name.values
            ]
            found.append((file.value, re.compile("".join(parts)), node.lineno))
    return found


def test_kernel_references_are_found_in_python_source():
    tree = ast.parse(
        'k = kernel("ln.cu", "ln_fwd_f32")\n'
        'k2 = cuda_source.kernel("ln.cu", f"ln_bwd_{suffix}")\n'
        "k3 = kernel(FILE, name)\n"
        'k4 = cuda_source.kernel_for("ce.cu", "ce_fwd", x.dtype)\n'
    )
    refs = kernel_references(tree)
    assert [(f, n if isinstance(n, str) else n.pattern) for f, n, _ in refs] == [
        ("ln.cu", "ln_fwd_f32"),
        ("ln.cu", r"ln_bwd_\w+"),
        ("ce.cu", "ce_fwd_f32"),
        ("ce.cu", "ce_fwd_f64"),
    ]


def test_every_kernel_the_python_asks_for_is_an_entry_point_of_its_file():
    files = set(cuda_source.files())
    problems = []
    for module in sorted(KERNEL_MODULES.rglob("*.py")):  # fast/cupy/*.py and the rest
        for file, name, line in kernel_references(ast.parse(module.read_text("utf-8"))):
            where = f"{module.relative_to(KERNEL_MODULES).as_posix()}:{line}"
            if file not in files:
                problems.append(f"{where}: no file fast/cuda/{file}")
                continue
            names = cuda_source.entry_points(cuda_source.source(file))
            if isinstance(name, str) and name not in names:
                problems.append(f"{where}: {file} has no entry point {name} ({names})")
            elif not isinstance(name, str) and not any(name.fullmatch(n) for n in names):
                problems.append(f"{where}: {file} has no entry point like {name.pattern}")
    assert not problems, "\n".join(problems)


def test_the_cuda_sources_are_installed_with_the_package():
    """pyproject's package-data names fast/cuda/*.cu (checked once with a wheel build:
    ``pip wheel . --no-deps``, then ``unzip -l``); every source file matches it."""
    tomllib = pytest.importorskip("tomllib")
    root = KERNEL_MODULES.parents[1]
    with open(root / "pyproject.toml", "rb") as f:
        globs = tomllib.load(f)["tool"]["setuptools"]["package-data"]["minitransformer"]
    assert "fast/cuda/*.cu" in globs
    package = KERNEL_MODULES.parent
    for path in sorted(cuda_source.SOURCES.iterdir()):  # the .cu files and shared headers
        rel = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel
