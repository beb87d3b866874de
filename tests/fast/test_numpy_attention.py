"""The NumPy twin of scaled dot-product attention (``fast/numpy/attention.py``): the reference's
numbers without the row max where every score lies in [-SAFE_SCORE, SAFE_SCORE], and the
reference itself (with its row max) where a score does not, or is NaN; masks (padding with
fully masked rows, causal), forward and backward, float32 and float64, gradcheck, a second
backward, and float16 left to the reference."""

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import fast
from minitransformer.fast.numpy import attention as numpy_twins
from minitransformer.ops.attention import ScaledDotProductAttention

B, H, T, S, D = 2, 3, 4, 5, 6


def _masks():
    pad = np.ones((B, 1, 1, S), dtype=bool)
    pad[0, ..., 3:] = False
    none_left = np.ones((B, 1, T, S), dtype=bool)
    none_left[1, 0, 2, :] = False  # a query row with every key masked: P = 0, gradients 0
    causal = np.tril(np.ones((T, S), dtype=bool))[None, None]
    return {"none": None, "padding": pad, "fully_masked_row": none_left, "causal": causal}


def _run(q, k, v, mask, dtype, seed=0):
    """out, P and the three input gradients of a weighted sum of out."""
    ts = [mt.tensor(a, dtype=dtype, requires_grad=True) for a in (q, k, v)]
    out, ctx = ScaledDotProductAttention.run(*ts, mask)
    u = np.random.default_rng(seed).standard_normal(out.shape).astype(dtype)
    (out * mt.tensor(u)).sum().backward()
    return out.numpy(), np.array(ctx.probs), [t.grad.copy() for t in ts], ctx.fn


def _inputs(scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return [scale * rng.standard_normal(s) for s in ((B, H, T, D), (B, H, S, D), (B, H, S, D))]


def _counting(monkeypatch):
    """Count the twin's row sums (its own path) and the reference's forward (its fallback)."""
    calls = {"row_sums": 0, "reference": 0}
    row_sums, reference = numpy_twins._row_sums, ScaledDotProductAttention.forward

    def counted_row_sums(x):
        calls["row_sums"] += 1
        return row_sums(x)

    def counted_reference(ctx, *args):
        calls["reference"] += 1
        return reference(ctx, *args)

    monkeypatch.setattr(numpy_twins, "_row_sums", counted_row_sums)
    monkeypatch.setattr(ScaledDotProductAttention, "forward", staticmethod(counted_reference))
    return calls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mask", list(_masks()))
def test_the_twin_matches_the_reference_without_a_row_max(mask, dtype, monkeypatch):
    m = _masks()[mask]
    q, k, v = _inputs()
    ref = _run(q, k, v, m, dtype)
    calls = _counting(monkeypatch)
    with fast.switched_on():
        out, p, grads, fn = _run(q, k, v, m, dtype)
    assert fn is numpy_twins.ScaledDotProductAttention
    assert calls == {"row_sums": 2, "reference": 0}  # forward and backward, no fallback
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    assert out.dtype == ref[0].dtype == np.dtype(dtype)
    np.testing.assert_allclose(out, ref[0], **tol)
    np.testing.assert_allclose(p, ref[1], **tol)
    for g, g_ref in zip(grads, ref[2], strict=True):
        assert g.dtype == np.dtype(dtype) and np.isfinite(g).all()
        np.testing.assert_allclose(g, g_ref, **tol)
    if mask == "fully_masked_row":
        assert not p[1, :, 2].any() and not out[1, :, 2].any()


@pytest.mark.parametrize("scale", [40.0, 1e18])
def test_scores_out_of_range_go_through_the_reference(scale, monkeypatch):
    """Scores past SAFE_SCORE (up to where e^s without a shift overflows to inf) run the
    reference's shifted math: the same finite numbers, probabilities that sum to 1."""
    q, k, v = _inputs(scale=scale)
    m = _masks()["padding"]
    ref = _run(q, k, v, m, "float32")
    calls = _counting(monkeypatch)
    with fast.switched_on():
        out, p, grads, _ = _run(q, k, v, m, "float32")
    assert calls["reference"] == 1 and calls["row_sums"] == 1  # backward: the twin's
    assert np.isfinite(out).all() and np.allclose(p.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(out, ref[0], rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(p, ref[1], rtol=1e-5, atol=1e-6)
    for g, g_ref in zip(grads, ref[2], strict=True):
        np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-4 * np.abs(g_ref).max())


def test_nan_scores_and_float16_are_the_references(monkeypatch):
    q, k, v = _inputs()
    q[0, 0, 0, 0] = np.nan
    ref = _run(q, k, v, None, "float32")
    calls = _counting(monkeypatch)
    with fast.switched_on():
        out, p, _, _ = _run(q, k, v, None, "float32")
        assert calls["reference"] == 1
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref[0]))
        np.testing.assert_allclose(out[1], ref[0][1], rtol=1e-5, atol=1e-6)
        _, _, _, fn = _run(*_inputs(), None, "float16")
    assert fn is ScaledDotProductAttention  # e^64 overflows float16: no twin


def test_the_twin_passes_gradcheck_and_a_second_backward_agrees():
    q, k, v = _inputs(seed=3)
    m = _masks()["fully_masked_row"]
    ts = [mt.tensor(a, requires_grad=True) for a in (q, k, v)]
    with fast.switched_on():
        assert mt.gradcheck(lambda a, b, c: ScaledDotProductAttention.apply(a, b, c, m), *ts)
        ts = [mt.tensor(a, requires_grad=True) for a in (q, k, v)]
        out = ScaledDotProductAttention.apply(*ts, m)
        out.sum().backward(retain_graph=True)
        first = [t.grad.copy() for t in ts]
        for t in ts:
            t.grad = None
        out.sum().backward()
    for t, g in zip(ts, first, strict=True):
        np.testing.assert_array_equal(t.grad, g)


def test_heads_come_out_heads_last_so_the_merge_and_split_copy_nothing(monkeypatch):
    """(B, H, T, d) inputs of one batch shape: out, dq, dk and dv are (B, T, H, d) in memory
    (a transposed view), so merge_heads(out) and the split's backward are views; inputs
    whose batch shapes differ (broadcast keys) get ordinary arrays, the same numbers."""
    import minitransformer.functional as F

    grads = []
    backward = numpy_twins.ScaledDotProductAttention.backward

    def recorded(ctx, grad):
        grads.append(backward(ctx, grad))
        return grads[-1]

    twin = numpy_twins.ScaledDotProductAttention
    monkeypatch.setattr(twin, "backward", staticmethod(recorded))
    rng = np.random.default_rng(6)
    x = mt.tensor(rng.standard_normal((B, T, H * D)), requires_grad=True)
    with fast.switched_on():
        q = F.split_heads(x, H)
        out, ctx = ScaledDotProductAttention.run(q, q, q, None)
        assert ctx.fn is twin and out.data.transpose(0, 2, 1, 3).flags.c_contiguous
        merged = F.merge_heads(out)
        assert np.shares_memory(merged.data, out.data)  # a view: no copy
        merged.sum().backward()
    for g in grads[0][:3]:
        assert g.transpose(0, 2, 1, 3).flags.c_contiguous
    q, k, v = _inputs()
    k1 = k[:, :1]  # keys shared by every head: broadcast
    ref = _run(q, k1, v[:, :1], None, "float64")
    with fast.switched_on():
        got = _run(q, k1, v[:, :1], None, "float64")
    for a, b in zip((got[0], *got[2]), (ref[0], *ref[2]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
