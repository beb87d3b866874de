"""Local attention: equal (outputs and gradients) to the plain op under the equivalent dense
band mask in float64 to 1e-12, causal or not, T == S and T < S (cached decoding), windows of
1, of a block that does not divide S and wider than S, with key padding masks; gradcheck on
q, k, v; rows with nothing to read give 0 and gradient 0; float32; no (T, S) allocation at
T = S = 4096, and a decoding step (T = 1) costs O(window), not O(S); refusals in one line.
``qkv``, ``key_masks``, ``compare`` and ``peak_bytes`` serve test_strided_attention.py too."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer.errors import ArgumentError, DTypeError, ShapeError
from minitransformer.ops import local_attention as local_module
from minitransformer.ops.local_attention import local_attention


def qkv(rng, B=2, H=2, T=7, S=7, d_k=3, d_v=4):
    return (
        rng.standard_normal((B, H, T, d_k)),
        rng.standard_normal((B, H, S, d_k)),
        rng.standard_normal((B, H, S, d_v)),
    )


def key_masks(S, B=2):
    """None; padding at the end of one sequence; the first two keys masked (a causal query at
    position 0 or 1 then reads nothing); a whole sequence masked; one (S,) mask for all."""
    pad = np.ones((B, 1, 1, S), bool)
    pad[0, ..., -3:] = False
    first = np.ones((B, 1, 1, S), bool)
    first[..., :2] = False
    empty = np.ones((B, 1, 1, S), bool)
    empty[-1] = False
    shared = np.arange(S) % 3 != 1
    return {"none": None, "pad": pad, "first": first, "empty": empty, "shared": shared}


MASKS = ["none", "pad", "first", "empty", "shared"]
SIZES = [(7, 7), (3, 10), (1, 9)]  # (T, S): T == S, and T < S (the queries are the last T)


def band(T, S, window, causal):
    """The dense (T, S) bool pattern: query i at p = i + S - T reads |p - j| <= window."""
    p, j = np.arange(T)[:, None] + S - T, np.arange(S)[None, :]
    allowed = np.abs(p - j) <= window
    return allowed & (j <= p) if causal else allowed


def compare(make, op, pattern, T, S, mask, dtype="float64"):
    """([out, dq, dk, dv] of ``op(q, k, v, mask)``, the same of the plain op under the dense
    mask ``pattern`` (T, S) & the key mask), under one upstream gradient, as host arrays."""
    rng = np.random.default_rng(T * 100 + S)
    q, k, v = qkv(rng, T=T, S=S)
    u = rng.standard_normal((2, 2, T, 4))
    dense = pattern if mask is None else pattern & mask  # (T, S) or (B, 1, T, S)

    def run(fn):
        Q, K, V = make(q, dtype), make(k, dtype), make(v, dtype)
        out = fn(Q, K, V)
        out.backward(make(u, dtype, requires_grad=False))
        return [out.numpy()] + [mt.backend.to_numpy(t.grad) for t in (Q, K, V)]

    m = None if mask is None else make(mask, "bool", requires_grad=False)
    got = run(lambda Q, K, V: op(Q, K, V, m))
    dense_mask = make(dense, "bool", requires_grad=False)
    return got, run(lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V, mask=dense_mask))


def assert_equal(got, want, atol=1e-12):
    for name, a, b in zip(("out", "dq", "dk", "dv"), want, got, strict=True):
        assert a.shape == b.shape and np.all(np.isfinite(b)), name
        np.testing.assert_allclose(b, a, rtol=0, atol=atol, err_msg=name)


def peak_bytes(fn):
    """The most bytes NumPy held at once while ``fn()`` ran (it reports to tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def op(window, causal):
    return lambda q, k, v, mask: local_attention(q, k, v, window, causal=causal, mask=mask)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 2, 3, 20])  # 3 does not divide S = 7 or 10; 20 > S
@pytest.mark.parametrize(("T", "S"), SIZES)
def test_equals_the_plain_op_under_the_band_mask(make, T, S, window, causal):
    for kind in MASKS:
        mask = key_masks(S)[kind]
        got, want = compare(make, op(window, causal), band(T, S, window, causal), T, S, mask)
        assert_equal(got, want)


def test_equal_across_chunks(make, monkeypatch):
    """Queries in chunks of CHUNK (here 4, so 3 chunks, the last one short): the same."""
    monkeypatch.setattr(local_module, "CHUNK", 4)
    for window, causal in [(1, False), (2, True), (5, False), (30, True)]:
        for kind in ["none", "pad", "first"]:
            mask = key_masks(13)[kind]
            pattern = band(11, 13, window, causal)
            assert_equal(*compare(make, op(window, causal), pattern, 11, 13, mask))


GRADCHECKS = [  # (T, S, window, causal, key mask): T == S and T < S, 1, 4 (not dividing 6), > S
    (5, 5, 1, False, "none"), (5, 5, 1, True, "first"), (5, 5, 2, False, "pad"),
    (5, 5, 2, True, "pad"), (3, 7, 2, False, "first"), (3, 7, 2, True, "pad"),
    (2, 6, 9, False, "pad"), (2, 6, 9, True, "none"), (1, 6, 2, True, "pad"),
    (6, 6, 4, False, "shared"), (6, 6, 4, True, "first"),
]  # fmt: skip


