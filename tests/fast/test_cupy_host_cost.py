"""The host cost of the CuPy path's calls, on the CPU (NumPy standing in for CuPy), counted:

- ``fast/gpu/cublas.py``'s ``plan`` is pure and remembered per (shapes, strides), bounded;
  a product seen before plans nothing again;
- ``fast/gpu/cublaslt.py`` makes a product's descriptors once per (device, dtype,
  epilogue, shapes, strides, alignments) and finds them again without re-planning;
- the LayerNorm and Dropout twins call ``cupy.ascontiguousarray`` only for an array that
  is not C-contiguous (a flag read otherwise);
- LayerNorm's arrival counters (``layer_norm_param_sums``) are made once and never freed
  while a captured graph may hold their address.
"""

from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from minitransformer.fast.cupy import dropout as cupy_dropout
from minitransformer.fast.cupy import layernorm as cupy_layernorm
from minitransformer.fast.gpu import cublas, cublaslt

# ----------------------------------------------------------------------------- cuBLAS plans


def test_plan_is_remembered_and_bounded():
    assert cublas.plan.cache_info().maxsize == cublas.PLAN_CACHE_SIZE
    assert cublas.plan_in_bytes.cache_info().maxsize == cublas.PLAN_CACHE_SIZE
    args = ((2, 3, 5, 4), (60, 20, 4, 1), (4, 7), (7, 1))
    assert cublas.plan(*args) is cublas.plan(*args)  # the same dict: read, never changed


@pytest.mark.parametrize(
    ("sa", "sb"), [((5, 3), (3, 4)), ((2, 3, 5, 4), (4, 7)), ((2, 3, 5, 4), (2, 3, 4, 7))]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plan_in_bytes_is_plan_of_the_element_strides(sa, sb, dtype):
    rng = np.random.default_rng(0)
    for a in (rng.standard_normal(sa).astype(dtype), rng.standard_normal(sa[::-1]).astype(dtype).T):
        b = rng.standard_normal(sb).astype(dtype)
        item = a.itemsize
        want = cublas.plan(a.shape, tuple(s // item for s in a.strides), b.shape,
                           tuple(s // item for s in b.strides))  # fmt: skip
        assert cublas.plan_in_bytes(a.shape, a.strides, b.shape, b.strides, item) == want


def test_a_product_seen_before_is_not_planned_again(monkeypatch):
    calls = []
    matrix = cublas._matrix
    monkeypatch.setattr(cublas, "_matrix", lambda *a: calls.append(a) or matrix(*a))
    cublas.plan.cache_clear()
    cublas.plan_in_bytes.cache_clear()
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((6, 4)), rng.standard_normal((5, 4)).T  # w: a transposed view
    first, _, _ = cublas.planned(x, w, np.ascontiguousarray)
    planned_once = len(calls)
    for _ in range(3):
        again, _, _ = cublas.planned(x.copy(), w, np.ascontiguousarray)
        assert again is first
    assert planned_once == 2 and len(calls) == planned_once, "no planning the second time"
    cublas.planned(rng.standard_normal((7, 4)), w, np.ascontiguousarray)  # a new shape
    assert len(calls) == planned_once + 2


# ----------------------------------------------------------------------------- cuBLASLt plans


class DeviceArray(np.ndarray):
    """A NumPy array with CuPy's ``data.ptr``."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


def _on_device(x: np.ndarray) -> DeviceArray:
    return np.asarray(x).view(DeviceArray)


class FakeLt:
    """cublasLt's C functions as no-ops that count; the heuristic finds one algorithm."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append(name)
            if name == "cublasLtMatmulAlgoGetHeuristic":
                args[-1]._obj.value = 1
            return 0

        return call


@pytest.fixture
def fake_lt(monkeypatch):
    lib = object.__new__(cublaslt._Library)
    lib.lib, lib.handles, lib.plans = FakeLt(), {}, {}
    lib.scalars = {dt: (ctypes.c_double(1), ctypes.c_double(0)) for dt in cublaslt._TYPES}
    monkeypatch.setattr(cublaslt, "_LIB", lib)
    workspace = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0), nbytes=0)
    monkeypatch.setattr(cublas, "workspace", lambda cp: workspace)
    monkeypatch.setattr(cublaslt, "_align", lambda ptr: 256)  # CuPy's pool: 256-aligned
    cp = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDevice=lambda: 0),
            get_current_stream=lambda: types.SimpleNamespace(ptr=0),
        ),
        empty=lambda shape, dtype: _on_device(np.empty(shape, dtype)),
    )
    return lib, cp


