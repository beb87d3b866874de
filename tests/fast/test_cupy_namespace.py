"""The lean CuPy namespace (fast/gpu/namespace.py) and the switch MT_CUDA_KERNELS, on the
CPU: the shim runs on a stand-in "cupy" made of NumPy's functions (CI has no CuPy) and must
give what array_api_compat gives (its NumPy namespace: the same wrappers compat puts over
CuPy), with ``device=`` accepted and checked; every ``xp.NAME`` the library calls must be
served (shimmed, or listed as checked in CuPy 14); the switch reads on/off/typo."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import numpy as np
import pytest

from minitransformer import backend, fast
from minitransformer.backend import namespaces
from minitransformer.fast import cupy as fast_cupy
from minitransformer.fast.gpu import namespace as cupy_namespace
from minitransformer.function import TWINS, implementation
from minitransformer.ops.layernorm import LayerNorm

compat = pytest.importorskip("array_api_compat.numpy")

PACKAGE = Path(__file__).resolve().parents[2] / "minitransformer"


class FakeDevice:
    """Stands for cupy.cuda.Device: records the GPUs entered."""

    entered: list[int] = []

    def __init__(self, id: int = 0) -> None:
        self.id = id

    def __enter__(self) -> FakeDevice:
        FakeDevice.entered.append(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class FakeArray:
    """Stands for cupy.ndarray (its type's module says "cupy")."""

    def __init__(self, dtype: str = "float32"):
        self.dtype = np.dtype(dtype)


FakeArray.__module__ = "cupy._core.core"


def fake_cupy() -> types.ModuleType:
    """A "cupy" module made of NumPy's functions, with cuda.Device and ndarray faked."""
    cp = types.ModuleType("cupy")
    cp.__dict__.update({k: v for k, v in vars(np).items() if not k.startswith("__")})
    cp.cuda = types.SimpleNamespace(Device=FakeDevice)
    cp.linalg = np.linalg
    cp.ndarray = FakeArray
    return cp


@pytest.fixture
def ns():
    FakeDevice.entered.clear()
    return cupy_namespace.lean_namespace(fake_cupy())


def _same(a, b):
    assert type(a) is type(b) or isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(a, b)


CALLS = [
    ("arange", (2, 9, 3), dict(dtype=np.int32)),
    ("arange", (5,), {}),
    ("empty", ((2, 3),), dict(dtype=np.float32)),
    ("zeros", ((2, 3),), dict(dtype=np.float32)),
    ("ones", (4,), {}),
    ("full", ((2,), 7), dict(dtype=np.int64)),
    ("eye", (3, 4), dict(k=1, dtype=np.float32)),
    ("linspace", (0.0, 1.0), dict(num=5, endpoint=False)),
    ("asarray", ([1, 2, 3],), dict(dtype=np.float64)),
    ("take_along_axis", (np.arange(6.0).reshape(2, 3), np.array([[2], [0]])), {}),
    ("vecdot", (np.arange(6.0).reshape(2, 3), np.arange(3.0)), {}),
    ("vecdot", (np.arange(6.0).reshape(3, 2), np.ones((3, 1))), dict(axis=0)),
    ("vecdot", (np.array([1 + 2j, 3j]), np.array([1j, 2.0])), {}),
    ("clip", (np.arange(6.0, dtype=np.float32),), dict(max=2.5)),
    ("clip", (np.arange(6, dtype=np.int32),), dict(min=1, max=3)),
    ("clip", (np.arange(6, dtype=np.int32), 1.5, 3.5), {}),
    ("clip", (np.arange(3.0),), {}),
    ("reshape", (np.arange(6.0), (2, 3)), {}),
    ("reshape", (np.arange(6.0), (3, 2)), dict(copy=True)),
    ("astype", (np.arange(3.0), np.float32), {}),
    ("astype", (np.arange(3.0), np.float64), dict(copy=False)),
    ("unstack", (np.arange(6.0).reshape(2, 3),), dict(axis=1)),
]


@pytest.mark.parametrize("name,args,kwargs", CALLS, ids=lambda v: str(v)[:20])
def test_the_shim_gives_what_array_api_compat_gives(ns, name, args, kwargs):
    assert name in cupy_namespace.SHIMMED
    ours, theirs = getattr(ns, name)(*args, **kwargs), getattr(compat, name)(*args, **kwargs)
    if name == "empty":  # its values are whatever the memory held
        assert (ours.shape, ours.dtype) == (theirs.shape, theirs.dtype)
    elif isinstance(theirs, tuple):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _same(a, b)
    else:
        _same(ours, theirs)


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "empty_like"])
def test_the_like_functions_keep_shape_and_take_a_dtype(ns, name):
    x = np.arange(6.0).reshape(2, 3)
    for kw in ({}, dict(dtype=np.float32)):
        ours, theirs = getattr(ns, name)(x, **kw), getattr(compat, name)(x, **kw)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    _same(ns.full_like(x, 3.0, dtype=np.int32), compat.full_like(x, 3.0, dtype=np.int32))


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (-1,)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("ord", [2, 1, np.inf])
def test_vector_norm_is_a_vector_norm_over_the_axes(ns, axis, keepdims, ord):
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    ours = ns.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
    theirs = compat.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert np.shape(ours) == np.shape(theirs)