@pytest.mark.parametrize(("T", "S", "window", "causal", "kind"), GRADCHECKS)
def test_gradcheck(make, rng, T, S, window, causal, kind):
    q, k, v = qkv(rng, B=1, H=2, T=T, S=S, d_v=2)
    mask = key_masks(S, B=1)[kind]
    m = None if mask is None else make(mask, "bool", requires_grad=False).data
    fn = lambda q, k, v: local_attention(q, k, v, window, causal=causal, mask=m)  # noqa: E731
    assert mt.gradcheck(fn, make(q), make(k), make(v))


def test_rows_with_nothing_to_read_give_zero(make):
    """The first two keys masked, causal, window 1: the queries at positions 0 and 1 read
    nothing; a wholly masked sequence reads nothing: out 0 and gradients 0, not NaN."""
    S = 7
    got, _ = compare(make, op(1, True), band(S, S, 1, True), S, S, key_masks(S)["first"])
    out, dq = got[0], got[1]
    assert np.all(out[:, :, :2] == 0) and np.all(dq[:, :, :2] == 0)
    got, _ = compare(make, op(2, False), band(S, S, 2, False), S, S, key_masks(S)["empty"])
    assert all(np.all(g[1] == 0) for g in got)  # sequence 1: out, dq, dk, dv all 0


def test_float32(make):
    got, want = compare(make, op(2, True), band(7, 9, 2, True), 7, 9, key_masks(9)["pad"])
    got32, _ = compare(make, op(2, True), band(7, 9, 2, True), 7, 9, key_masks(9)["pad"],
                       dtype="float32")  # fmt: skip
    for a, b in zip(want, got32, strict=True):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_never_allocates_a_T_by_S_array(causal):
    """T = S = 4096, d = 16: forward and backward hold far less than one (T, S) float64
    array (134 MB); a decoding step (T = 1, S = 2^17) holds O(window), not O(S·d)."""
    rng = np.random.default_rng(0)
    q, k, v = (mt.tensor(a, requires_grad=True) for a in qkv(rng, 1, 1, 4096, 4096, 16, 16))
    mask = np.ones((1, 1, 1, 4096), bool)

    def step():
        local_attention(q, k, v, 16, causal=causal, mask=mask).sum().backward()

    assert peak_bytes(step) < 4096 * 4096 * 8 / 10
    q, k, v = (mt.tensor(a) for a in qkv(rng, 1, 1, 1, 2**17, 16, 16))  # k, v: 16 MB each
    assert peak_bytes(lambda: local_attention(q, k, v, 64, causal=causal)) < 2**20


def refused(error, message, call):
    """``call()`` raises ``error`` with one line matching ``message``; the error raised."""
    with pytest.raises(error, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3", None])
def test_bad_window_refused(make, rng, bad):
    q, k, v = (make(a) for a in qkv(rng))
    message = r"^local_attention: window must be a positive int, got .*; the keys each side"
    refused(ArgumentError, message, lambda: local_attention(q, k, v, bad))


def bad_arguments(make, rng):
    """(error, message after "<op>: ", q, k, v, keywords) for every refusal but the size's."""
    q, k, v = (make(a) for a in qkv(rng, T=5, S=7))
    no = lambda shape, dtype="bool": make(np.ones(shape), dtype, requires_grad=False)  # noqa: E731
    return [
        (ShapeError, "mask of shape .* has a query axis .* pass causal=True", q, k, v,
         dict(mask=no((2, 1, 5, 7)))),
        (ShapeError, "mask of shape .* does not broadcast", q, k, v, dict(mask=no((2, 1, 1, 6)))),
        (DTypeError, "mask has dtype float64, need bool", q, k, v,
         dict(mask=no((2, 1, 1, 7), "float64"))),
        (DTypeError, "mask has dtype int64, need bool", q, k, v, dict(mask=no((7,), "int64"))),
        (ArgumentError, "causal must be True or False, got 'yes'", q, k, v, dict(causal="yes")),
        (ArgumentError, "causal must be True or False, got 1", q, k, v, dict(causal=1)),
        (ShapeError, r"q \(2, 2, 5, 3\), k \(2, 2, 7, 4\), .* do not fit", q,
         make(np.zeros((2, 2, 7, 4))), v, {}),
        (ShapeError, ".*do not fit", q, k, make(np.zeros((2, 2, 6, 4))), {}),
        (ShapeError, "leading .* axes differ", q, k, make(np.zeros((3, 2, 7, 4))), {}),
        (DTypeError, "q has dtype int64", make(np.zeros((2, 2, 5, 3)), "int64", False), k, v, {}),
        (ShapeError, r"T = 7 queries but S = 5 keys; .* T <= S", make(np.zeros((2, 2, 7, 3))),
         make(np.zeros((2, 2, 5, 3))), make(np.zeros((2, 2, 5, 4))), {}),
    ]  # fmt: skip


def test_bad_arguments_refused(make, rng):
    for error, message, q, k, v, kwargs in bad_arguments(make, rng):
        call = lambda: local_attention(q, k, v, 2, **kwargs)  # noqa: B023, E731
        refused(error, "^local_attention: " + message, call)
