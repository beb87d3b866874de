"""matmul (batched, broadcasting) and linear (x W + b)."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import ShapeError
from minitransformer.ops.matmul import linear, matmul

SHAPES = [
    ((3, 4), (4, 5)),  # plain 2-D
    ((2, 3, 4), (4, 5)),  # rows @ one matrix (the 2-D GEMM fast path)
    ((2, 3, 4), (2, 4, 5)),  # batched
    ((2, 1, 3, 4), (3, 4, 2)),  # broadcast batch axes
    ((3, 4), (2, 4, 5)),  # 2-D @ batch
]


@pytest.mark.parametrize("sa, sb", SHAPES)
def test_matmul(make, rng, sa, sb):
    a_np, b_np = rng.standard_normal(sa), rng.standard_normal(sb)
    a, b = make(a_np), make(b_np)
    np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-12, atol=1e-12)
    assert mt.gradcheck(matmul, a, b)


@pytest.mark.parametrize("bias", [True, False])
def test_linear(make, rng, bias):
    x_np, w_np, b_np = (rng.standard_normal(s) for s in ((2, 3, 4), (4, 5), (5,)))
    x, w, b = make(x_np), make(w_np), make(b_np)
    expected = x_np @ w_np + (b_np if bias else 0)
    out = linear(x, w, b if bias else None)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12)
    if bias:
        assert mt.gradcheck(linear, x, w, b)
    else:
        assert mt.gradcheck(linear, x, w)


def test_linear_skips_unneeded_gradients(make, rng):
    x = make(rng.standard_normal((2, 4)), requires_grad=False)
    w = make(rng.standard_normal((4, 3)))
    linear(x, w).sum().backward()
    assert x.grad is None and w.grad is not None


def test_torch_oracle(rng):
    torch = pytest.importorskip("torch")
    a_np, b_np = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    a, b = mt.tensor(a_np, requires_grad=True), mt.tensor(b_np, requires_grad=True)
    ta = torch.tensor(a_np, requires_grad=True)
    tb = torch.tensor(b_np, requires_grad=True)
    g = rng.standard_normal((2, 3, 5))
    (a @ b).backward(g)
    (ta @ tb).backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad, ta.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(b.grad, tb.grad.numpy(), atol=1e-12)


def test_shape_errors_name_the_shapes(make):
    with pytest.raises(ShapeError, match=r"shapes \(2, 3\) and \(4, 5\) do not fit.*\(3\).*\(4\)"):
        matmul(make(np.ones((2, 3))), make(np.ones((4, 5))))
    with pytest.raises(ShapeError, match="at least 2 axes"):
        matmul(make(np.ones(3)), make(np.ones((3, 2))))
    with pytest.raises(ShapeError, match=r"input of shape \(2, 3\) does not fit weight"):
        linear(make(np.ones((2, 3))), make(np.ones((4, 5))))
    with pytest.raises(ShapeError, match=r"bias has shape \(4,\), need \(5,\)"):
        linear(make(np.ones((2, 4))), make(np.ones((4, 5))), make(np.ones(4)))