@pytest.mark.parametrize("epilogue", [cublaslt.BIAS, cublaslt.BGRADA, cublaslt.DEFAULT])
def test_cublaslt_makes_a_products_plan_once(monkeypatch, fake_lt, epilogue):
    lib, cp = fake_lt
    made, planning = [], []
    make, matrix = cublaslt._make_plan, cublas._matrix
    monkeypatch.setattr(cublaslt, "_make_plan", lambda *a: made.append(a[2]) or make(*a))
    monkeypatch.setattr(cublas, "_matrix", lambda *a: planning.append(a) or matrix(*a))
    cublas.plan.cache_clear()
    cublas.plan_in_bytes.cache_clear()
    rng = np.random.default_rng(2)
    bias = _on_device(np.zeros(3))
    for step in range(4):  # new arrays each step, the same layouts
        x, w = _on_device(rng.standard_normal((6, 5))), _on_device(rng.standard_normal((3, 5)).T)
        assert cublaslt.matmul(x, w, epilogue, bias=bias, cp=cp) is not None
        assert len(made) == 1 and len(lib.plans) == 1, step
        assert len(planning) == 2, "planned once (two operands), then found"
    x = _on_device(rng.standard_normal((8, 5)))  # new rows: a new plan
    cublaslt.matmul(x, w, epilogue, bias=bias, cp=cp)
    assert len(made) == 2 and lib.lib.calls.count("cublasLtMatmul") == 5
    wc = _on_device(np.ascontiguousarray(w))  # the same shapes, other strides: a new plan
    cublaslt.matmul(x, wc, epilogue, bias=bias, cp=cp)
    assert len(made) == 3 and made[-1]["transa"] != made[-2]["transa"]


# ----------------------------------------------------------------------------- contiguity


def counting_cupy() -> tuple[types.SimpleNamespace, list]:
    seen: list = []

    def ascontiguousarray(a, dtype=None):
        seen.append(a.shape)
        return np.ascontiguousarray(a, dtype=dtype)

    cp = types.SimpleNamespace(ascontiguousarray=ascontiguousarray, empty_like=np.empty_like,
                               empty=np.empty, zeros=np.zeros)  # fmt: skip
    return cp, seen


@pytest.mark.parametrize("layout", ["contiguous", "strided rows"])
def test_layer_norm_makes_contiguous_only_what_is_not(monkeypatch, layout):
    cp, seen = counting_cupy()
    launched = []
    monkeypatch.setattr(cupy_layernorm, "cp", cp)
    monkeypatch.setattr(cupy_layernorm.cuda_source, "kernel_for", lambda *a: a[1])
    monkeypatch.setattr(cupy_layernorm, "_launch", lambda k, n, b, args: launched.append(args))
    x = np.ones((4, 6)) if layout == "contiguous" else np.ones((8, 6))[::2]
    gamma, beta = np.ones(6), np.zeros(6)
    y, x_hat, rstd = cupy_layernorm.layer_norm_forward(x, gamma, beta, 1e-5)
    cupy_layernorm.layer_norm_backward(np.ones((4, 6)), x_hat, rstd, gamma, (True, False, False))
    assert seen == ([] if layout == "contiguous" else [(4, 6)])
    assert all(a.flags.c_contiguous for args in launched for a in args if hasattr(a, "flags"))


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_dropout_makes_contiguous_only_what_is_not(monkeypatch, layout):
    cp, seen = counting_cupy()
    launched = []
    monkeypatch.setattr(cupy_dropout, "cp", cp)
    monkeypatch.setattr(
        cupy_dropout.cuda_source, "kernel_for", lambda *a: lambda g, b, args: launched.append(args)
    )
    x = np.ones((4, 6)) if layout == "contiguous" else np.ones((6, 4)).T
    r = np.ones((4, 6))
    cupy_dropout._dropout_launch("dropout_add", x, r, (1, 2, 3), 2.0)
    assert seen == ([] if layout == "contiguous" else [(4, 6)])
    [args] = launched
    assert args[0].flags.c_contiguous and args[1] is r


# ----------------------------------------------------------------------------- arrivals


def test_layer_norms_counters_are_never_freed_under_a_graph(monkeypatch):
    """Counters for a wider D make a new buffer; the old one stays held (a graph captured
    with it keeps replaying into it), and no D up to 65,536 needs a second one."""
    cp, _ = counting_cupy()
    cp.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0))
    monkeypatch.setattr(cupy_layernorm, "cp", cp)
    monkeypatch.setattr(cupy_layernorm, "_ARRIVALS", {})
    first = cupy_layernorm._arrivals(3)
    for n in (1, 64, 200, cupy_layernorm.ARRIVALS_MIN):  # D up to 256 * 256
        assert cupy_layernorm._arrivals(n) is first
    wider = cupy_layernorm._arrivals(cupy_layernorm.ARRIVALS_MIN + 1)
    assert wider is not first and wider.size > cupy_layernorm.ARRIVALS_MIN
    assert any(b is first for b in cupy_layernorm._ARRIVALS[0]), "the first is still held"
    assert cupy_layernorm._arrivals(3) is wider and not wider.any()
