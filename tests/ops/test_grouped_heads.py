"""repeat_heads (grouped-query attention's key/value heads): which head goes where, PyTorch's
repeat_interleave and transformers' repeat_kv as oracles (values and gradients), gradcheck,
a wrong backward caught, and every bad argument refused in one line naming it."""

from __future__ import annotations

import numpy as np
import pytest
from test_local_attention import refused

import minitransformer as mt
from minitransformer import backend
from minitransformer.errors import ArgumentError, ShapeError
from minitransformer.ops.grouped_heads import RepeatHeads, repeat_heads

SHAPES_AND_GROUPS = [((2, 3, 4, 5), 2), ((1, 1, 3, 4), 4), ((2, 2, 1, 3), 1), ((1, 4, 2, 2), 3)]


@pytest.mark.parametrize("shape, groups", SHAPES_AND_GROUPS)
def test_output_head_j_times_g_plus_r_is_input_head_j(make, rng, shape, groups):
    x = rng.standard_normal(shape)
    y = repeat_heads(make(x), groups).numpy()
    B, h_kv, S, d = shape
    assert y.shape == (B, h_kv * groups, S, d)
    for j in range(h_kv):
        for r in range(groups):
            np.testing.assert_array_equal(y[:, j * groups + r], x[:, j])


@pytest.mark.parametrize("shape, groups", SHAPES_AND_GROUPS)
def test_gradcheck(make, rng, shape, groups):
    assert mt.gradcheck(lambda x: repeat_heads(x, groups), make(rng.standard_normal(shape)))
    assert mt.gradcheck(
        lambda x: RepeatHeads.apply(x, groups=groups), make(rng.standard_normal(shape))
    )


@pytest.mark.parametrize("shape, groups", SHAPES_AND_GROUPS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_matches_torch_repeat_interleave_and_transformers_repeat_kv(rng, shape, groups, dtype):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal(shape).astype(dtype)
    u = rng.standard_normal((shape[0], shape[1] * groups, *shape[2:])).astype(dtype)
    X = mt.tensor(x, requires_grad=True)
    y = repeat_heads(X, groups)
    y.backward(mt.tensor(u))
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.repeat_interleave(tx, groups, dim=1)
    ty.backward(torch.tensor(u))
    assert backend.dtype_name(y.dtype) == backend.dtype_name(X.grad.dtype) == dtype
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())  # a copy: exact
    np.testing.assert_allclose(X.grad, tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    np.testing.assert_array_equal(y.numpy(), llama.repeat_kv(torch.tensor(x), groups).numpy())


def test_the_gradient_of_a_head_sums_its_copies(make):
    x = make(np.zeros((1, 2, 1, 1)))
    u = np.arange(6.0).reshape(1, 6, 1, 1)  # heads 0..5 -> copies of 0, 0, 0, 1, 1, 1
    repeat_heads(x, 3).backward(make(u, requires_grad=False))
    np.testing.assert_array_equal(backend.to_numpy(x.grad).ravel(), [0 + 1 + 2, 3 + 4 + 5])


class RepeatHeadsFirstCopyOnly(RepeatHeads):
    """A backward that keeps the first copy's gradient and drops the others'."""

    @staticmethod
    def backward(ctx, grad):
        B, h, S, d = grad.shape
        g = ctx.groups
        return ctx.xp.reshape(grad, (B, h // g, g, S, d))[:, :, 0, ...]


class RepeatHeadsTiled(RepeatHeads):
    """Sums the copies as if they were tiled (head j of copy r at r*h_kv + j), the layout of
    xp.tile rather than repeat: right only when h_kv = 1 or groups = 1."""

    @staticmethod
    def backward(ctx, grad):
        B, h, S, d = grad.shape
        g = ctx.groups
        return ctx.xp.sum(ctx.xp.reshape(grad, (B, g, h // g, S, d)), axis=1)


@pytest.mark.parametrize("wrong", [RepeatHeadsFirstCopyOnly, RepeatHeadsTiled])
def test_gradcheck_catches_a_wrong_backward(make, rng, wrong):
    x = make(rng.standard_normal((2, 3, 2, 2)))
    with pytest.raises(mt.GradcheckError, match="input 0 at position"):
        mt.gradcheck(lambda x: wrong.apply(x, groups=2), x)


def test_float32_and_integers_keep_their_dtype():
    """A pure copy: any dtype goes through (as split_heads); float32 stays float32."""
    for dtype in ("float32", "int64"):
        x = mt.tensor(np.ones((1, 2, 3, 4)), dtype=dtype)
        assert backend.dtype_name(repeat_heads(x, 2).dtype) == dtype


def f32(*shape):
    return mt.tensor(np.ones(shape, dtype=np.float32))


REFUSALS = {
    "x a list": (
        lambda: repeat_heads([[1.0]], 2),
        ArgumentError,
        r"repeat_heads: x must be a Tensor",
    ),
    "x None": (lambda: repeat_heads(None, 2), ArgumentError, r"repeat_heads: x must be a Tensor"),
    "x 3-d": (
        lambda: repeat_heads(f32(2, 3, 4), 2),
        ShapeError,
        r"repeat_heads: x has shape \(2, 3, 4\); need \(B, h_kv",
    ),
    "x 5-d": (lambda: repeat_heads(f32(1, 2, 3, 4, 5), 2), ShapeError, r"x has shape"),
    "groups 0": (
        lambda: repeat_heads(f32(1, 2, 3, 4), 0),
        ArgumentError,
        r"repeat_heads: groups must be a positive int, got 0",
    ),
    "groups -2": (
        lambda: repeat_heads(f32(1, 2, 3, 4), -2),
        ArgumentError,
        r"groups must be a positive int",
    ),
    "groups 1.5": (
        lambda: repeat_heads(f32(1, 2, 3, 4), 1.5),
        ArgumentError,
        r"groups must be a positive int",
    ),
    "groups 2.0": (
        lambda: repeat_heads(f32(1, 2, 3, 4), 2.0),
        ArgumentError,
        r"groups must be a positive int",
    ),
    "groups True": (
        lambda: repeat_heads(f32(1, 2, 3, 4), True),
        ArgumentError,
        r"groups must be a positive int",
    ),
    "groups str": (
        lambda: repeat_heads(f32(1, 2, 3, 4), "2"),
        ArgumentError,
        r"groups must be a positive int",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS.values()), ids=list(REFUSALS))
def test_bad_arguments_are_refused_in_one_line_naming_them(case):
    call, kind, pattern = case
    error = refused(kind, pattern, call)
    assert type(error) is kind
    assert "h // h_kv" in str(error) or "groups" not in pattern


def test_numpy_groups_and_empty_axes_are_fine():
    assert repeat_heads(f32(1, 2, 3, 4), np.int64(3)).shape == (1, 6, 3, 4)
    assert repeat_heads(f32(0, 2, 3, 4), 2).shape == (0, 4, 3, 4)
    assert repeat_heads(f32(1, 2, 0, 4), 2).shape == (1, 4, 0, 4)
