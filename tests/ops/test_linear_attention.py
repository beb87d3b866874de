"""Linear attention: equal (outputs and gradients) to the naive formula written with the (T, S)
matrix A_ij = phi(q_i) · phi(k_j) in float64 to 1e-12, causal or not, T == S and T < S, with
key padding masks; gradcheck on q, k, v; rows with nothing to read give 0 and gradient 0;
float32; no (T, S) allocation at T = S = 4096; refusals; a broken backward is caught.
``qkv``, ``key_masks`` and ``MASKS`` are test_local_attention.py's."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from test_local_attention import MASKS, key_masks, qkv

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.errors import ArgumentError, ShapeError
from minitransformer.gradcheck import GradcheckError
from minitransformer.ops import feature_map as feature_map_module
from minitransformer.ops import linear_attention_sums
from minitransformer.ops.linear_attention import linear_attention

SIZES = [(5, 5), (3, 7), (1, 6)]  # (T, S): T == S, and T < S (cached decoding)


def naive(q, k, v, causal, mask):
    """out = A v / rowsum(A), A_ij = phi(q_i) · phi(k_j) where key j may be read (else 0),
    built with the library's own differentiable ops and a dense (T, S) array; phi(x) =
    elu(x) + 1 = relu(x) + e^(-relu(-x)). A row with rowsum 0 gives 0."""
    T, S = q.shape[-2], k.shape[-2]
    allowed = np.ones((T, S), bool)
    if causal:
        allowed = np.tril(allowed, k=S - T)  # query i at position i + S - T reads j <= it
    if mask is not None:
        allowed = allowed & mt.backend.to_numpy(mask)
    like = dict(dtype=q.dtype, device=q.device)

    def phi(x):
        return F.relu(x) + F.exp(-F.relu(-x))

    A = F.matmul(phi(q), F.transpose(phi(k))) * mt.tensor(allowed.astype(float), **like)
    den = F.sum(A, axis=-1, keepdims=True)
    empty = mt.tensor((mt.backend.to_numpy(den.data) == 0).astype(float), **like)
    return F.matmul(A, v) / (den + empty)


def outputs_and_grads(fn, make, q, k, v, u, dtype="float64"):
    Q, K, V = make(q, dtype), make(k, dtype), make(v, dtype)
    out = fn(Q, K, V)
    out.backward(make(u, dtype, requires_grad=False))
    return [out.numpy()] + [mt.backend.to_numpy(t.grad) for t in (Q, K, V)]


@pytest.fixture(params=[2, 3, 64], ids=["chunk2", "chunk3", "chunk64"])
def chunk(request, monkeypatch):
    """The causal running sums in chunks of 2 and 3 positions (several chunks, a ragged last
    one) and of the default 64 (one chunk at these sizes)."""
    monkeypatch.setattr(linear_attention_sums, "CHUNK", request.param)
    return request.param


@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("T, S", SIZES)
@pytest.mark.parametrize("causal", [False, True])
def test_equals_the_naive_formula_in_float64(make, rng, causal, T, S, kind, chunk):
    q, k, v = qkv(rng, T=T, S=S)
    mask = key_masks(S)[kind]
    m = None if mask is None else make(mask, "bool", requires_grad=False).data
    u = rng.standard_normal((2, 2, T, 4))
    want = outputs_and_grads(lambda q, k, v: naive(q, k, v, causal, m), make, q, k, v, u)
    got = outputs_and_grads(
        lambda q, k, v: linear_attention(q, k, v, causal=causal, mask=m), make, q, k, v, u
    )
    for name, a, b in zip(("out", "dq", "dk", "dv"), want, got, strict=True):
        assert a.shape == b.shape and np.all(np.isfinite(b)), name
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("kind", ["none", "pad", "first"])
@pytest.mark.parametrize("T, S", [(4, 4), (2, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck(make, rng, causal, T, S, kind, monkeypatch):
    monkeypatch.setattr(linear_attention_sums, "CHUNK", 3)  # T = 4: a full and a ragged chunk
    q, k, v = qkv(rng, B=2, H=1, T=T, S=S, d_k=3, d_v=2)
    mask = key_masks(S)[kind]
    m = None if mask is None else make(mask, "bool", requires_grad=False).data
    fn = lambda q, k, v: linear_attention(q, k, v, causal=causal, mask=m)  # noqa: E731
    assert mt.gradcheck(fn, make(q), make(k), make(v))


@pytest.mark.parametrize("causal", [False, True])
def test_a_row_with_nothing_to_read_gives_zero_and_zero_gradient(make, rng, causal):
    q, k, v = qkv(rng, T=6, S=6)
    empty = np.ones((2, 1, 1, 6), bool)
    empty[1] = False  # sequence 1 reads nothing at all
    empty[0, ..., :2] = False  # sequence 0: keys 0, 1 masked
    Q, K, V = make(q), make(k), make(v)
    out = linear_attention(Q, K, V, causal=causal, mask=make(empty, "bool", False))
    out.backward(make(rng.standard_normal((2, 2, 6, 4)), requires_grad=False))
    out, dq, dk, dv = out.numpy(), *(mt.backend.to_numpy(t.grad) for t in (Q, K, V))
    assert np.all(np.isfinite(out)) and np.all(out[1] == 0)
    assert np.all(dq[1] == 0) and np.all(dk[1] == 0) and np.all(dv[1] == 0)
    assert np.all(dk[0, :, :2] == 0) and np.all(dv[0, :, :2] == 0)  # masked keys: no gradient
    if causal:  # queries 0 and 1 read only keys 0, 1, both masked
        assert np.all(out[0, :, :2] == 0) and np.all(dq[0, :, :2] == 0)


@pytest.mark.parametrize("causal", [False, True])
def test_float32_and_any_leading_axes(make, rng, causal):
    q, k, v = qkv(rng, T=4, S=6)
    q, k = 3 * q, 3 * k  # large features: e^x and x + 1 over a wide range
    mask = key_masks(6)["pad"]
    u = rng.standard_normal((2, 2, 4, 4))
    fn = lambda q, k, v: linear_attention(q, k, v, causal=causal, mask=m)  # noqa: E731
    m = make(mask, "bool", False).data
    ref = outputs_and_grads(fn, make, q, k, v, u)
    got = outputs_and_grads(fn, make, q, k, v, u, dtype="float32")
    for a, b in zip(ref, got, strict=True):
        assert b.dtype == np.float32 and np.all(np.isfinite(b))
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(a).max()))
    for lead in [(0, 0), (0,)]:  # (T, d) and (H, T, d): any leading axes
        q2, k2, v2 = (make(x[lead]) for x in (q, k, v))
        out = linear_attention(q2, k2, v2, causal=causal)
        want = naive(q2, k2, v2, causal, None).numpy()
        np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-12)


def test_many_chunks_at_the_default_size(make, rng):
    """T = 150, S = 170: three chunks of 64 (the last ragged) after 20 earlier keys."""
    q, k, v = qkv(rng, B=1, H=1, T=150, S=170)
    mask = np.arange(170) % 7 != 3
    u = rng.standard_normal((1, 1, 150, 4))
    want = outputs_and_grads(lambda q, k, v: naive(q, k, v, True, mask), make, q, k, v, u)
    m = make(mask, "bool", False).data
    got = outputs_and_grads(
        lambda q, k, v: linear_attention(q, k, v, causal=True, mask=m), make, q, k, v, u
    )
    for name, a, b in zip(("out", "dq", "dk", "dv"), want, got, strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("causal", [False, True])
def test_never_allocates_a_T_by_S_array(causal):
    """T = S = 4096, d = 16: one (T, S) float64 array is 128 MiB; forward and backward
    together stay far below it (the prefix sums are (T, d, d), 8 MiB)."""
    rng = np.random.default_rng(0)
    T = S = 4096
    q, k, v = (mt.tensor(rng.standard_normal((1, 1, n, 16)), requires_grad=True) for n in (T, S, S))
    mask = np.ones((1, 1, 1, S), bool)
    mask[..., -100:] = False
    tracemalloc.start()
    try:
        out = linear_attention(q, k, v, causal=causal, mask=mask)
        out.sum().backward()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < T * S * 8 / 3, f"peak {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("bad", ["relu", "ELU1", "", "elu"])
def test_an_unknown_feature_map_is_refused_with_the_list(make, rng, bad):
    q, k, v = (make(a) for a in qkv(rng, T=5, S=7))
    with pytest.raises(
        ArgumentError, match=r"feature_map .* is unknown; the known ones are 'elu1'"
    ):
        linear_attention(q, k, v, feature_map=bad)


@pytest.mark.parametrize("bad", [1, None, b"elu1", ["elu1"]])
def test_a_feature_map_that_is_not_a_str_is_refused(make, rng, bad):
    q, k, v = (make(a) for a in qkv(rng, T=5, S=7))
    with pytest.raises(ArgumentError, match="feature_map must be a str naming the feature map"):
        linear_attention(q, k, v, feature_map=bad)


def test_bad_shapes_masks_and_flags_are_refused(make, rng):
    q, k, v = (make(a) for a in qkv(rng, T=5, S=7))
    with pytest.raises(ShapeError, match="linear_attention: .* do not fit"):
        linear_attention(q, make(np.zeros((2, 2, 7, 5))), v)  # d_k of k differs from q's
    with pytest.raises(ShapeError, match="linear_attention: .* do not fit"):
        linear_attention(q, k, make(np.zeros((2, 2, 6, 4))))  # S of v differs from k's
    with pytest.raises(ShapeError, match="linear_attention: leading"):
        linear_attention(q, k, make(np.zeros((3, 2, 7, 4))))
    causal_mask = make(np.tril(np.ones((5, 7), bool), k=2), "bool", False)
    with pytest.raises(ShapeError, match="has a query axis of 5.*pass causal=True"):
        linear_attention(q, k, v, mask=causal_mask)
    for bad in (1, "yes", None):
        with pytest.raises(ArgumentError, match="linear_attention: causal must be True or False"):
            linear_attention(q, k, v, causal=bad)
    with pytest.raises(ShapeError, match="T = 7 queries but S = 5 keys; the queries are the last"):
        linear_attention(make(np.zeros((2, 2, 7, 3))), k[..., :5, :], v[..., :5, :], causal=True)


def test_a_wrong_backward_is_caught(make, rng, monkeypatch):
    """Take phi'(x) = 1 everywhere (forget the e^x of the negative side): gradcheck notices."""
    q, k, v = qkv(rng, B=1, H=1, T=3, S=4)
    wrong = (feature_map_module.elu1, lambda xp, x, y: xp.ones_like(x))
    monkeypatch.setitem(feature_map_module.FEATURE_MAPS, "elu1", wrong)
    fn = lambda q, k, v: linear_attention(q, k, v, causal=True)  # noqa: E731
    with pytest.raises(GradcheckError):
        mt.gradcheck(fn, make(q), make(k), make(v))
