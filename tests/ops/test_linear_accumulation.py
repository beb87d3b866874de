"""linear with a transposed weight (the tied output projection), and gradients added in
place into fresh arrays (``Function.fresh_grads``), kept apart where they must be."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import backend
from minitransformer.errors import ShapeError
from minitransformer.ops.matmul import linear


@pytest.mark.parametrize("bias", [True, False])
def test_linear_transpose_weight(make, rng, bias):
    x_np, w_np, b_np = (rng.standard_normal(s) for s in ((2, 3, 4), (5, 4), (5,)))
    x, w, b = make(x_np), make(w_np), make(b_np)
    out = linear(x, w, b if bias else None, transpose_weight=True)
    np.testing.assert_allclose(out.numpy(), x_np @ w_np.T + (b_np if bias else 0), atol=1e-12)

    def f(x, w, *b):
        return linear(x, w, *b, transpose_weight=True)

    assert mt.gradcheck(f, x, w, *([b] if bias else []))


def test_linear_transpose_weight_checks_shapes(make, rng):
    x, w = make(rng.standard_normal((2, 4))), make(rng.standard_normal((4, 5)))
    with pytest.raises(ShapeError, match="weight.shape\\[1\\]"):
        linear(x, w, transpose_weight=True)
    w2 = make(rng.standard_normal((5, 4)))
    with pytest.raises(ShapeError, match="bias"):
        linear(x, w2, make(rng.standard_normal(4)), transpose_weight=True)


def test_gradient_of_a_tensor_used_many_times_adds_up(make, rng):
    """x feeds three linears (fresh gradients, summed in place) and a residual add (a
    shared gradient, which must not be written into)."""
    x = make(rng.standard_normal((2, 3, 4)))
    ws = [make(rng.standard_normal((4, 4))) for _ in range(3)]

    def f(x, *ws):
        y = linear(x, ws[0]) + linear(x, ws[1]) * linear(x, ws[2])
        return (y + x).sum()

    assert mt.gradcheck(f, x, *ws)


def test_leaf_gradients_accumulate_over_two_backwards(make, rng):
    x = make(rng.standard_normal((3, 4)))
    w = make(rng.standard_normal((4, 2)))
    linear(x, w).sum().backward()
    first_w, first_x = backend.to_numpy(w.grad).copy(), backend.to_numpy(x.grad).copy()
    linear(x, w).sum().backward()
    np.testing.assert_allclose(backend.to_numpy(w.grad), 2 * first_w)
    np.testing.assert_allclose(backend.to_numpy(x.grad), 2 * first_x)


def test_retained_gradient_is_not_changed_by_a_later_backward(rng):
    x = mt.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    w = mt.tensor(rng.standard_normal((4, 4)), requires_grad=True)
    h = linear(x, w).retain_grad()
    y = h.reshape(12)
    y.sum().backward(retain_graph=True)
    kept = h.grad
    snapshot = np.array(kept, copy=True)
    (y * 2.0).sum().backward()
    np.testing.assert_allclose(kept, snapshot)  # the old array was not added into
    np.testing.assert_allclose(h.grad, 3 * snapshot)
