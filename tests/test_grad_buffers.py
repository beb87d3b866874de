"""A parameter's gradient buffer handed to an op (``Tensor.take_grad_buffer``): an op may
write a parameter's first gradient where the optimizer reads it, and the engine then copies
nothing; later gradients of the same parameter add into it, as before. A test op writes
dw = x * g with NumPy's ``out=`` (the fast tier's Linear twins do the same with BLAS and
cuBLAS, through ``fast/grad_buffers.py``)."""

from __future__ import annotations

import numpy as np

import minitransformer as mt
from minitransformer.function import Function
from minitransformer.optim import Adam


class Scale(Function):
    """y = x * w (elementwise); dw written into the offered buffer."""

    fresh_grads = True
    offers: list = []

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved
        offer = tuple(None if p is None else p.take_grad_buffer() for p in ctx.parents)
        Scale.offers.append(offer)
        buf = offer[1]
        dw = np.multiply(x, grad, out=buf) if buf is not None else x * grad
        return grad * w, dw


def _setup():
    rng = np.random.default_rng(0)
    w = mt.tensor(rng.standard_normal(5).astype("float32"), requires_grad=True)
    b = mt.tensor(rng.standard_normal(5).astype("float32"), requires_grad=True)
    x = mt.tensor(rng.standard_normal(5).astype("float32"))
    opt = Adam([w, b])  # lays w and b into its flat buffers: each grad has a view there
    return w, b, x, opt


def test_the_first_gradient_is_written_in_place():
    w, b, x, opt = _setup()
    Scale.offers.clear()
    (Scale.apply(x, w) + b).sum().backward()
    view = opt.groups[0].grad_views[0]
    assert Scale.offers[0][1] is view and Scale.offers[0][0] is None  # x is no parameter
    assert w.grad is view  # no copy: the buffer the op wrote is the gradient
    np.testing.assert_allclose(w.grad, x.data, rtol=1e-6)  # d(sum(x w + b))/dw = x
    np.testing.assert_allclose(opt.gather_grads()[0][:5], x.data, rtol=1e-6)


def test_a_second_use_adds_and_a_second_backward_accumulates():
    w, b, x, opt = _setup()
    Scale.offers.clear()
    (Scale.apply(x, w) + Scale.apply(x * 2.0, w)).sum().backward()
    assert sum(o[1] is not None for o in Scale.offers) == 1  # offered once: the first
    np.testing.assert_allclose(w.grad, 3 * x.data, rtol=1e-6)
    Scale.offers.clear()
    Scale.apply(x, w).sum().backward()  # no zero_grad: accumulates
    assert Scale.offers[0][1] is None  # w has a gradient already: nothing offered
    np.testing.assert_allclose(w.grad, 4 * x.data, rtol=1e-6)
    opt.zero_grad()
    Scale.offers.clear()
    Scale.apply(x, w).sum().backward()
    assert Scale.offers[0][1] is opt.groups[0].grad_views[0]
    np.testing.assert_allclose(w.grad, x.data, rtol=1e-6)


def test_without_an_optimizer_nothing_is_offered():
    w = mt.tensor(np.ones(3, dtype="float32"), requires_grad=True)
    x = mt.tensor(np.arange(3, dtype="float32"))
    Scale.offers.clear()
    Scale.apply(x, w).sum().backward()
    assert Scale.offers == [(None, None)]
    np.testing.assert_allclose(w.grad, x.data)


class Unwritten(Scale):
    """Takes w's buffer and does not write it: the engine copies the gradient there."""

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved
        Scale.offers.append(tuple(p.take_grad_buffer() for p in ctx.parents))
        return grad * w, x * grad


def test_a_buffer_taken_and_not_written_still_gets_the_sum():
    """The buffer goes to the first op that asks in a pass; if it returns a new array
    instead, or another op adds a second gradient, the leaf still gets the sum, in the
    buffer; the next pass (after zero_grad) hands the buffer out again."""
    w, b, x, opt = _setup()
    view = opt.groups[0].grad_views[0]
    for _ in range(2):
        opt.zero_grad()
        Scale.offers.clear()
        (Unwritten.apply(x, w) + Scale.apply(x * 3.0, w) + b).sum().backward()
        assert [o[1] is view for o in Scale.offers].count(True) == 1
        assert w.grad is view
        np.testing.assert_allclose(w.grad, 4 * x.data, rtol=1e-6)


def test_a_non_leaf_or_a_leaf_without_a_buffer_hands_out_nothing():
    w = mt.tensor(np.ones(3, dtype="float32"), requires_grad=True)
    y = w * 2.0
    assert w.take_grad_buffer() is None and y.take_grad_buffer() is None
