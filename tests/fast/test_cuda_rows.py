"""The fused row kernels of ``fast/cupy/`` (``layernorm.py``, ``loss.py``, ``attention.py``,
``softmax.py``; ``fast/cuda/layer_norm.cu``, ``cross_entropy.cu``, ``attention_softmax.cu``)
against the reference ops.

(a) On every machine: each kernel's math transcribed once more in NumPy, in the kernel's
    order (per-thread partial sums over the columns k, k + blockDim, ..., then the warp's
    xor-butterfly tree and warp 0's tree over the warps; the mask read through its element
    strides), compared with the reference op run under ``fast.reference_only()``:
    float64 to 1e-12 (relative to the row's scale), float32 to 2e-6; on LayerNorm's rows of
    1e4 + noise and ~1e19 (where x / a rounds differently on each side) no further from the
    exact (float64) answer than twice the reference's own error. Also: the sources compile with
    nvcc for sm_90 and sm_80, and every kernel name the wrapper asks for exists.
(b) On a GPU (skipped elsewhere): each kernel on CuPy arrays against the same reference,
    forward and backward.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast
from minitransformer.fast import cupy as fast_cupy
from minitransformer.fast.cupy import attention as cupy_attention
from minitransformer.fast.cupy import embedding as cupy_embedding
from minitransformer.fast.cupy import layernorm as cupy_layernorm
from minitransformer.fast.cupy import loss as cupy_loss
from minitransformer.fast.cupy import softmax as cupy_softmax
from minitransformer.fast.gpu import cuda_source
from minitransformer.ops.attention import ScaledDotProductAttention
from minitransformer.ops.layernorm import LayerNorm
from minitransformer.ops.loss import CrossEntropy

ROW_FILES = ["layer_norm.cu", "cross_entropy.cu", "attention_softmax.cu"]

# ----------------------------------------------------------------------------- the kernels' math


def block_reduce(part: np.ndarray, op) -> np.ndarray:
    """(R, B) per-thread values -> (R,): each warp's xor butterfly (lane 0's result), then
    warp 0's butterfly over the warp results (padded with the identity), as block_reduce."""

    def butterfly(v):  # (R, W, 32) -> lane 0 of each warp
        lanes = np.arange(32)
        for o in (16, 8, 4, 2, 1):
            v = op(v, v[..., lanes ^ o])
        return v[..., 0]

    R, B = part.shape
    warps = butterfly(part.reshape(R, B // 32, 32))  # (R, B / 32)
    ident = -np.inf if op is np.fmax else 0.0
    pad = np.full((R, 32), ident, dtype=part.dtype)
    pad[:, : B // 32] = warps
    return butterfly(pad[:, None, :])[:, 0]


def row_reduce(v: np.ndarray, op) -> np.ndarray:
    """(R, n) -> (R,) as a block of block_size(n) threads reduces a row: thread k folds
    v[k], v[k + B], ... into its partial (starting from the identity), then block_reduce."""
    R, n = v.shape
    B = cuda_source.block_size(n)
    ident = -np.inf if op is np.fmax else 0.0
    acc = np.full((R, B), ident, dtype=v.dtype)
    for k0 in range(0, n, B):
        chunk = np.full((R, B), ident, dtype=v.dtype)
        chunk[:, : min(B, n - k0)] = v[:, k0 : k0 + B]
        acc = op(acc, chunk)
    return block_reduce(acc, op)


def layer_norm_forward_model(x, gamma, beta, eps):
    T = x.dtype.type
    D = x.shape[1]
    a = row_reduce(np.abs(x), np.fmax)[:, None]
    a = np.where(a > 0, a, T(1))
    mu = row_reduce(x / a, np.add)[:, None] / T(D)
    c = x / a - mu
    var = row_reduce(c * c, np.add)[:, None] / T(D)
    sd = np.hypot(a * np.sqrt(var), np.sqrt(T(eps)))
    x_hat = (x / a - mu) * (a / sd)
    return x_hat * gamma + beta, x_hat, T(1) / sd


def layer_norm_backward_model(g, x_hat, rstd, gamma):
    T = g.dtype.type
    D = g.shape[1]
    gh = g * gamma
    mean_g = row_reduce(gh, np.add)[:, None] / T(D)
    mean_gx = row_reduce(gh * x_hat, np.add)[:, None] / T(D)
    dx = rstd * (g * gamma - mean_g - x_hat * mean_gx)
    rows, chunks = cupy_layernorm.param_chunks(g.shape[0])  # sums over each chunk of rows
    part = np.zeros((2, chunks, D), dtype=g.dtype)
    for i in range(g.shape[0]):
        part[0, i // rows] += g[i] * x_hat[i]
        part[1, i // rows] += g[i]
    dgamma, dbeta = part.sum(axis=1)
    return dx, dgamma, dbeta


def cross_entropy_forward_model(x, t, eps):
    T = x.dtype.type
    N, V = x.shape
    m = row_reduce(x, np.fmax)[:, None]
    m = np.where(np.isfinite(m), m, T(0))
    z = x - m
    e = np.exp(z)
    s = row_reduce(e, np.add)[:, None]
    s = np.where(s == 0, T(1), s)
    log_s = np.log(s[:, 0])
    loss = (T(1) - T(eps)) * (log_s - z[np.arange(N), t])
    if eps:
        loss += T(eps) * (log_s - row_reduce(z / T(V), np.add))
    return loss, e, s


def cross_entropy_backward_model(e, s, t, w, eps):
    T = e.dtype.type
    N, V = e.shape
    wr = np.broadcast_to(np.asarray(w, dtype=e.dtype).reshape(-1, 1), (N, 1))
    d = e * (wr / s)
    if eps:
        d = d - wr * (T(eps) / T(V))
    d[np.arange(N), t] -= (wr * (T(1) - T(eps)))[:, 0]
    return d


def attention_softmax_model(s, mask, scale, log=False):
    """The forward kernel on scores s (..., T, S), mask read through mask_strides."""
    T = s.dtype.type
    L0, L1, Tq, S = (1,) * (4 - s.ndim) + s.shape
    v = T(scale) * s.reshape(-1, S)
    if mask is not None:
        st = cupy_attention.mask_strides(mask.shape, mask.strides, mask.itemsize)
        full = np.lib.stride_tricks.as_strided(
            mask, (L0, L1, Tq, S), tuple(k * mask.itemsize for k in st), writeable=False
        )
        v = np.where(full.reshape(-1, S), v, T(-np.inf))
    m = row_reduce(v, np.fmax)[:, None]
    m = np.where(np.isfinite(m), m, T(0))
    s_ = row_reduce(np.exp(v - m), np.add)[:, None]
    s_ = np.where(s_ == 0, T(1), s_)
    out = (v - m) - np.log(s_) if log else np.exp(v - m) / s_
    return out.reshape(s.shape)


def attention_softmax_backward_model(dp, p, scale):
    S = p.shape[-1]
    a = row_reduce((dp * p).reshape(-1, S), np.add).reshape(*p.shape[:-1], 1)
    return p.dtype.type(scale) * p * (dp - a)


# ----------------------------------------------------------------------------- the references

TOL = {"float64": 1e-12, "float32": 2e-6}


def close(got, want, dtype, scale=1.0):
    """Equal to within TOL[dtype] relative to ``scale`` x the largest |want| (NaN = NaN)."""
    want = np.asarray(want, dtype=np.float64)
    ref = scale * max(1.0, float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * ref, equal_nan=True)


def ln_reference(x, gamma, beta, eps, g):
    t = [mt.tensor(a, requires_grad=True) for a in (x, gamma, beta)]
    with fast.reference_only():
        y, ctx = LayerNorm.run(*t, eps=eps)
        y.backward(mt.tensor(g))
    x_hat, rstd, _ = ctx.saved
    return y.data, x_hat, rstd, *(a.grad.data for a in t)


def check_layer_norm_forward(got, x, gamma, beta, g):
    """got = (y, x_hat, rstd) against the reference: to TOL on ordinary rows; on the rows of
    ln_rows with D = 777 that x / a rounds differently on each side (1e4 + noise, ~1e19),
    no further from the exact (float64) answer than twice the reference's own error."""
    dtype = x.dtype.name
    y, x_hat, rstd = ln_reference(x, gamma, beta, 1e-5, g)[:3]
    my, mx_hat, mrstd = got
    hard = [1, 2] if x.shape[1] == 777 else []  # the 1e4-offset and the huge row
    easy = [i for i in range(x.shape[0]) if i not in hard]
    close(my[easy], y[easy], dtype)
    close(mx_hat[easy], x_hat[easy], dtype)
    np.testing.assert_allclose(mrstd, rstd, rtol=TOL[dtype] * 10)
    if hard:
        exact = ln_reference(*(a.astype("float64") for a in (x, gamma, beta)), 1e-5, g)
        for got_, ref, ex in ((my, y, exact[0]), (mx_hat, x_hat, exact[1])):
            err_kernel = np.max(np.abs(got_[hard] - ex[hard]))
            err_reference = np.max(np.abs(ref[hard] - ex[hard]))
            # In float64 the "exact" answer is the reference itself (err_reference 0): the
            # kernel may differ by a few ulps of order-1 values (its sums' order is its own).
            slack = 16 * np.finfo(x.dtype).eps if dtype == "float64" else 1e-15
            assert err_kernel <= 2 * err_reference + slack, (err_kernel, err_reference)


def ln_rows(dtype, rng):
    D = 777  # not a multiple of any block size
    x = rng.standard_normal((6, D))
    x[1] += 1e4  # a large offset: the two-pass variance keeps the noise
    x[2] *= 1e19 if dtype == "float32" else 1e300  # squares would overflow
    x[3] = 0.0  # all zero
    x[4] = 2.5  # constant
    x[5] *= 1e-30
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("D", [1, 5, 777, 5000])
def test_layer_norm_kernel_math_matches_the_reference(dtype, D, rng):
    x = ln_rows(dtype, rng) if D == 777 else rng.standard_normal((70, D)).astype(dtype)
    gamma, beta = (rng.standard_normal(x.shape[1]).astype(dtype) for _ in range(2))
    g = rng.standard_normal(x.shape).astype(dtype)
    _, x_hat, rstd, dx, dgamma, dbeta = ln_reference(x, gamma, beta, 1e-5, g)
    check_layer_norm_forward(layer_norm_forward_model(x, gamma, beta, 1e-5), x, gamma, beta, g)
    mdx, mdgamma, mdbeta = layer_norm_backward_model(g, x_hat, rstd, gamma)
    close(mdx * (1 / rstd), dx * (1 / rstd), dtype, 10.0)  # per row, in units of rstd
    close(mdgamma, dgamma, dtype, 10.0)
    close(mdbeta, dbeta, dtype, 10.0)


def ce_reference(x, t, eps, reduction):
    xt = mt.tensor(x, requires_grad=True)
    with fast.reference_only():
        loss, ctx = CrossEntropy.run(xt, t, label_smoothing=eps, reduction=reduction)
        loss.backward(mt.tensor(np.ones(loss.shape, dtype=x.dtype)))
    e, s = ctx.saved[:2]
    return loss.data, e, s, xt.grad.data


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("V", [1, 7, 1000, 5003])
def test_cross_entropy_kernel_math_matches_the_reference(dtype, eps, V, rng):
    x = (3 * rng.standard_normal((9, V))).astype(dtype)
    x[1] += 1e4  # large logits: the shift by the row max keeps them exact
    if V > 1:
        x[2, ::2] = -np.inf  # masked logits (inf loss with eps > 0, as the reference)
    t = rng.integers(0, V, size=9)
    t[2] = 1 % V  # an unmasked target
    loss, e, s, dx = ce_reference(x, t, eps, "none")
    ml, me, ms = cross_entropy_forward_model(x, t, eps)
    close(ml, loss, dtype, 1e4)  # loss relative to the logits' size
    close(me, e, dtype)
    close(ms, s, dtype, V)
    close(cross_entropy_backward_model(e, s, t, np.ones((9, 1), dtype), eps), dx, dtype)
    _, _, _, dx_mean = ce_reference(x, t, eps, "mean")  # w 0-d = 1 / N: stride 0
    close(cross_entropy_backward_model(e, s, t, np.asarray(1 / 9, dtype), eps), dx_mean, dtype)


def attention_reference(q, k, v, mask, dout):
    qt, kt, vt = (mt.tensor(a, requires_grad=True) for a in (q, k, v))
    with fast.reference_only():
        out, ctx = ScaledDotProductAttention.run(qt, kt, vt, mask)
        out.backward(mt.tensor(dout))
    return ctx.probs, qt.grad.data, kt.grad.data


MASKS = {
    "none": lambda B, H, T, S, rng: None,
    "padding (B,1,1,S)": lambda B, H, T, S, rng: (
        np.arange(S)[None, None, None] < rng.integers(1, S + 1, size=(B, 1, 1, 1))
    ),
    "causal (1,1,T,T)": lambda B, H, T, S, rng: np.tril(np.ones((T, S), bool))[None, None],
    "(B,1,T,S) with all-masked rows": lambda B, H, T, S, rng: rng.random((B, 1, T, S)) < 0.3,
    "(T,S) 2-d, transposed view": lambda B, H, T, S, rng: (rng.random((S, T)) < 0.7).T,
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mask_kind", list(MASKS))
@pytest.mark.parametrize("T,S", [(5, 5), (1, 7), (6, 1), (3, 600)])
def test_attention_softmax_kernel_math_matches_the_reference(dtype, mask_kind, T, S, rng):
    if mask_kind.startswith("causal") and T != S:
        pytest.skip("a causal mask is square")
    B, H, d = 2, 3, 8
    q = rng.standard_normal((B, H, T, d)).astype(dtype)
    k, v = (rng.standard_normal((B, H, S, d)).astype(dtype) for _ in range(2))
    mask = MASKS[mask_kind](B, H, T, S, rng)
    dout = rng.standard_normal((B, H, T, d)).astype(dtype)
    p, dq, dk = attention_reference(q, k, v, mask, dout)
    scale = 1 / math.sqrt(d)
    mp = attention_softmax_model(q @ np.swapaxes(k, -1, -2), mask, scale)
    close(mp, p, dtype, 2.0)
    if mask is not None and mask_kind.startswith("(B"):
        dead = ~np.broadcast_to(mask, p.shape).any(-1)  # all-masked rows: exactly 0
        assert (mp[dead] == 0).all()
    ds = attention_softmax_backward_model(dout @ np.swapaxes(v, -1, -2), p, scale)
    close(ds @ k, dq, dtype, 10.0)
    close(np.swapaxes(ds, -1, -2) @ q, dk, dtype, 10.0)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("log", [False, True])
def test_row_softmax_kernel_math_matches_the_reference(dtype, log, rng):
    x = (5 * rng.standard_normal((4, 3, 300))).astype(dtype)
    x[0, 0] = -np.inf  # an all -inf row: softmax 0, log_softmax -inf
    x[1, 1] += 1e4
    with fast.reference_only():
        f = F.log_softmax if log else F.softmax
        want = f(mt.tensor(x), axis=-1).data
    close(attention_softmax_model(x, None, 1.0, log=log), want, dtype, 1e4 if log else 1.0)


# ----------------------------------------------------------------------------- sources, names


def test_every_kernel_the_wrapper_asks_for_exists_in_float32_and_float64():
    modules = (cupy_layernorm, cupy_softmax, cupy_attention, cupy_loss)
    text = "".join(open(m.__file__, encoding="utf-8").read() for m in modules)
    used = set(re.findall(r'kernel_for\(\s*"(\w+\.cu)",\s*"(\w+)"', text))
    for file, name in used:
        names = cuda_source.entry_points(cuda_source.source(file))
        assert {name + "_f32", name + "_f64"} <= set(names), (file, name, names)
    assert len(used) == 9 and {file for file, _ in used} == set(ROW_FILES), used


# a twin's file is named after its reference's (ops/layernorm.py: fast/cupy/layernorm.py), but
# for the Linear layer's, named after the layer (ops/matmul.py: fast/cupy/linear.py)
FILE_OF = {"matmul": "linear"}


def test_the_cupy_twins_replace_their_references_and_import_without_cupy():
    """fast/cupy/ imports without CuPy; each twin it registers for cupy.ndarray is a
    subclass of the reference Function it replaces (or a function in place of a plain one),
    lives in the file named after its reference, takes float32 and float64 (float16 runs
    the reference), and every kernel the Function twins call is defined."""
    for ref, twin in fast_cupy.TWINS.items():
        if twin is not cupy_embedding.Embedding:  # keyed by its integer ids: any table
            assert twin.dtypes == fast_cupy.DTYPES == frozenset(cuda_source.SUFFIX), twin
        package, name = twin.__module__.rsplit(".", 1)
        reference = ref.__module__.rsplit(".", 1)[1]
        assert package == "minitransformer.fast.cupy", twin
        assert name == FILE_OF.get(reference, reference), (twin, ref)
        if isinstance(ref, type):
            assert issubclass(twin, ref), twin
        else:
            assert callable(twin) and twin.__name__ == ref.__name__, twin
    for module, names in [
        (cupy_layernorm, ("layer_norm_forward", "layer_norm_backward")),
        (cupy_softmax, ("softmax", "log_softmax")),
        (cupy_loss, ("cross_entropy_forward", "cross_entropy_backward")),
        (cupy_attention, ("attention_softmax_forward", "attention_softmax_backward")),
    ]:
        for name in names:
            assert callable(getattr(module, name)), name


def test_block_sizes_are_whole_warps_and_chunks_cover_every_row():
    for n in (1, 31, 512, 513, 4096, 4097, 50_000):
        assert cuda_source.block_size(n) % 32 == 0
    for N in (1, 31, 32, 33, 1000, 4096, 100_000):
        rows, chunks = cupy_layernorm.param_chunks(N)
        assert rows * chunks >= N > rows * (chunks - 1) and chunks <= 64


# ----------------------------------------------------------------------------- on a GPU

gpu = pytest.mark.gpu  # skipped without a GPU (tests/conftest.py)


@gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpu_layer_norm_kernels_match_the_reference(dtype, rng):
    import cupy as cp

    x = ln_rows(dtype, rng)
    gamma, beta = (rng.standard_normal(x.shape[1]).astype(dtype) for _ in range(2))
    g = rng.standard_normal(x.shape).astype(dtype)
    _, x_hat, rstd, dx, dgamma, dbeta = ln_reference(x, gamma, beta, 1e-5, g)
    got = cupy_layernorm.layer_norm_forward(*(cp.asarray(a) for a in (x, gamma, beta)), 1e-5)
    check_layer_norm_forward([cp.asnumpy(a) for a in got], x, gamma, beta, g)
    back = cupy_layernorm.layer_norm_backward(
        *(cp.asarray(a) for a in (g, x_hat, rstd, gamma)), (True, True, True)
    )
    close(cp.asnumpy(back[0]) / rstd, dx / rstd, dtype, 10.0)  # per row, in units of rstd
    close(cp.asnumpy(back[1]), dgamma, dtype, 10.0)
    close(cp.asnumpy(back[2]), dbeta, dtype, 10.0)


@gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gpu_cross_entropy_kernels_match_the_reference(dtype, eps, rng):
    import cupy as cp

    x = (3 * rng.standard_normal((9, 5003))).astype(dtype)
    x[1] += 1e4
    t = rng.integers(0, 5003, size=9)
    loss, e, s, dx = ce_reference(x, t, eps, "none")
    got = cupy_loss.cross_entropy_forward(cp.asarray(x), cp.asarray(t), eps)
    for a, b, sc in zip(got, (loss, e, s), (1e4, 1.0, 5003.0), strict=True):
        close(cp.asnumpy(a), b, dtype, sc)
    w = cp.ones((9, 1), dtype=dtype)
    d = cupy_loss.cross_entropy_backward(cp.asarray(e), cp.asarray(s), cp.asarray(t), w, eps)
    close(cp.asnumpy(d), dx, dtype)


@gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_gpu_attention_softmax_kernels_match_the_reference(dtype, mask_kind, rng):
    import cupy as cp

    B, H, T, S, d = 2, 3, 5, 5, 8
    q, k, v, dout = (rng.standard_normal((B, H, n, d)).astype(dtype) for n in (T, S, S, T))
    mask = MASKS[mask_kind](B, H, T, S, rng)
    p, dq, dk = attention_reference(q, k, v, mask, dout)
    scale = 1 / math.sqrt(d)
    cq, ck, cv, cdo = (cp.asarray(a) for a in (q, k, v, dout))
    cmask = None if mask is None else cp.asarray(mask)
    cp_ = cupy_attention.attention_softmax_forward(cq @ cp.swapaxes(ck, -1, -2), cmask, scale)
    close(cp.asnumpy(cp_), p, dtype, 2.0)
    dp = cdo @ cp.swapaxes(cv, -1, -2)
    ds = cupy_attention.attention_softmax_backward(dp, cp.asarray(p), scale)
    close(cp.asnumpy(ds @ ck), dq, dtype, 10.0)
    close(cp.asnumpy(cp.swapaxes(ds, -1, -2) @ cq), dk, dtype, 10.0)
    x = cp.asarray(5 * rng.standard_normal((4, 300)).astype(dtype))
    with fast.reference_only():
        want = F.softmax(mt.tensor(cp.asnumpy(x)), axis=-1).data
    close(cp.asnumpy(cupy_softmax.softmax(x, -1)), want, dtype)
