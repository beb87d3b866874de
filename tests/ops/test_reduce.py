"""Reductions sum, mean, max: forward against NumPy, backward against finite differences."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.ops import reduce as R


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), 1])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_reductions(make, rng, name, axis, keepdims):
    x_np = rng.standard_normal((2, 3, 4))
    x = make(x_np)
    fn = getattr(R, name)
    ref = getattr(np, name)(x_np, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(fn(x, axis=axis, keepdims=keepdims).numpy(), ref, rtol=1e-12)
    assert mt.gradcheck(lambda t: fn(t, axis=axis, keepdims=keepdims), x)


def test_max_ties_share_the_gradient(make):
    x = make(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]]))
    R.max(x, axis=1).sum().backward()
    np.testing.assert_allclose(mt.backend.to_numpy(x.grad), [[0, 0.5, 0.5], [1, 0, 0]])


def test_bad_axis_names_the_shape(make):
    with pytest.raises(ValueError, match=r"sum: axis 3 is out of range for a tensor of rank 2"):
        R.sum(make(np.ones((2, 2))), axis=3)
