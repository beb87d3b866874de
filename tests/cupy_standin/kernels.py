"""The project's CUDA kernels (``minitransformer/fast/cuda/*.cu``) and elementwise kernels,
as NumPy functions with the kernels' arguments, for the stand-in's ``RawKernel`` and
``ElementwiseKernel``.

Each computes what its ``.cu`` file's header says, in the kernel's dtype, with NumPy's
order of operations (not the kernel's reduction trees: not the GPU's bits, and the numbers
of ``fast/numpy`` only where NumPy happens to agree). What matters for the stand-in is that
an eager step and a replayed one call the same function on the same values, and that a
``*_graph`` kernel reads its per-step values from its device slot at each launch, as on a
GPU. ``tests/fast/test_cuda_step.py`` and ``test_cuda_rows.py`` hold the exact
transcriptions (dropout's hash, ``lowbias32`` and ``keep``, is this file's, imported there).
"""

from __future__ import annotations

import numpy as np


def lowbias32(x: np.ndarray) -> np.ndarray:
    """dropout.cu's lowbias32 on uint32 (wrapping multiplications, as unsigned int)."""
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def keep(n: int, k1, k2, threshold) -> np.ndarray:
    """dropout.cu's keep(i) for i = 0 .. n-1: the 64-bit loop index cut to 32 bits."""
    index = (np.arange(n, dtype=np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    bits = lowbias32(lowbias32(index ^ np.uint32(k1)) ^ np.uint32(k2))
    return bits >= np.uint32(threshold)


def dropout_apply(x, y, n, k1, k2, threshold, scale, r=None):
    kept = keep(int(n), k1, k2, threshold)
    flat = np.where(kept, x.reshape(-1) * scale, x.dtype.type(0))
    y.reshape(-1)[...] = flat if r is None else r.reshape(-1) + flat


def dropout_add(x, r, y, n, k1, k2, threshold, scale):
    dropout_apply(x, y, n, k1, k2, threshold, scale, r)


def dropout_apply_graph(x, y, n, keys, threshold, scale):
    dropout_apply(x, y, n, keys[0], keys[1], threshold, scale)


def dropout_add_graph(x, r, y, n, keys, threshold, scale):
    dropout_apply(x, y, n, keys[0], keys[1], threshold, scale, r)


def adam_update(p, g, m, v, n, ok, b1, omb1, b2, omb2, eps, wd, neg_step, bc2):
    if not ok[()]:
        return
    gi = g + wd * p if wd != 0 else g
    mi = m * b1 + gi * omb1
    vi = v * b2 + (gi * gi) * omb2
    denom = np.sqrt(vi) / bc2 + eps
    m[...], v[...] = mi, vi
    p[...] = p + (mi / denom) * neg_step


def adam_update_graph(p, g, m, v, n, ok, b1, omb1, b2, omb2, eps, wd, step):
    adam_update(p, g, m, v, n, ok, b1, omb1, b2, omb2, eps, wd, step[0], step[1])


def grad_sumsq_partial(g, n, partial):
    partial[...] = 0.0
    x = g.reshape(-1).astype(np.float64)
    partial[0] = np.dot(x, x)


def grad_norm_finish(partial, parts, max_norm, norm, coef):
    T = norm.dtype.type
    total = T(np.sqrt(partial[: int(parts)].sum()))
    c = T(1)
    if np.isfinite(total):
        c = T(max_norm) / (total + T(1e-6))
        c = c if c < 1 else T(1)
    norm[...], coef[...] = total, c


def grad_scale(g, n, coef):
    if coef[()] != 1:
        g *= coef[()]


def step_ok(loss, norm, prev, ok):
    ok[...] = bool(np.isfinite(loss).all() and np.isfinite(norm).all() and prev[()])


def layer_norm_forward(x, gamma, beta, eps, D, y, x_hat, rstd):
    T = x.dtype.type
    a = np.max(np.abs(x), axis=1, keepdims=True)
    a = np.where(a > 0, a, T(1))
    xs = x / a
    mu = np.sum(xs, axis=1, keepdims=True) / T(D)
    var = np.sum((xs - mu) ** 2, axis=1, keepdims=True) / T(D)
    sd = np.hypot(a * np.sqrt(var), np.sqrt(T(eps)))
    x_hat[...] = (xs - mu) * (a / sd)
    rstd[...] = T(1) / sd
    y[...] = x_hat * gamma + beta


def layer_norm_backward_dx(g, x_hat, rstd, gamma, D, dx):
    gh = g * gamma
    s1 = np.sum(gh, axis=1, keepdims=True) / gh.dtype.type(D)
    s2 = np.sum(gh * x_hat, axis=1, keepdims=True) / gh.dtype.type(D)
    dx[...] = rstd * (gh - s1 - x_hat * s2)


def _partials(g, x_hat, N, rows):
    """(2, chunks, D): per chunk of ``rows`` rows, the sums of g * x_hat and of g."""
    starts = range(0, int(N), int(rows))
    return np.stack([np.stack([np.sum((g * x_hat)[s : s + rows], axis=0) for s in starts]),
                     np.stack([np.sum(g[s : s + rows], axis=0) for s in starts])])  # fmt: skip


def layer_norm_param_partials(g, x_hat, N, D, rows, part):
    part[...] = _partials(g, x_hat, N, rows).reshape(part.shape)


def layer_norm_param_sums(g, x_hat, N, D, rows, part, arrived, out):
    partials = _partials(g, x_hat, N, rows)
    part[...] = partials
    total = partials[:, 0]
    for c in range(1, partials.shape[1]):  # chunk 0 first, in order
        total = total + partials[:, c]
    out[0], out[1] = total[0], total[1]


def attention_softmax_forward(scores, mask, m0, m1, m2, m3, L1, Tq, S, scale, log_out, out):
    rows = scores.size // int(S)
    shape = (rows // (int(L1) * int(Tq)), int(L1), int(Tq), int(S))
    v = scores.reshape(shape) * scale
    if mask is not None:
        strides = tuple(int(m) * mask.itemsize for m in (m0, m1, m2, m3))
        full = np.lib.stride_tricks.as_strided(mask, shape, strides)
        v = np.where(full, v, -np.inf)
    m = np.max(v, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, v.dtype.type(0))
    e = np.exp(v - m)
    s = np.sum(e, axis=-1, keepdims=True)
    s = np.where(s == 0, v.dtype.type(1), s)
    out.reshape(shape)[...] = (v - m) - np.log(s) if log_out else e / s


def attention_softmax_backward(dp, p, S, scale, ds):
    inner = np.sum(dp * p, axis=-1, keepdims=True)
    ds[...] = scale * p * (dp - inner)


def cross_entropy_forward(x, t, eps, V, loss, e, s):
    T = x.dtype.type
    m = np.max(x, axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, T(0))
    z = x - m
    e[...] = np.exp(z)
    se = np.sum(e, axis=1, keepdims=True)
    se = np.where(se == 0, T(1), se)
    s.reshape(-1, 1)[...] = se
    log_s = np.log(se[:, 0])
    rows = np.arange(x.shape[0])
    total = (T(1) - eps) * (log_s - z[rows, t])
    if eps != 0:
        total = total + eps * (log_s - np.sum(z / T(V), axis=1))
    loss[...] = total


def cross_entropy_backward(e, s, t, w, w_stride, eps, V, dx):
    T = e.dtype.type
    wr = w.reshape(-1)[: e.shape[0]] if int(w_stride) else np.full(e.shape[0], w.reshape(-1)[0])
    wr = wr.reshape(-1, 1)
    d = e * (wr / s.reshape(-1, 1))
    if eps != 0:
        d = d - wr * (eps / T(V))
    rows = np.arange(e.shape[0])
    d[rows, t] -= wr[:, 0] * (T(1) - eps)
    dx[...] = d


def cross_entropy_total(loss, t, ignore, N, mean, total, divisor):
    T = loss.dtype.type
    kept = t != ignore
    count = T(np.count_nonzero(kept))
    d = (count if count > 0 else T(1)) if int(mean) else T(1)
    divisor[...] = d
    total[...] = np.sum(np.where(kept, loss, T(0))) / d


_HASH = ("lowbias32", "keep")  # dropout's hash, not kernels
_RAW = {name: f for name, f in list(globals().items())
        if callable(f) and name[0] != "_" and name not in _HASH}  # fmt: skip


def raw(name: str):
    """The NumPy function of the RawKernel ``name`` (``adam_update_f32`` -> ``adam_update``)."""
    base = name.removesuffix("_f32").removesuffix("_f64")
    if base not in _RAW:
        raise NotImplementedError(f"stand-in: no NumPy version of the kernel {name!r}")
    return _RAW[base]


# ----------------------------------------------------------------------------- elementwise


def _relu_backward(g, y, dx):
    dx[...] = g * (y > 0).astype(dx.dtype)


def _one_hot(ids, V, y):
    y.reshape(-1, int(V))[...] = ids.reshape(-1, 1) == np.arange(int(V))


def _safe_ids(t, ignore, out):
    out[...] = np.where(t == ignore, 0, t)


def _row_weights(g, divisor, t, ignore, w):
    w[...] = np.where(t == ignore, w.dtype.type(0), g.reshape(-1)[0] / divisor.reshape(-1)[0])


_ELEMENTWISE = {"mt_relu_backward": _relu_backward, "mt_one_hot": _one_hot,
                "mt_safe_ids": _safe_ids, "mt_row_weights": _row_weights}  # fmt: skip


def elementwise(name: str):
    """The NumPy function of the ElementwiseKernel ``name``: (inputs..., outputs...)."""
    if name not in _ELEMENTWISE:
        raise NotImplementedError(f"stand-in: no NumPy version of the elementwise kernel {name!r}")
    return _ELEMENTWISE[name]
