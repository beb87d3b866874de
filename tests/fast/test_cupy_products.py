"""The products CuPy arrays get from the namespaces, on the CPU (NumPy standing in for CuPy):

- with the kernels off (``MT_CUDA_KERNELS=0``), CuPy's plain namespace folds a stack of rows
  times one matrix into ONE 2-D product (``backend.namespaces.fold_row_products``): CuPy's
  own ``matmul`` would take its broadcast path (pointer arrays, a copy of a transposed
  weight: about 7 launches more a Linear, ~230 a tiny step);
- with the kernels on, the lean namespace's ``tensordot`` over the leading axes (the
  reference ``MatMul.backward`` and ``Linear.backward``'s weight gradient) is one 2-D
  product through ``fast/gpu/cublas.py`` (``cublas.tensordot``), not CuPy's own cuBLAS,
  which a CUDA graph capture refuses.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from cupy_standin import on_standin  # noqa: F401 - the fixture (tests/cupy_standin)

from minitransformer import backend, fast
from minitransformer.backend import namespaces
from minitransformer.fast.gpu import cublas
from minitransformer.function import TWINS
from minitransformer.ops.matmul import Linear, MatMul


def counting_namespace(name: str = "fake_compat_cupy") -> tuple[types.ModuleType, list]:
    """A namespace module of NumPy's products whose ``matmul`` and ``tensordot`` record
    each call: ("matmul", a.ndim, b.ndim) or ("tensordot", axes)."""
    calls: list = []
    ns = types.ModuleType(name)

    def matmul(a, b, /):
        calls.append(("matmul", a.ndim, b.ndim))
        return np.matmul(a, b)

    def tensordot(a, b, /, *, axes=2):
        calls.append(("tensordot", axes))
        return np.tensordot(a, b, axes=axes)

    ns.matmul, ns.tensordot, ns.exp, ns.sum = matmul, tensordot, np.exp, np.sum
    return ns, calls


def layouts(rng: np.random.Generator, shape: tuple[int, ...]):
    """The same values of ``shape`` as a contiguous array and as non-contiguous views:
    leading axes swapped, every other column, rows padded wider."""
    x = rng.standard_normal(shape)
    yield "contiguous", x
    if len(shape) > 2:
        yield "leading axes swapped", np.ascontiguousarray(np.swapaxes(x, 0, 1)).swapaxes(0, 1)
    wide = np.zeros((*shape[:-1], 2 * shape[-1]))
    wide[..., ::2] = x
    yield "every other column", wide[..., ::2]
    padded = np.zeros((*shape[:-1], shape[-1] + 3))
    padded[..., : shape[-1]] = x
    yield "padded rows", padded[..., : shape[-1]]


def weights(rng: np.random.Generator, k: int, m: int):
    w = rng.standard_normal((k, m))
    yield "contiguous", w
    yield "transposed view", np.ascontiguousarray(w.T).T  # as weight.mT of a (m, k) table


# ----------------------------------------------------------------------------- D1: kernels off


@pytest.mark.parametrize("shape", [(2, 3, 5), (4, 1, 5), (1, 7, 5), (2, 3, 2, 5), (0, 3, 5)])
def test_a_stack_of_rows_times_a_matrix_is_one_2d_product(shape):
    rng = np.random.default_rng(0)
    plain, calls = counting_namespace()
    xp = namespaces.fold_row_products(plain)
    pairs = [(a, w) for a in layouts(rng, shape) for w in weights(rng, 5, 4)]
    for (a_name, a), (w_name, w) in pairs:
        calls.clear()
        y = xp.matmul(a, w)
        assert calls == [("matmul", 2, 2)], (a_name, w_name, calls)
        assert y.shape == (*shape[:-1], 4)
        np.testing.assert_allclose(y, np.matmul(a, w), rtol=1e-12, atol=1e-12,
                                   err_msg=f"{a_name} @ {w_name}")  # fmt: skip


@pytest.mark.parametrize(
    ("sa", "sb"), [((3, 5), (5, 4)), ((2, 3, 4, 5), (2, 3, 5, 6)), ((2, 4, 5), (2, 5, 6))]
)
def test_other_products_are_the_plain_namespaces(sa, sb):
    rng = np.random.default_rng(1)
    plain, calls = counting_namespace()
    xp = namespaces.fold_row_products(plain)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    np.testing.assert_array_equal(xp.matmul(a, b), np.matmul(a, b))
    assert calls == [("matmul", len(sa), len(sb))]


@pytest.mark.parametrize("lead", [(6,), (2, 3), (2, 1, 3), (0, 3)])
def test_tensordot_over_the_leading_axes_is_one_2d_product(lead):
    rng = np.random.default_rng(2)
    plain, calls = counting_namespace()
    xp = namespaces.fold_row_products(plain)
    rows = tuple(range(len(lead)))
    for (x_name, x), (g_name, g) in zip(
        layouts(rng, (*lead, 5)), layouts(rng, (*lead, 4)), strict=False
    ):
        calls.clear()
        dw = xp.tensordot(x, g, axes=(rows, rows))
        assert calls == [("matmul", 2, 2)], (x_name, g_name, calls)
        np.testing.assert_allclose(dw, np.tensordot(x, g, axes=(rows, rows)), rtol=1e-12,
                                   atol=1e-12, err_msg=f"{x_name}, {g_name}")  # fmt: skip


@pytest.mark.parametrize(
    ("sa", "sb", "axes"),
    [((2, 3, 5), (5, 4), 1), ((2, 3, 5), (2, 3, 4), ((0,), (0,))), ((2, 3, 5), (2, 4, 4),
     ((0, 1), (0, 1))), ((3, 5), (3, 4), ([0], [0]))],
)  # fmt: skip
def test_other_contractions_are_the_plain_namespaces(sa, sb, axes):
    rng = np.random.default_rng(3)
    plain, calls = counting_namespace()
    xp = namespaces.fold_row_products(plain)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    if sb == (2, 4, 4):  # leading shapes differ: numpy's own error, as before
        with pytest.raises(ValueError):
            xp.tensordot(a, b, axes=axes)
    else:
        np.testing.assert_array_equal(xp.tensordot(a, b, axes=axes), np.tensordot(a, b, axes=axes))
    assert calls == [("tensordot", axes)]


def test_the_folded_namespace_is_a_copy_with_every_other_name():
    plain, _ = counting_namespace()
    plain.__getattr__ = lambda name: f"lazy {name}"
    before = dict(vars(plain))
    xp = namespaces.fold_row_products(plain)
    assert vars(plain) == before, "the plain namespace is not modified"
    assert xp.exp is np.exp and xp.sum is np.sum and xp.__name__ == plain.__name__
    assert xp.matmul is not plain.matmul and xp.tensordot is not plain.tensordot
    assert xp.float128_or_other == "lazy float128_or_other"  # names made lazily


class Ctx:
    """What a Function's forward and backward get (``ctx``), for calling them directly."""

    def __init__(self, xp, needs):
        self.xp, self.needs_input_grad = xp, needs

    def save_for_backward(self, *arrays):
        self.saved = arrays


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("x_shape", [(2, 3, 5), (2, 2, 3, 5)])
def test_the_reference_linear_makes_only_2d_products_on_cupys_plain_namespace(x_shape, transposed):
    """The reference Linear, run as the kernels-off path runs it: forward, dx and dW each
    one 2-D product (the bias sum aside), equal to the products on NumPy's namespace."""
    rng = np.random.default_rng(4)
    plain, calls = counting_namespace()
    xp = namespaces.fold_row_products(plain)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal((4, 5) if transposed else (5, 4))
    b = rng.standard_normal(4)
    g = rng.standard_normal((*x_shape[:-1], 4))
    got, want = Ctx(xp, (True, True, True)), Ctx(backend.namespace(x), (True, True, True))
    y = Linear.forward(got, x, w, b, transposed)
    grads = Linear.backward(got, g)
    assert calls == [("matmul", 2, 2)] * 3, calls
    np.testing.assert_allclose(y, Linear.forward(want, x, w, b, transposed), rtol=1e-12)
    for a, r in zip(grads, Linear.backward(want, g), strict=True):
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)


