"""cross_entropy: forward vs NumPy, gradcheck, ignore_index, label smoothing, dtypes,
stability, bad inputs, and PyTorch as an oracle."""

from __future__ import annotations

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.errors import DTypeError, ShapeError, TokenIdError
from minitransformer.ops.loss import CrossEntropy, cross_entropy

IGN = -100


def ref_ce(x, t, eps=0.0, ignore_index=None, reduction="mean"):
    """Plain NumPy: -sum_c q_c log p_c per row, q = (1 - eps) one_hot + eps / V."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(-1, keepdims=True)
    logp = x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))
    valid = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    safe = np.where(valid, t, 0)
    nll = -np.take_along_axis(logp, safe[..., None], -1)[..., 0]
    loss = np.where(valid, (1 - eps) * nll + eps * -logp.mean(-1), 0.0)
    if reduction == "none":
        return loss
    return loss.sum() / (max(valid.sum(), 1) if reduction == "mean" else 1)


def data(rng, shape, V, ignore=False):
    x = rng.standard_normal((*shape, V)) * 2
    t = rng.integers(0, V, shape)
    if ignore:
        t.reshape(-1)[::3] = IGN
    return x, t


def ids(t, device):
    return mt.tensor(t, dtype="int64", device=device)


def grad_of(t):
    return mt.backend.to_numpy(t.grad)


CASES = [  # (label_smoothing, ignore_index)
    (0.0, None),
    (0.1, None),
    (0.0, IGN),
    (0.1, IGN),
]


@pytest.mark.parametrize(("eps", "ign"), CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6,), (2, 3)])
def test_forward_matches_numpy(device, make, rng, eps, ign, reduction, shape):
    x, t = data(rng, shape, 5, ignore=ign is not None)
    loss = cross_entropy(make(x), ids(t, device), eps, ign, reduction)
    assert loss.shape == (() if reduction != "none" else shape)
    np.testing.assert_allclose(loss.numpy(), ref_ce(x, t, eps, ign, reduction), atol=1e-12)


@pytest.mark.parametrize(("eps", "ign"), CASES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_gradcheck(device, make, rng, eps, ign, reduction, shape):
    x, t = data(rng, shape, 4, ignore=ign is not None)
    target = ids(t, device)
    fn = lambda z: cross_entropy(z, target, eps, ign, reduction)  # noqa: E731
    assert mt.gradcheck(fn, make(x))


def test_target_as_raw_array_and_no_grad(device, make, rng):
    x, t = data(rng, (2, 3), 5)
    raw = mt.backend.asarray(t.astype(np.int32), device=device)  # a raw int32 array
    loss = cross_entropy(make(x), raw)
    np.testing.assert_allclose(loss.numpy(), ref_ce(x, t), atol=1e-12)
    with mt.no_grad():
        assert not cross_entropy(make(x), raw).requires_grad


def test_every_target_ignored_gives_zero_not_nan(device, make, rng):
    x, _ = data(rng, (2, 3), 5)
    z = make(x)
    loss = cross_entropy(z, ids(np.full((2, 3), IGN), device), ignore_index=IGN)
    loss.backward()
    assert loss.item() == 0.0 and np.all(grad_of(z) == 0)


def test_ignored_rows_have_zero_gradient_and_mean_over_the_rest(device, make, rng):
    x, t = data(rng, (2, 4), 5, ignore=True)
    x[0, 0] = -np.inf  # an ignored, fully masked row stays NaN-free
    z = make(x)
    loss = cross_entropy(z, ids(t, device), 0.1, IGN)
    loss.backward()
    g = grad_of(z)
    assert np.all(np.isfinite(g)) and np.all(g[t == IGN] == 0)
    keep = t != IGN
    assert np.isclose(loss.item(), ref_ce(x[keep], t[keep], 0.1))


def test_stable_at_huge_logits(device, make):
    x = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4 + 3.0], [0.0, -np.inf, 1.0]])
    t = np.array([0, 1, 2])
    for dtype in ("float32", "float64"):
        z = make(x, dtype=dtype)
        loss = cross_entropy(z, ids(t, device), reduction="none")
        loss.backward(mt.tensor(np.ones(3), dtype=dtype, device=device))
        finite = np.isfinite(x)
        np.testing.assert_allclose(
            loss.numpy(), ref_ce(np.where(finite, x, -1e300), t, 0, None, "none"), rtol=1e-6
        )
        assert np.all(np.isfinite(grad_of(z)))


def test_float32_end_to_end_and_agrees_with_float64(device, make, rng):
    x, t = data(rng, (3, 4), 11, ignore=True)
    out = {}
    for dtype in ("float32", "float64"):
        z = make(x, dtype=dtype)
        loss, ctx = CrossEntropy.run(
            z, ids(t, device).data, label_smoothing=0.1, ignore_index=IGN, reduction="mean"
        )
        saved = [a for a in ctx.saved if a is not None and "float" in str(a.dtype)]
        assert saved and all(mt.backend.dtype_name(a.dtype) == dtype for a in saved)
        loss.backward()
        assert mt.backend.dtype_name(loss.dtype) == dtype
        assert mt.backend.dtype_name(z.grad.dtype) == dtype
        out[dtype] = (loss.item(), grad_of(z))
    assert abs(out["float32"][0] - out["float64"][0]) < 1e-5
    np.testing.assert_allclose(out["float32"][1], out["float64"][1], atol=1e-6)


@pytest.mark.parametrize("eps, ignore", [(0.0, False), (0.1, True)])
def test_second_backward_with_retain_graph_gives_the_same_gradient(device, make, rng, eps, ignore):
    """Backward leaves the saved softmax intact, so the graph can be walked twice."""
    x, t = data(rng, (2, 3), 5, ignore=ignore)
    z = make(x)
    loss = cross_entropy(z, ids(t, device), label_smoothing=eps, ignore_index=IGN)
    loss.backward(retain_graph=True)
    first = mt.backend.to_numpy(z.grad).copy()
    z.grad = None
    loss.backward()
    np.testing.assert_array_equal(mt.backend.to_numpy(z.grad), first)


def test_bad_inputs(device, make):
    z = make(np.zeros((2, 3, 5)))
    with pytest.raises(DTypeError, match="integer class ids, got dtype float64"):
        cross_entropy(z, make(np.zeros((2, 3)), requires_grad=False))
    with pytest.raises(ShapeError, match=r"target has shape \(6,\).*\(2, 3, 5\).*\(2, 3\)"):
        cross_entropy(z, ids(np.zeros(6), device))
    with pytest.raises(TokenIdError, match=r"target id 7 is outside \[0, 5\).*V = 5"):
        cross_entropy(z, ids([[0, 1, 2], [3, 7, 4]], device))
    with pytest.raises(TokenIdError, match=r"id -3 is outside .*position \(0, 2\)"):
        cross_entropy(z, ids([[0, 1, -3], [3, 4, 4]], device))
    with pytest.raises(TokenIdError, match="is not ignore_index=0"):
        cross_entropy(z, ids([[0, 1, -3], [3, 4, 4]], device), ignore_index=0)
    with pytest.raises(ValueError, match="reduction='avg'"):
        cross_entropy(z, ids(np.zeros((2, 3)), device), reduction="avg")
    cross_entropy(z, ids([[0, 1, IGN], [3, 4, 4]], device), ignore_index=IGN)  # allowed


@pytest.mark.parametrize(("eps", "ign"), CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_matches_torch(device, make, rng, eps, ign, reduction):
    torch = pytest.importorskip("torch")
    x, t = data(rng, (2, 5), 7, ignore=ign is not None)  # (B, T, V) logits
    z = make(x)
    loss = cross_entropy(z, ids(t, device), eps, ign, reduction)
    g = rng.standard_normal(loss.shape)
    loss.backward(mt.tensor(g, dtype="float64", device=device))
    xt = torch.tensor(x, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(
        xt.reshape(-1, 7),
        torch.tensor(t.reshape(-1)),
        ignore_index=IGN if ign else -100,
        label_smoothing=eps,
        reduction=reduction,
    )
    lt.backward(torch.tensor(g.reshape(lt.shape)))
    np.testing.assert_allclose(
        loss.numpy().reshape(-1), lt.detach().numpy().reshape(-1), rtol=0, atol=1e-10
    )
    np.testing.assert_allclose(grad_of(z), xt.grad.numpy(), rtol=0, atol=1e-10)


def test_target_on_another_device_is_refused(device, make):
    if device == "cpu":
        pytest.skip("needs a second device")
    other = "strict:device2" if device != "strict:device2" else "strict:device1"
    target = mt.backend.asarray(np.zeros(2, dtype=np.int64), device=other)
    with pytest.raises(mt.errors.DeviceError, match="different devices"):
        cross_entropy(make(np.zeros((2, 5))), target)


def test_host_target_is_checked_on_the_host_and_uploaded(device, make):
    logits = make(np.zeros((2, 5)))
    loss = cross_entropy(logits, np.array([1, 4]))  # NumPy ids, a device's logits
    assert loss.device == device
    with pytest.raises(mt.errors.TokenIdError, match="outside"):
        cross_entropy(logits, np.array([1, 5]))
