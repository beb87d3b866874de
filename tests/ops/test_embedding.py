"""embedding: gather forward, scatter-add backward (repeats accumulate), oracle, bad ids."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import DTypeError, ShapeError, TokenIdError
from minitransformer.ops.embedding import embedding


def ids_on(device, ids):
    return mt.tensor(np.asarray(ids, dtype=np.int64), dtype="int64", device=device)


@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 2, 2)])
def test_forward_matches_numpy(make, rng, device, shape):
    w = rng.standard_normal((7, 4))
    ids = rng.integers(0, 7, size=shape)
    y = embedding(ids_on(device, ids), make(w))
    assert y.shape == (*shape, 4) and y.device == make(w).device
    np.testing.assert_array_equal(y.numpy(), w[ids])


def test_raw_array_ids_and_int32(make, rng, device):
    w = make(rng.standard_normal((5, 3)))
    raw = ids_on(device, [[4, 0, 2]]).data
    np.testing.assert_array_equal(embedding(raw, w).numpy(), w.numpy()[[[4, 0, 2]]])
    ids32 = mt.tensor(np.array([1, 3]), dtype="int32", device=device)
    np.testing.assert_array_equal(embedding(ids32, w).numpy(), w.numpy()[[1, 3]])


def test_repeated_ids_accumulate(make, rng, device):
    w = make(rng.standard_normal((6, 3)))
    ids = np.array([[1, 1, 2], [5, 1, 1]])
    u = rng.standard_normal((2, 3, 3))
    embedding(ids_on(device, ids), w).backward(make(u, requires_grad=False))
    expected = np.zeros((6, 3))
    np.add.at(expected, ids.ravel(), u.reshape(-1, 3))
    grad = mt.backend.to_numpy(w.grad)
    np.testing.assert_allclose(grad, expected, atol=1e-12)
    np.testing.assert_allclose(grad[1], u[0, 0] + u[0, 1] + u[1, 1] + u[1, 2], atol=1e-12)
    assert np.all(grad[[0, 3, 4]] == 0)


def test_gradcheck(make, rng, device):
    ids = ids_on(device, rng.integers(0, 4, size=(2, 3)))
    assert mt.gradcheck(lambda w: embedding(ids, w), make(rng.standard_normal((4, 3))))


def test_torch_oracle(make, rng, device):
    torch = pytest.importorskip("torch")
    w, ids = rng.standard_normal((8, 5)), rng.integers(0, 8, size=(3, 4))
    u = rng.standard_normal((3, 4, 5))
    W = make(w)
    y = embedding(ids_on(device, ids), W)
    y.backward(make(u, requires_grad=False))
    tw = torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.embedding(torch.tensor(ids), tw)
    ty.backward(torch.tensor(u))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), atol=1e-10)
    np.testing.assert_allclose(mt.backend.to_numpy(W.grad), tw.grad.numpy(), atol=1e-10)


def test_float32_stays_float32(make, rng, device):
    w = make(rng.standard_normal((4, 2)), "float32")
    y = embedding(ids_on(device, [0, 3, 3]), w)
    assert mt.backend.dtype_name(y.dtype) == "float32"
    y.backward(make(np.ones((3, 2)), "float32", requires_grad=False))
    assert mt.backend.dtype_name(w.grad.dtype) == "float32"
    np.testing.assert_allclose(mt.backend.to_numpy(w.grad)[3], [2, 2])


def test_bad_input(make, rng, device):
    w = make(rng.standard_normal((5, 3)))
    with pytest.raises(DTypeError, match=r"float64.*astype\(int64\)"):
        embedding(mt.tensor(np.array([1.0, 2.0]), dtype="float64", device=device), w)
    with pytest.raises(TokenIdError, match=r"\[0, 5\).*smallest offending id -2, largest 9"):
        embedding(ids_on(device, [[0, -2], [9, 4]]), w)
    with pytest.raises(TokenIdError, match=r"V=5.*smallest offending id 5, largest 5"):
        embedding(ids_on(device, [5, 1]), w)
    with pytest.raises(ShapeError, match=r"weight has shape \(5,\)"):
        embedding(ids_on(device, [0]), make(np.zeros(5)))


def test_the_gradient_has_the_same_bits_every_time(rng, device):
    """Many repeats of few ids, float32: the scatter-add gives the same bits on every call
    (on a GPU atomic adds would not: a resumed run must repeat the run it continues)."""
    from minitransformer import backend

    ids = backend.asarray(rng.integers(0, 7, size=4096), device=device)
    values = backend.asarray(rng.standard_normal((4096, 24)), dtype="float32", device=device)
    xp = backend.namespace(values)
    runs = [
        backend.to_numpy(backend.scatter_add(xp.zeros((7, 24), dtype=xp.float32,
                                                      device=values.device), ids, values))
        for _ in range(3)
    ]  # fmt: skip
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])
    want = np.zeros((7, 24))
    np.add.at(want, backend.to_numpy(ids), backend.to_numpy(values).astype(np.float64))
    np.testing.assert_allclose(runs[0], want, rtol=1e-4, atol=1e-4)