class FakeArray:
    """Stands for cupy.ndarray (its type's module says "cupy")."""


FakeArray.__module__ = "cupy._core.core"


def fake_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.__dict__.update({k: v for k, v in vars(np).items() if not k.startswith("__")})
    cp.linalg, cp.ndarray = types.ModuleType("cupy.linalg"), FakeArray
    cp.cuda = types.SimpleNamespace(Device=type("Device", (), {}))
    return cp


@pytest.fixture
def fake_gpu(monkeypatch):
    """A fake CuPy behind the backend; the twins it registers removed afterwards."""
    cp = fake_cupy()
    monkeypatch.setattr(namespaces, "cupy_module", lambda: cp)
    namespaces.reset_cupy_namespace()
    yield cp
    for key in [k for k in TWINS if k[1] is FakeArray]:
        del TWINS[key]
    namespaces.reset_cupy_namespace()


def test_the_kernels_off_namespace_of_cupy_arrays_folds_the_rows(monkeypatch, fake_gpu):
    """MT_CUDA_KERNELS=0: the backend serves array_api_compat.cupy with the folding products
    (here a fake compat module: CuPy is not installed)."""
    compat, calls = counting_namespace("array_api_compat.cupy")
    monkeypatch.setitem(sys.modules, "array_api_compat.cupy", compat)
    monkeypatch.setenv("MT_CUDA_KERNELS", "0")
    xp = namespaces.namespace_for_device("cuda:0")
    assert xp is not compat and xp.exp is np.exp
    y = xp.matmul(np.ones((2, 3, 5)), np.ones((5, 4)))
    assert calls == [("matmul", 2, 2)] and y.shape == (2, 3, 4)


