"""The engine's offer of a parameter's gradient buffer (``Function.writes_grads``): an op may
write a parameter's first gradient where the optimizer reads it, and the engine then copies
nothing; later gradients of the same parameter add into it, as before. A test op writes
dw = x * g with NumPy's ``out=`` (the GPU's Linear twin does the same with cuBLAS)."""

from __future__ import annotations

import numpy as np

import minitransformer as mt
from minitransformer.function import Function
from minitransformer.optim import Adam


class Scale(Function):
    """y = x * w (elementwise); dw written into the offered buffer."""

    fresh_grads = True
    writes_grads = True
    offers: list = []

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved
        Scale.offers.append(ctx.grad_out)
        buf = ctx.grad_out[1]
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
