"""fast/gpu/cublas.py's plan, executed in NumPy as cuBLAS reads memory (``run_plan``): every
layout the ops make (transposed views, permuted heads, broadcast batches, 2-D and 4-D)
against ``numpy.matmul``. The cuBLAS call itself runs in the GPU tests."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from minitransformer.fast.gpu import cublas


def _plan(a, b):
    item = a.itemsize
    return cublas.plan(a.shape, tuple(s // item for s in a.strides), b.shape,
                       tuple(s // item for s in b.strides))  # fmt: skip


def _product(a, b):
    """a @ b as fast/gpu/cublas.py's matmul computes it, with NumPy standing in for cuBLAS."""
    p, a, b = cublas.planned(a, b, np.ascontiguousarray)
    if p is None:  # cupy.matmul's case
        return np.matmul(a, b), p
    return cublas.run_plan(p, a, b), p


def _layouts(rng, shape):
    """The same values of ``shape`` in several layouts: contiguous, a transposed view
    (.mT of a contiguous array), permuted batch axes, a strided slice."""
    x = rng.standard_normal(shape)
    yield "contiguous", x
    yield "mT view", np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    if len(shape) == 4:  # heads: (B, L, H, d) permuted to (B, H, L, d)
        B, H, L, d = shape
        yield "permuted heads", np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    big = np.zeros((*shape[:-1], shape[-1] * 2 + 1))
    big[..., 1 : 2 * shape[-1] + 1 : 2] = x
    yield "strided columns", big[..., 1 : 2 * shape[-1] + 1 : 2]
    wide = np.zeros((*shape[:-1], shape[-1] + 3))
    wide[..., : shape[-1]] = x
    yield "padded rows", wide[..., : shape[-1]]


SHAPES = [
    ((5, 3), (3, 4)),
    ((1, 3), (3, 1)),
    ((4, 1), (1, 6)),
    ((2, 3, 5, 4), (2, 3, 4, 7)),
    ((2, 3, 5, 4), (4, 7)),
    ((6, 4), (2, 3, 4, 7)),
    ((2, 1, 5, 4), (1, 3, 4, 2)),
    ((3, 5, 4), (3, 4, 1)),
]


@pytest.mark.parametrize(("sa", "sb"), SHAPES)
def test_every_layout_gives_numpys_product(sa, sb):
    rng = np.random.default_rng(0)
    for (na, a), (nb, b) in itertools.product(_layouts(rng, sa), _layouts(rng, sb)):
        got, p = _product(a, b)
        np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-12, atol=1e-12,
                                   err_msg=f"{sa} {na} @ {sb} {nb}: {p}")  # fmt: skip


def test_attention_layouts_need_no_copy():
    """The products of attention's backward read their transposed operands as they lie."""
    rng = np.random.default_rng(1)
    p = rng.standard_normal((2, 4, 5, 6))  # (B, H, T, S), contiguous
    g = rng.standard_normal((2, 4, 5, 3))
    assert isinstance(_plan(p.mT, g), dict)  # dv = P^T g
    q = rng.standard_normal((2, 4, 5, 3))
    k = rng.standard_normal((2, 4, 6, 3))
    assert isinstance(_plan(q, k.mT), dict)  # S = q k^T
    x2 = rng.standard_normal((10, 8))
    g2 = rng.standard_normal((10, 7))
    plan = _plan(x2.mT, g2)  # dW = x^T g: one GEMM with op T
    assert isinstance(plan, dict) and plan["batch"] == 1 and plan["transb"] == cublas.OP_T


def test_permuted_heads_are_copied_once():
    x = np.zeros((2, 5, 4, 3)).transpose(0, 2, 1, 3)  # (B, H, L, d) from (B, L, H, d)
    y = np.zeros((2, 4, 3, 6))
    assert _plan(x, y) == "a"
    assert isinstance(_plan(np.ascontiguousarray(x), y), dict)


def test_not_for_cublas():
    a = np.zeros((2, 1, 5, 4))  # batch (2, 1) against (1, 3): broadcast in part
    assert cublas.plan(a.shape, (20, 20, 4, 1), (1, 3, 4, 2), (24, 8, 2, 1)) is None
    assert cublas.plan((3,), (1,), (3, 2), (2, 1)) is None  # a vector
    assert cublas.plan((0, 3), (3, 1), (3, 2), (2, 1)) is None  # an empty axis
    assert cublas.plan((2, 3), (3, 1), (4, 2), (2, 1)) is None  # k does not fit


@pytest.mark.parametrize("stack", [(2, 3), (4,), (2, 1, 3)])
def test_a_stack_of_rows_times_one_matrix_is_one_gemm(stack):
    """x @ W with x (..., T, k) whose matrices follow each other (contiguous, or rows padded
    wider): one GEMM over all rows (the reference's product of a stack by the weight, and
    the weight transposed in place); a stack whose matrices do not follow each other stays a
    strided batch."""
    rng = np.random.default_rng(2)
    shape = (*stack, 5, 4)
    for name, x in _layouts(rng, shape):
        for w in (rng.standard_normal((4, 7)), rng.standard_normal((7, 4)).T):
            got, p = _product(x, w)
            np.testing.assert_allclose(got, np.matmul(x, w), rtol=1e-12, atol=1e-12)
            if name in ("contiguous", "padded rows"):
                assert p["batch"] == 1 and p["n"] == int(np.prod(stack)) * 5, (name, p)
    gaps = rng.standard_normal((*stack, 6, 4))[..., :5, :]  # a row between the matrices
    w = rng.standard_normal((4, 7))
    got, p = _product(gaps, w)
    assert p["batch"] == int(np.prod(stack))
    np.testing.assert_allclose(got, np.matmul(gaps, w), rtol=1e-12, atol=1e-12)
