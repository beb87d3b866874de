"""Strided attention (Child et al. 2019): equal (outputs and gradients) to the plain op under
the equivalent dense mask in float64 to 1e-12, causal or not, T == S and T < S, strides of 1,
of a size that does not divide S and wider than S, with key padding masks; gradcheck on q,
k, v; rows with nothing to read give 0 and gradient 0; float32; no (T, S) allocation at
T = S = 4096, and a decoding step (T = 1) costs O(stride + S/stride); refusals in one line.
The helpers are test_local_attention.py's."""

from __future__ import annotations

import numpy as np
import pytest
from test_local_attention import (
    MASKS,
    SIZES,
    assert_equal,
    bad_arguments,
    compare,
    key_masks,
    peak_bytes,
    qkv,
    refused,
)

import minitransformer as mt
from minitransformer.errors import ArgumentError
from minitransformer.ops.strided_attention import strided_attention


def strided(T, S, stride, causal):
    """The dense (T, S) pattern: query i at p = i + S - T reads j with |p - j| < stride or
    (p - j) % stride == 0 (causal: and j <= p)."""
    p, j = np.arange(T)[:, None] + S - T, np.arange(S)[None, :]
    allowed = (np.abs(p - j) < stride) | ((p - j) % stride == 0)
    return allowed & (j <= p) if causal else allowed


def op(stride, causal):
    return lambda q, k, v, mask: strided_attention(q, k, v, stride, causal=causal, mask=mask)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("stride", [1, 2, 3, 4, 20])  # 3, 4 do not divide S = 7 or 10; 20 > S
@pytest.mark.parametrize(("T", "S"), [*SIZES, (10, 13)])
def test_equals_the_plain_op_under_the_strided_mask(make, T, S, stride, causal):
    for kind in MASKS:
        mask = key_masks(S)[kind]
        pattern = strided(T, S, stride, causal)
        assert_equal(*compare(make, op(stride, causal), pattern, T, S, mask))


def test_the_pattern_reads_the_band_and_the_columns(make):
    """At T = S = 12, stride 4, query 9 reads keys 6 ... 12 (band) and 1, 5 (columns): all
    scores equal, so its weights are 1/8 on exactly those keys, 1/6 with causal."""
    q = make(np.zeros((1, 1, 12, 2)))
    k = make(np.zeros((1, 1, 12, 2)))
    v = make(np.eye(12)[None, None])  # out row = the attention weights
    out = strided_attention(q, k, v, 4).numpy()[0, 0]
    np.testing.assert_allclose(out[9], np.isin(np.arange(12), [1, 5, 6, 7, 8, 9, 10, 11]) / 8)
    out = strided_attention(q, k, v, 4, causal=True).numpy()[0, 0]
    np.testing.assert_allclose(out[9], np.isin(np.arange(12), [1, 5, 6, 7, 8, 9]) / 6)


GRADCHECKS = [  # (T, S, stride, causal, key mask): T == S and T < S, 1, 3 (not dividing 8), > S
    (6, 6, 1, False, "pad"), (6, 6, 2, True, "first"), (8, 8, 3, False, "pad"),
    (8, 8, 3, True, "none"), (3, 8, 3, False, "first"), (3, 8, 2, True, "pad"),
    (1, 7, 3, True, "pad"), (4, 5, 9, False, "shared"),
]  # fmt: skip


@pytest.mark.parametrize(("T", "S", "stride", "causal", "kind"), GRADCHECKS)
def test_gradcheck(make, rng, T, S, stride, causal, kind):
    q, k, v = qkv(rng, B=1, H=2, T=T, S=S, d_v=2)
    mask = key_masks(S, B=1)[kind]
    m = None if mask is None else make(mask, "bool", requires_grad=False).data
    fn = lambda q, k, v: strided_attention(q, k, v, stride, causal=causal, mask=m)  # noqa: E731
    assert mt.gradcheck(fn, make(q), make(k), make(v))


def test_rows_with_nothing_to_read_give_zero(make):
    """The first two keys masked, causal: the queries at positions 0, 1 read nothing; a wholly
    masked sequence reads nothing: out 0 and gradients 0, not NaN."""
    S = 9
    pattern = strided(S, S, 3, True)
    got, _ = compare(make, op(3, True), pattern, S, S, key_masks(S)["first"])
    assert np.all(got[0][:, :, :2] == 0) and np.all(got[1][:, :, :2] == 0)
    got, _ = compare(make, op(3, False), strided(S, S, 3, False), S, S, key_masks(S)["empty"])
    assert all(np.all(g[1] == 0) for g in got)  # sequence 1: out, dq, dk, dv all 0


def test_float32(make):
    args = (op(3, True), strided(7, 11, 3, True), 7, 11, key_masks(11)["pad"])
    _, want = compare(make, *args)
    got32, _ = compare(make, *args, dtype="float32")
    for a, b in zip(want, got32, strict=True):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_never_allocates_a_T_by_S_array(causal):
    """T = S = 4096, d = 16, stride 64: the pattern itself has T·(3·stride + S/stride) entries
    (3b band keys and S/stride column keys per query), 1/16 of T·S; forward and backward hold
    a few float64 arrays of that size (about 52 bytes an entry), less than half of one (T, S)
    float64 array (134 MB); a decoding step (T = 1, S = 2^17, stride 256) holds
    O(stride + S/stride), not O(S·d)."""
    rng = np.random.default_rng(0)
    q, k, v = (mt.tensor(a, requires_grad=True) for a in qkv(rng, 1, 1, 4096, 4096, 16, 16))
    mask = np.ones((1, 1, 1, 4096), bool)

    def step():
        strided_attention(q, k, v, 64, causal=causal, mask=mask).sum().backward()

    peak = peak_bytes(step)
    assert peak < 4096 * 4096 * 8 / 2 and peak < 80 * 4096 * (3 * 64 + 4096 // 64)
    q, k, v = (mt.tensor(a) for a in qkv(rng, 1, 1, 1, 2**17, 16, 16))  # k, v: 16 MB each
    assert peak_bytes(lambda: strided_attention(q, k, v, 256, causal=causal)) < 2**20


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3", None])
def test_bad_stride_refused(make, rng, bad):
    q, k, v = (make(a) for a in qkv(rng))
    message = r"^strided_attention: stride must be a positive int, got .*; the band's width"
    refused(ArgumentError, message, lambda: strided_attention(q, k, v, bad))


def test_bad_arguments_refused(make, rng):
    for error, message, q, k, v, kwargs in bad_arguments(make, rng):
        call = lambda: strided_attention(q, k, v, 2, **kwargs)  # noqa: B023, E731
        refused(error, "^strided_attention: " + message, call)
