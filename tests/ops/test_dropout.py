"""dropout: inverted scaling, reproducible masks, eval identity, gradient, devices."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.backend import Generator
from minitransformer.errors import DeviceError
from minitransformer.ops.dropout import dropout, dropout_add


def test_mean_preserved_and_drop_rate(make, device):
    x = make(np.ones((200, 100)), "float32", requires_grad=False)
    y = dropout(x, p=0.3, generator=Generator(1, device)).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.02


def test_mask_reproducible_with_same_seed(make, rng, device):
    x = make(rng.standard_normal((4, 50)))
    a = dropout(x, 0.5, generator=Generator(7, device)).numpy()
    b = dropout(x, 0.5, generator=Generator(7, device)).numpy()
    c = dropout(x, 0.5, generator=Generator(8, device)).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    try:
        mt.backend.manual_seed(3)
        d = dropout(x, 0.5).numpy()
        mt.backend.manual_seed(3)
        np.testing.assert_array_equal(d, dropout(x, 0.5).numpy())
    finally:
        mt.backend.manual_seed(0)  # leave the default generators as other tests expect


def test_identity_in_eval_and_p_zero(make, rng):
    x = make(rng.standard_normal((3, 4)))
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x


def test_gradient_is_mask_over_keep(make, rng, device):
    x = make(rng.standard_normal((6, 7)))
    y = dropout(x, 0.25, generator=Generator(2, device))
    u = rng.standard_normal((6, 7))
    y.backward(make(u, requires_grad=False))
    mask = (y.numpy() != 0) / 0.75
    np.testing.assert_allclose(y.numpy(), x.numpy() * mask, rtol=1e-12)
    np.testing.assert_allclose(mt.backend.to_numpy(x.grad), u * mask, rtol=1e-12)
    assert mt.gradcheck(lambda x: dropout(x, 0.4, generator=Generator(5, device)), make(x.numpy()))


def test_dtype_and_device_kept(make, rng, device):
    x = make(rng.standard_normal((8, 8)), "float32")
    y = dropout(x, 0.1, generator=Generator(0, device))
    assert y.device == x.device and mt.backend.dtype_name(y.dtype) == "float32"
    assert mt.backend.device_of(y.data) == x.device
    y.backward(make(np.ones((8, 8)), "float32", requires_grad=False))
    assert mt.backend.dtype_name(x.grad.dtype) == "float32"
    assert mt.backend.device_of(x.grad) == x.device


def test_bad_input(make, rng):
    x = make(rng.standard_normal((2, 2)))
    for p in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=rf"dropout: p={p} .* must be in \[0, 1\)"):
            dropout(x, p)


def test_generator_on_another_device_is_refused(rng):
    pytest.importorskip("array_api_strict")
    x = mt.tensor(rng.standard_normal((2, 2)), device="strict:device1")
    with pytest.raises(DeviceError, match="generator lives on cpu but x is on strict:device1"):
        dropout(x, 0.5, generator=Generator(0, "cpu"))


# ----------------------------------------------------------------------------- dropout_add


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_add_is_residual_plus_dropout_with_the_same_draw(make, rng, device, p):
    """The same numbers as r + dropout(x) from the same generator state, forward and
    backward, and the generator advances by one draw either way."""
    xs, rs, us = (rng.standard_normal((4, 9)) for _ in range(3))
    outs = []
    for fused in (True, False):
        x, r = make(xs), make(rs)
        gen = Generator(11, device)
        gen.counter = 5
        y = dropout_add(x, r, p, generator=gen) if fused else r + dropout(x, p, generator=gen)
        y.backward(make(us, requires_grad=False))
        outs.append((y.numpy(), x.grad, r.grad, gen.counter))
    (y1, dx1, dr1, c1), (y2, dx2, dr2, c2) = outs
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(mt.backend.to_numpy(dx1), mt.backend.to_numpy(dx2))
    np.testing.assert_array_equal(mt.backend.to_numpy(dr1), us)
    assert c1 == c2 == 6


def test_dropout_add_gradcheck(make, device):
    x, r = make(np.linspace(-1, 1, 12).reshape(3, 4)), make(np.ones((3, 4)))
    assert mt.gradcheck(lambda x, r: dropout_add(x, r, 0.3, generator=Generator(2, device)), x, r)


def test_dropout_add_in_eval_or_p_zero_is_the_sum(make, rng):
    x, r = make(rng.standard_normal((3, 4))), make(rng.standard_normal((3, 4)))
    for y in (dropout_add(x, r, 0.5, training=False), dropout_add(x, r, 0.0)):
        np.testing.assert_array_equal(y.numpy(), r.numpy() + x.numpy())


def test_dropout_add_bad_arguments(make, rng):
    x, r = make(rng.standard_normal((2, 3))), make(rng.standard_normal((2, 3)))
    with pytest.raises(ValueError, match=r"dropout_add: p=1.0 .* must be in \[0, 1\)"):
        dropout_add(x, r, 1.0)
    with pytest.raises(ValueError, match="dropout_add: x must be a Tensor"):
        dropout_add([1.0], r)
    with pytest.raises(ValueError, match="dropout_add: residual must be a Tensor"):
        dropout_add(x, np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"residual must match x.*\(3,\)"):
        dropout_add(x, make(np.ones(3)))  # no broadcasting
    with pytest.raises(ValueError, match="residual must match x.*float32"):
        dropout_add(x, make(np.ones((2, 3)), "float32"))
    with pytest.raises(ValueError, match="dropout_add: generator must be a backend.Generator"):
        dropout_add(x, r, 0.5, generator=3)


def test_dropout_add_generator_on_another_device_is_refused(rng):
    pytest.importorskip("array_api_strict")
    x = mt.tensor(rng.standard_normal((2, 2)), device="strict:device1")
    with pytest.raises(DeviceError, match="dropout_add: the generator lives on cpu"):
        dropout_add(x, x, 0.5, generator=Generator(0, "cpu"))


def test_residual_blocks_use_dropout_add_with_unchanged_numbers(rng):
    """nn's Dropout.add is r + Dropout(x) (one draw), so the model's numbers are those of
    the unfused residual r + dropout(sublayer(x)); identity dropout in eval."""
    layer = mt.nn.Dropout(0.4, generator=Generator(3, "cpu"))
    x, r = mt.tensor(rng.standard_normal((2, 5))), mt.tensor(rng.standard_normal((2, 5)))
    expect = r + dropout(x, 0.4, generator=Generator(3, "cpu"))
    np.testing.assert_array_equal(layer.add(x, r).numpy(), expect.numpy())
    layer.eval()
    np.testing.assert_array_equal(layer.add(x, r).numpy(), (r + x).numpy())