# ----------------------------------------------------------------------------- D3: kernels on


@pytest.fixture
def counted_cublas(monkeypatch):
    """``cublas.matmul`` by NumPy, each call recorded with its operands."""
    calls: list = []

    def matmul(a, b, cp=None, out=None):  # noqa: ARG001
        calls.append((a, b))
        return np.matmul(a, b, out=out)

    monkeypatch.setattr(cublas, "matmul", matmul)
    return calls


@pytest.mark.parametrize("lead", [(6,), (2, 3), (2, 1, 3)])
@pytest.mark.parametrize("layout", ["contiguous", "every other column"])
def test_cublas_tensordot_over_the_leading_axes_is_one_cublas_product(counted_cublas, lead, layout):
    rng = np.random.default_rng(5)
    cp = fake_cupy()
    cp.tensordot = lambda *a, **k: pytest.fail("CuPy's own tensordot: refused under capture")
    x = dict(layouts(rng, (*lead, 5)))[layout]
    g = dict(layouts(rng, (*lead, 4)))[layout]
    rows = tuple(range(len(lead)))
    dw = cublas.tensordot(x, g, cp, axes=(rows, rows))
    [(a, b)] = counted_cublas
    assert a.shape == (5, int(np.prod(lead))) and b.ndim == 2
    if layout == "contiguous":  # the rows' transpose read in place: no copy
        assert np.shares_memory(a, x) and np.shares_memory(b, g)
    np.testing.assert_allclose(dw, np.tensordot(x, g, axes=(rows, rows)), rtol=1e-12)


def test_cublas_tensordot_leaves_other_contractions_to_cupy(counted_cublas):
    cp, seen = fake_cupy(), []
    cp.tensordot = lambda a, b, axes: seen.append(axes) or np.tensordot(a, b, axes=axes)
    a, b = np.ones((2, 3, 5)), np.ones((2, 3, 4))
    assert cublas.tensordot(a, b, cp, axes=((0,), (0,))).shape == (3, 5, 3, 4)
    assert seen == [((0,), (0,))] and counted_cublas == []


def test_the_references_weight_gradients_reach_cublas_in_the_lean_namespace(
    monkeypatch, fake_gpu, counted_cublas
):
    """MatMul.backward's and Linear.backward's ``xp.tensordot`` (ops/matmul.py), on the
    namespace the fast tier gives CuPy arrays: cuBLAS products, never CuPy's tensordot."""
    fake_gpu.tensordot = lambda *a, **k: pytest.fail("CuPy's own tensordot")
    monkeypatch.delenv("MT_CUDA_KERNELS", raising=False)
    xp = fast._use_cupy(fake_gpu)
    assert xp.linalg.tensordot is xp.tensordot
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((2, 3, 5)), rng.standard_normal((5, 4))
    g = rng.standard_normal((2, 3, 4))
    ctx = Ctx(xp, (False, True))
    ctx.save_for_backward(a, b)
    _, db = MatMul.backward(ctx, g)
    ctx = Ctx(xp, (False, True, False))
    ctx.save_for_backward(a, b)
    ctx.transposed = False
    _, dw, _ = Linear.backward(ctx, g)
    assert len(counted_cublas) == 2 and all(x.ndim == y.ndim == 2 for x, y in counted_cublas)
    want = np.tensordot(a, g, axes=((0, 1), (0, 1)))
    np.testing.assert_allclose(db, want, rtol=1e-12)
    np.testing.assert_allclose(dw, want, rtol=1e-12)


# ----------------------------------------------------------------------------- D3, end to end


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 2, 3, 5)])
def test_a_learners_x_at_w_is_captured_without_cupys_cublas(request, monkeypatch, shape):
    """A model with ``x @ W`` on a stack of rows (MatMul, whose backward asks for
    ``xp.tensordot``), forward and backward inside a CUDA graph capture on the counting
    stand-in for CuPy (tests/cupy_standin): nothing a real capture refuses, in particular no
    CuPy cuBLAS call (``cupy.tensordot``), with the kernels on."""
    import minitransformer as mt

    monkeypatch.delenv("MT_CUDA_KERNELS", raising=False)
    cp = request.getfixturevalue("on_standin")
    rng = np.random.default_rng(7)
    x = mt.tensor(rng.standard_normal(shape), device="cuda:0", requires_grad=True)
    w = mt.tensor(rng.standard_normal((5, 4)), device="cuda:0", requires_grad=True)
    stream = cp.cuda.Stream()
    with stream:
        stream.begin_capture()
        y = x @ w
        y.backward(mt.tensor(np.ones(y.shape), device="cuda:0"))
        stream.end_capture()
    assert not [h for h in cp.HAZARDS if "cuBLAS" in h], cp.HAZARDS