@pytest.mark.parametrize(
    "name,args",
    [("zeros", ((2,),)), ("arange", (3,)), ("full", ((2,), 1.0)), ("asarray", ([1.0],)),
     ("eye", (2,)), ("linspace", (0, 1, 3)), ("zeros_like", (np.ones(2),)),
     ("ones", ((1,),)), ("empty", ((1,),)), ("ones_like", (np.ones(2),)),
     ("empty_like", (np.ones(2),)), ("full_like", (np.ones(2), 2.0))],
)  # fmt: skip
def test_device_is_accepted_and_checked(ns, name, args):
    f = getattr(ns, name)
    f(*args, device=FakeDevice(1))
    assert FakeDevice.entered == [1], "made on the GPU it was asked for"
    f(*args, device=None)  # the current GPU
    assert FakeDevice.entered == [1]
    with pytest.raises(ValueError, match="unsupported device for CuPy: 'cpu'"):
        f(*args, device="cpu")


def test_asarray_copy_false_refuses_a_copy(ns):
    x = np.arange(3.0)
    assert ns.asarray(x, copy=False) is x
    with pytest.raises(ValueError, match="copy=False"):
        ns.asarray([1.0, 2.0], copy=False)
    y = ns.asarray(x, copy=True)
    assert y is not x and np.array_equal(x, y)


def test_the_namespace_is_cupys_own_elsewhere_and_cupy_is_not_modified():
    cp = fake_cupy()
    before = dict(vars(cp))
    ns = cupy_namespace.lean_namespace(cp)
    assert vars(cp) == before and cp.linalg is np.linalg and not hasattr(np.linalg, "vecdot_")
    assert ns.exp is np.exp and ns.matmul is np.matmul and ns.concat is np.concat
    assert ns.linalg.norm is np.linalg.norm and ns.linalg is not cp.linalg
    assert ns.__name__ == "cupy"


def _names_the_library_calls() -> set[str]:
    """Every NAME in ``xp.NAME`` (``xp.linalg.NAME`` as ``linalg.NAME``) in minitransformer/,
    plus the dtype names ``backend.resolve_dtype`` looks up with getattr."""
    names = set(backend.DTYPES)
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and _is_xp(node.value):
                names.add(node.attr)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "linalg"
                and _is_xp(node.value.value)
            ):
                names.add(f"linalg.{node.attr}")
    names.discard("linalg")
    return names


def _is_xp(node: ast.expr) -> bool:
    """``xp`` or ``anything.xp`` (``ctx.xp``, ``group.xp``, ``self.xp``)."""
    return (isinstance(node, ast.Name) and node.id == "xp") or (
        isinstance(node, ast.Attribute) and node.attr == "xp"
    )


def test_every_array_api_name_the_library_calls_is_served():
    """A new ``xp.NAME`` in the library fails here until someone checks that CuPy 14 has it
    as the array API spells it (add it to CUPY_OWN) or writes a shim (SHIMMED)."""
    used = _names_the_library_calls()
    assert {"reshape", "matmul", "linalg.vector_norm", "float32"} <= used
    served = set(cupy_namespace.SHIMMED) | set(cupy_namespace.CUPY_OWN)
    served |= {f"linalg.{n}" for n in cupy_namespace.LINALG_SHIMMED}
    assert not used - served, f"not checked for CuPy: {sorted(used - served)}"


