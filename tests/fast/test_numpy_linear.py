"""The NumPy twin of Linear's backward (``fast/numpy/linear.py``): the reference's dx, dW and db,
with dW and db written straight into the optimizer's gradient buffer when the engine offers
it (``Tensor.take_grad_buffer``: no copy), db as a product with ones; every input shape
(a vector, rows, a batch of sequences, no rows at all), the weight stored either way, with
and without a bias, a weight used twice (the tied embedding), gradients accumulated over
two backward passes, float32 and float64, and gradcheck."""

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast
from minitransformer.fast.numpy import linear as numpy_twins
from minitransformer.optim import Adam

D_IN, D_OUT = 5, 3


def _step(x_shape, transposed, bias, dtype, optimizer, seed=0):
    """(y, dx, dW, db, the weight, the optimizer) of sum(u * linear(x, W, b))."""
    rng = np.random.default_rng(seed)
    w_shape = (D_OUT, D_IN) if transposed else (D_IN, D_OUT)
    x = mt.tensor(rng.standard_normal(x_shape), dtype=dtype, requires_grad=True)
    w = mt.tensor(rng.standard_normal(w_shape), dtype=dtype, requires_grad=True)
    b = mt.tensor(rng.standard_normal(D_OUT), dtype=dtype, requires_grad=True) if bias else None
    opt = Adam([p for p in (w, b) if p is not None]) if optimizer else None
    y = F.linear(x, w, b, transpose_weight=transposed)
    u = rng.standard_normal(y.shape).astype(dtype)
    (y * mt.tensor(u)).sum().backward()
    db = None if b is None else b.grad
    return y.numpy(), x.grad, w.grad, db, w, opt


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("optimizer", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("x_shape", [(D_IN,), (4, D_IN), (2, 4, D_IN), (0, D_IN)])
def test_the_twin_matches_the_reference(x_shape, transposed, bias, optimizer, dtype):
    ref = _step(x_shape, transposed, bias, dtype, optimizer)
    with fast.switched_on():
        got = _step(x_shape, transposed, bias, dtype, optimizer)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    for a, b in zip(got[:4], ref[:4], strict=True):
        if b is None:
            assert a is None
            continue
        assert a.dtype == np.dtype(dtype) and a.shape == b.shape
        np.testing.assert_allclose(a, b, **tol)
    w, opt = got[4], got[5]
    if optimizer:  # written where the optimizer reads it: the buffer's own view, no copy
        assert w.grad is opt.groups[0].grad_views[0]
        np.testing.assert_allclose(opt.gather_grads()[0][: w.size], ref[2].reshape(-1), **tol)


def test_the_twin_is_what_runs_and_writes_into_the_offered_buffer(monkeypatch):
    offers, returned = [], []
    backward = numpy_twins.Linear.backward

    offered = numpy_twins.offered

    def recorded_offer(ctx):
        offers.append(offered(ctx))
        return offers[-1]

    def recorded(ctx, grad):
        returned.append(backward(ctx, grad))
        return returned[-1]

    monkeypatch.setattr(numpy_twins, "offered", recorded_offer)
    monkeypatch.setattr(numpy_twins.Linear, "backward", staticmethod(recorded))
    with fast.switched_on():
        _, _, wg, bg, w, opt = _step((2, 4, D_IN), False, True, "float32", True)
    (offer,) = offers
    assert offer[0] is None and offer[1] is wg and offer[2] is bg  # x is no parameter
    assert returned[0][1] is offer[1] and returned[0][2] is offer[2]  # written there
    group = opt.groups[0]
    assert wg is group.grad_views[0] and bg is group.grad_views[1]
    assert np.shares_memory(wg, group.grad) and np.shares_memory(bg, group.grad)


def test_a_tied_weight_and_a_second_backward_add_up():
    """The embedding table used again as the output projection (transposed): the twin
    writes the projection's dE into the buffer and the embedding's gradient adds into it;
    a second backward without zero_grad adds again, as the reference does."""

    def run():
        rng = np.random.default_rng(4)
        table = mt.tensor(rng.standard_normal((7, D_IN)), requires_grad=True)
        opt = Adam([table])
        ids = np.array([[1, 3, 3], [6, 0, 1]])
        for _ in range(2):
            h = F.embedding(ids, table)
            logits = F.linear(h, table, transpose_weight=True)
            (logits * logits).sum().backward()
        return table.grad.copy(), opt

    ref, _ = run()
    with fast.switched_on():
        got, opt = run()
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert not np.allclose(got, 0)


def test_the_twin_passes_gradcheck():
    rng = np.random.default_rng(5)
    x = mt.tensor(rng.standard_normal((2, 3, D_IN)), requires_grad=True)
    w = mt.tensor(rng.standard_normal((D_IN, D_OUT)), requires_grad=True)
    b = mt.tensor(rng.standard_normal(D_OUT), requires_grad=True)
    with fast.switched_on():
        assert mt.gradcheck(lambda x, w, b: F.linear(x, w, b), x, w, b)
