"""Shape ops: reshape, transpose/permute, getitem, concat, split/merge heads."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import ShapeError
from minitransformer.ops import shape as S


def test_reshape(make, rng):
    x_np = rng.standard_normal((2, 3, 4))
    x = make(x_np)
    np.testing.assert_array_equal(x.reshape(6, 4).numpy(), x_np.reshape(6, 4))
    np.testing.assert_array_equal(x.reshape((4, -1)).numpy(), x_np.reshape(4, -1))
    assert mt.gradcheck(lambda t: t.reshape(4, 6), x)


def test_reshape_error_names_shapes(make):
    with pytest.raises(ShapeError, match=r"shape \(2, 3\) \(6 elements\) into \(4, 2\)"):
        make(np.ones((2, 3))).reshape(4, 2)


def test_transpose_and_permute(make, rng):
    x_np = rng.standard_normal((2, 3, 4))
    x = make(x_np)
    np.testing.assert_array_equal(x.T.numpy(), np.swapaxes(x_np, -1, -2))
    np.testing.assert_array_equal(x.permute(2, 0, 1).numpy(), x_np.transpose(2, 0, 1))
    assert mt.gradcheck(lambda t: t.permute(1, 2, 0), x)
    assert mt.gradcheck(lambda t: S.transpose(t, 0, 2), x)
    with pytest.raises(ShapeError, match=r"got axes \(1, 0\) for a tensor of shape \(2, 3, 4\)"):
        x.permute(1, 0)


@pytest.mark.parametrize(
    "index",
    [0, (slice(None), 1), (Ellipsis, slice(1, 3)), (slice(None, None, 2), None, 0), (1, 2, 3)],
)
def test_getitem(make, rng, index):
    x_np = rng.standard_normal((3, 4, 5))
    x = make(x_np)
    np.testing.assert_array_equal(x[index].numpy(), x_np[index])
    assert mt.gradcheck(lambda t: t[index], x)


def test_getitem_rejects_fancy_indexing(make):
    x = make(np.ones((3, 3)))
    with pytest.raises(TypeError, match="use F.embedding"):
        x[[0, 1]]


def test_concat(make, rng):
    parts = [rng.standard_normal((2, n, 3)) for n in (1, 2, 3)]
    ts = [make(p) for p in parts]
    np.testing.assert_array_equal(S.concat(ts, axis=1).numpy(), np.concatenate(parts, axis=1))
    assert mt.gradcheck(lambda a, b, c: S.concat([a, b, c], axis=-2), *ts)


def test_concat_errors(make):
    with pytest.raises(ShapeError, match="differ outside axis 0"):
        S.concat([make(np.ones((2, 3))), make(np.ones((2, 4)))], axis=0)
    with pytest.raises(ShapeError, match="same rank"):
        S.concat([make(np.ones((2, 3))), make(np.ones(3))])


def test_split_and_merge_heads(make, rng):
    x_np = rng.standard_normal((2, 3, 8))
    x = make(x_np)
    heads = S.split_heads(x, 4)  # (B, H, L, d) = (2, 4, 3, 2)
    np.testing.assert_array_equal(heads.numpy(), x_np.reshape(2, 3, 4, 2).transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(S.merge_heads(heads).numpy(), x_np)
    assert mt.gradcheck(lambda t: S.split_heads(t, 4), x)
    assert mt.gradcheck(S.merge_heads, make(rng.standard_normal((2, 4, 3, 2))))
    with pytest.raises(ShapeError, match="divisible by h = 3"):
        S.split_heads(x, 3)
    with pytest.raises(ShapeError, match=r"need \(B, H, L, d\)"):
        S.merge_heads(x)
