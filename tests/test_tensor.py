"""The autograd engine: graph walk, accumulation, no_grad, graph release, tensor()."""

import gc
import tracemalloc

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.function import Function


def test_chain_rule_through_a_shared_node(make):
    x = make(np.array([2.0]))
    y = x * x  # used twice below: gradients from both uses must add up
    z = y * 3.0 + y
    z.backward(np.ones(1))
    # z = 4 x^2 -> dz/dx = 8 x = 16
    np.testing.assert_allclose(mt.backend.to_numpy(x.grad), [16.0])


def test_leaf_gradients_accumulate_across_backward_calls(make):
    x = make(np.array([1.0, 2.0]))
    (x * 3.0).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(mt.backend.to_numpy(x.grad), [6.0, 6.0])
    x.zero_grad()
    assert x.grad is None


def test_accumulation_never_writes_into_a_callers_array():
    x = mt.tensor(np.zeros(3), requires_grad=True)
    upstream = np.ones(3)
    y = x + 0.0
    y.backward(upstream)  # x.grad may alias `upstream` ...
    (x + 0.0).backward(np.ones(3))  # ... so the second call must not add into it in place
    np.testing.assert_array_equal(upstream, np.ones(3))
    np.testing.assert_array_equal(x.grad, [2.0, 2.0, 2.0])


def test_retain_grad_keeps_intermediate_gradients(make):
    x = make(np.array([1.0, 2.0]))
    h = (x * 2.0).retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(mt.backend.to_numpy(h.grad), [4.0, 8.0])


def test_backward_twice_through_a_freed_graph_is_an_error(make):
    x = make(np.array([1.0]))
    h = x * 2.0
    (h * 1.0).sum().backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        (h * 1.0).sum().backward()


def test_retain_graph_allows_a_second_backward(make):
    x = make(np.array([1.0]))
    y = (x * 2.0).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(mt.backend.to_numpy(x.grad), [4.0])


def test_no_grad_records_nothing(make):
    x = make(np.array([1.0]))
    with mt.no_grad():
        y = x * 2.0
    assert not y.requires_grad and y.is_leaf
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_backward_on_a_non_scalar_needs_grad(make):
    x = make(np.ones((2, 2)))
    with pytest.raises(RuntimeError, match=r"shape \(2, 2\); pass grad="):
        (x * 2.0).backward()


def test_needs_input_grad_skips_work():
    seen = {}

    class Probe(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, grad):
            seen["needs"] = ctx.needs_input_grad
            return grad, None

    a = mt.tensor(np.ones(2), requires_grad=True)
    b = mt.tensor(np.ones(2))
    Probe.apply(a, b).sum().backward()
    assert seen["needs"] == (True, False)


def test_unbroadcast_sums_over_broadcast_axes():
    b = mt.tensor(np.ones((1, 3)), requires_grad=True, dtype="float64")
    x = mt.tensor(np.ones((4, 2, 3)), dtype="float64")
    (x * b).sum().backward()
    assert b.grad.shape == (1, 3)
    np.testing.assert_allclose(b.grad, 8.0)


def test_graph_is_released_no_memory_growth():
    """1,000 training-like iterations must not grow memory (the graph is freed)."""
    rng = np.random.default_rng(0)
    w = mt.tensor(rng.standard_normal((32, 32)), requires_grad=True, dtype="float32")
    x = mt.tensor(rng.standard_normal((16, 32)), dtype="float32")

    def step():
        h = (x @ w).relu()
        loss = (h * h).mean()
        loss.backward()
        w.data -= 1e-3 * w.grad
        w.grad = None

    for _ in range(50):  # warm caches
        step()
    gc.collect()
    tracemalloc.start()
    start, _ = tracemalloc.get_traced_memory()
    for _ in range(1000):
        step()
    gc.collect()
    end, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert end - start < 200_000, f"memory grew by {end - start} bytes over 1,000 steps"


def test_tensor_default_dtypes_follow_pytorch():
    assert mt.tensor([1.0, 2.0]).dtype == np.float32
    assert mt.tensor([1, 2]).dtype == np.int64
    assert mt.tensor([True]).dtype == np.bool_
    assert mt.tensor(np.zeros(2)).dtype == np.float64  # arrays keep their dtype
    assert mt.tensor([1, 2], dtype="float64").dtype == np.float64


def test_properties_and_conversions(make):
    x = make(np.arange(6.0).reshape(2, 3))
    assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and len(x) == 2
    np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3))
    assert x.sum().item() == 15.0
    assert "requires_grad=True" in repr(x)
    assert not x.detach().requires_grad


def test_to_moves_data_and_gradients_flow_back(device):
    x = mt.tensor(np.arange(3.0), requires_grad=True, dtype="float64")
    y = x.to(device)
    assert y.device == mt.backend.normalize_device(device)
    (y * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad, [2.0, 2.0, 2.0])
    assert x.grad.__class__ is np.ndarray


def test_scalar_leaves_get_array_gradients():
    a = mt.tensor(2.0, requires_grad=True, dtype="float64")
    (a * a).backward()
    assert isinstance(a.grad, np.ndarray) and a.grad.shape == ()
    assert a.grad == 4.0
    (a * 3.0).backward()  # accumulating stays an array too
    assert isinstance(a.grad, np.ndarray) and a.grad == 7.0