def test_the_checked_names_exist_in_cupy():
    """Where CuPy is installed (not in CI): CUPY_OWN names are CuPy's, the shimmed ones are
    there in the lean namespace (without a GPU: introspection only)."""
    cp = pytest.importorskip("cupy")
    missing = [n for n in cupy_namespace.CUPY_OWN if not hasattr(cp, n)]
    assert not missing, missing
    ns = cupy_namespace.lean_namespace(cp)
    for name in cupy_namespace.SHIMMED:
        assert getattr(ns, name) is not getattr(cp, name, None)
    assert callable(ns.linalg.vector_norm)


# ----------------------------------------------------------------------------- the switch


@pytest.mark.parametrize(
    "value,on", [(None, True), ("", True), ("0", False), ("1", True)]
)  # fmt: skip
def test_the_switch_reads_on_and_off(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("MT_CUDA_KERNELS", raising=False)
    else:
        monkeypatch.setenv("MT_CUDA_KERNELS", value)
    assert fast.cuda_kernels_enabled() is on


@pytest.mark.parametrize("value", ["true", "false", "2", " 0"])
def test_a_switch_value_it_does_not_know_names_the_fix(monkeypatch, value):
    monkeypatch.setenv("MT_CUDA_KERNELS", value)
    with pytest.raises(ValueError, match="MT_CUDA_KERNELS=0 to run the reference ops"):
        fast.cuda_kernels_enabled()


@pytest.fixture
def fake_gpu(monkeypatch):
    """A fake CuPy behind the backend (fast/cupy/ imports without the real one)."""
    cp = fake_cupy()
    monkeypatch.setattr(namespaces, "cupy_module", lambda: cp)
    monkeypatch.setattr(namespaces, "_cupy_ns", None)
    yield cp
    for key in [k for k in TWINS if k[1] is FakeArray]:
        del TWINS[key]
    namespaces.reset_cupy_namespace()


def test_cupys_first_use_registers_the_twins_only_when_switched_on(monkeypatch, fake_gpu):
    cp, x = fake_gpu, FakeArray()
    monkeypatch.setenv("MT_CUDA_KERNELS", "1")
    assert fast._use_cupy(cp) is not None
    assert implementation(LayerNorm, x) is fast_cupy.LayerNorm
    monkeypatch.setenv("MT_CUDA_KERNELS", "0")
    assert fast._use_cupy(cp) is None and implementation(LayerNorm, x) is LayerNorm
    monkeypatch.delenv("MT_CUDA_KERNELS")  # the default: on
    assert fast._use_cupy(cp) is not None and implementation(LayerNorm, x) is fast_cupy.LayerNorm
    with fast.reference_only():  # no twin inside
        assert fast._use_cupy(cp) is None and implementation(LayerNorm, x) is LayerNorm


def test_the_backend_gives_cupy_arrays_the_lean_namespace_when_switched_on(monkeypatch, fake_gpu):
    cp, x = fake_gpu, FakeArray()
    monkeypatch.setenv("MT_CUDA_KERNELS", "1")
    namespaces.reset_cupy_namespace()
    xp = backend.namespace(x)
    assert xp.__name__ == "cupy"
    assert xp is backend.namespace(x) is namespaces.namespace_for_device("cuda:0")  # built once
    assert implementation(LayerNorm, x) is fast_cupy.LayerNorm, "registered at first use"
    assert xp.zeros is not cp.zeros and xp.exp is cp.exp


def test_a_twin_serves_only_the_dtypes_its_kernels_take(fake_gpu):
    """A CuPy twin takes float32 and float64: a float16 array runs the reference op."""
    fast._use_cupy(fake_gpu)
    assert implementation(LayerNorm, FakeArray("float32")) is fast_cupy.LayerNorm
    assert implementation(LayerNorm, FakeArray("float64")) is fast_cupy.LayerNorm
    assert implementation(LayerNorm, FakeArray("float16")) is LayerNorm
    with fast.switched_on():  # NumPy's twins take every dtype
        assert implementation(LayerNorm, np.zeros(2, np.float16)) is not LayerNorm
