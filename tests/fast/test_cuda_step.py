"""The training step's GPU kernels (fast/cupy/{dropout,adam,clip}.py, fast/cuda/{dropout,
adam,grad_norm}.cu) against the references they replace.

On the CPU each kernel's math is transcribed once more in NumPy, in the kernel's order of
operations (uint32 hash, per-element roundings, the fixed reduction tree), and compared with
the library's reference: the dropout bits exactly, Adam exactly against
fast/numpy/adam.py's update (and to rtol 1e-12 / 1e-5 against optim.adam's), the norm to a
stated tolerance. The same transcriptions drive fast/cupy/dropout.py's Dropout and
DropoutAdd twins end to end (registered for the strict backend). On a GPU the kernels
themselves run against the references.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from cupy_standin import kernels as transcribed

import minitransformer as mt
from minitransformer.backend.random import Generator, counter_bits, counter_keys
from minitransformer.fast import cupy as fast_cupy
from minitransformer.fast.cupy import adam as cupy_adam
from minitransformer.fast.cupy import clip as cupy_clip
from minitransformer.fast.cupy import dropout as cupy_dropout
from minitransformer.fast.gpu import cuda_source
from minitransformer.fast.numpy import adam as numpy_adam
from minitransformer.function import TWINS
from minitransformer.ops import dropout as ops_dropout
from minitransformer.ops.dropout import dropout, dropout_add
from minitransformer.optim.adam import adam_update as adam_reference
from minitransformer.optim.clip import clip_coefficient, total_norm

# ----------------------------------------------------------------------------- transcriptions


def kernel_dropout(x, keys, scale, r=None):
    """dropout_apply / dropout_add: y = [r +] (keep ? x * scale : 0), each op rounded."""
    x = np.ascontiguousarray(x)
    T = x.dtype.type
    kept = transcribed.keep(x.size, *keys).reshape(x.shape)
    y = np.where(kept, x * T(scale), T(0))
    return y if r is None else r + y


def kernel_adam(p, g, m, v, scalars, ok=True):
    """adam.cu's loop body for every element (in place), scalars = cupy_adam.adam_scalars:
    the stand-in's transcription (``cupy_standin/kernels.py``), ``ok`` its device flag."""
    transcribed.adam_update(p, g, m, v, p.size, np.asarray(ok), *scalars)


def tree32(a: np.ndarray) -> np.ndarray:
    """A warp's __shfl_xor_sync butterfly over the last axis (32 lanes): lane l adds lane
    l ^ offset for offset 16, 8, 4, 2, 1, which is this halving tree."""
    while a.shape[-1] > 1:
        h = a.shape[-1] // 2
        a = a[..., :h] + a[..., h:]
    return a[..., 0]


def block_sum(v: np.ndarray) -> np.ndarray:
    """grad_norm.cu's block_sum of (..., 256) thread values: 8 warp trees, then warp 0's
    tree over the 8 warp sums and 24 zeros."""
    warps = tree32(v.reshape(*v.shape[:-1], cuda_source.BLOCK // 32, 32))
    pad = np.zeros((*warps.shape[:-1], 32 - warps.shape[-1]))
    return tree32(np.concatenate([warps, pad], axis=-1))


def strided_sums(values: np.ndarray, threads: int) -> np.ndarray:
    """Each thread j's sequential sum of values[j], values[j + threads], ... from 0.0."""
    pad = (-values.size) % threads
    rows = np.concatenate([values, np.zeros(pad)]).reshape(-1, threads)
    acc = np.zeros(threads)
    for row in rows:  # in order, as the loop does (adding 0.0 to a sum is exact)
        acc = acc + row
    return acc


def kernel_norm(g: np.ndarray, max_norm: float = np.inf) -> tuple:
    """(norm, coef) as grad_sumsq_partial + grad_norm_finish compute them."""
    blocks = cupy_clip.norm_grid(g.size)
    x = g.astype(np.float64)
    acc = strided_sums(x * x, blocks * cuda_source.BLOCK)
    partial = block_sum(acc.reshape(blocks, cuda_source.BLOCK))
    total = block_sum(strided_sums(partial, cuda_source.BLOCK))
    T = g.dtype.type
    norm = T(np.sqrt(total))
    coef = T(1)
    if np.isfinite(norm):
        c = T(max_norm) / (norm + T(1e-6))
        coef = c if c < 1 else T(1)
    return norm, coef


# ----------------------------------------------------------------------------- dropout bits

CASES = [(0, 0, (1,)), (1, 3, (7,)), (123, 99, (3, 5, 7)), (2**40 + 5, 2**33, (257, 13))]


@pytest.mark.parametrize(("seed", "counter", "shape"), CASES)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.999999999])
def test_the_kernels_hash_makes_keep_masks_bits(seed, counter, shape, p):
    """keep(i) of dropout.cu == Generator.keep_mask on a non-CPU device, bit for bit."""
    pytest.importorskip("array_api_strict")
    gen, keyed = Generator(seed, "strict:device1"), Generator(seed, "strict:device1")
    gen.counter = keyed.counter = counter
    reference = mt.backend.to_numpy(gen.keep_mask(shape, p))
    keys = keyed.dropout_keys(p)
    assert keyed.counter == gen.counter == counter + 1
    kept = transcribed.keep(int(np.prod(shape)), *keys).reshape(shape)
    np.testing.assert_array_equal(kept, reference)
    bits = counter_bits(np, "cpu", shape, seed, counter)
    k1, k2 = counter_keys(seed, counter)
    assert keys[:2] == (k1, k2)
    index = np.arange(bits.size, dtype=np.uint32)
    hashed = transcribed.lowbias32(transcribed.lowbias32(index ^ k1) ^ k2)
    np.testing.assert_array_equal(hashed, bits.reshape(-1))


def test_keep_threshold_and_index_wrap():
    """threshold = min(round(p 2^32), 2^32 - 1); the index past 2^32 wraps as uint32."""
    assert Generator(0, "cpu").dropout_keys(0.5)[2] == 2**31
    assert Generator(0, "cpu").dropout_keys(1 - 1e-12)[2] == 2**32 - 1
    index = (np.array([2**32 + 5], dtype=np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    assert index[0] == 5


# ----------------------------------------------------------------------------- the ops' keyed path


class _KeyedDropout(cupy_dropout.Dropout):
    """fast/cupy/dropout.py's Dropout twin, for the strict stand-in (every dtype)."""

    dtypes = None


class _KeyedDropoutAdd(cupy_dropout.DropoutAdd):
    dtypes = None


def _transcribed(monkeypatch):
    """fast/cupy/dropout.py's launches replaced by their NumPy transcriptions (strict arrays)."""
    forward = lambda x, keys, scale: _on(x, kernel_dropout(_np(x), keys, scale))  # noqa: E731
    monkeypatch.setattr(cupy_dropout, "dropout_forward", forward)
    monkeypatch.setattr(cupy_dropout, "dropout_backward", forward)
    monkeypatch.setattr(cupy_dropout, "dropout_add_forward", lambda x, r, keys, scale: _on(
        x, kernel_dropout(_np(x), keys, scale, _np(r))))  # fmt: skip


def _np(a):
    return mt.backend.to_numpy(a)


def _on(like, a):
    return mt.backend.asarray(a, device=mt.backend.device_of(like))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_keyed_path_of_the_ops_equals_the_reference(rng, dtype, monkeypatch):
    """fast/cupy/dropout.py's Dropout and DropoutAdd twins (their launches transcribed in
    NumPy): keys saved (no mask), the mask made again in backward; forward and gradients
    equal the reference ops exactly."""
    strict = pytest.importorskip("array_api_strict")
    dev = "strict:device1"
    xs, rs, gs = (rng.standard_normal((5, 33)) for _ in range(3))
    results = []
    _transcribed(monkeypatch)
    array_type = type(strict.asarray(0.0))
    for keyed in (False, True):
        if keyed:
            TWINS[(ops_dropout.Dropout, array_type)] = _KeyedDropout
            TWINS[(ops_dropout.DropoutAdd, array_type)] = _KeyedDropoutAdd
        try:
            x = mt.tensor(xs, dtype=dtype, device=dev, requires_grad=True)
            r = mt.tensor(rs, dtype=dtype, device=dev, requires_grad=True)
            y = dropout(x, 0.3, generator=Generator(4, dev))
            z = dropout_add(x, r, 0.3, generator=Generator(5, dev))
            assert (y._ctx.saved == () and z._ctx.saved == ()) is keyed  # keys, no mask
            (y * z).backward(mt.tensor(gs, dtype=dtype, device=dev))
            results.append([_np(t) for t in (y.data, z.data, x.grad, r.grad)])
        finally:
            TWINS.pop((ops_dropout.Dropout, array_type), None)
            TWINS.pop((ops_dropout.DropoutAdd, array_type), None)
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- Adam


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adams_kernel_math_equals_the_reference(rng, dtype, weight_decay):
    kw = dict(lr=3e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay)
    p0, m0 = rng.standard_normal(1000).astype(dtype), 0.1 * rng.standard_normal(1000)
    v0 = (0.01 * rng.random(1000)).astype(dtype)
    ref, fused, kern = ([a.copy() for a in (p0, m0.astype(dtype), v0)] for _ in range(3))
    for t in (1, 2, 50):
        g = rng.standard_normal(1000).astype(dtype)
        adam_reference(*ref[:1], g, *ref[1:], t=t, **kw)
        numpy_adam.adam_update(fused[0], g, *fused[1:], t=t, **kw)
        kernel_adam(kern[0], g, *kern[1:], cupy_adam.adam_scalars(dtype, t=t, **kw))
        for a, b, c in zip(ref, fused, kern, strict=True):
            np.testing.assert_array_equal(c, b)  # the kernel's roundings are fast.numpy's
            tol = (1e-12, 1e-15) if dtype == "float64" else (1e-5, 1e-6)  # rtol, atol
            np.testing.assert_allclose(c, a, rtol=tol[0], atol=tol[1])
    before = [a.copy() for a in kern]
    kernel_adam(kern[0], g, *kern[1:], cupy_adam.adam_scalars(dtype, t=51, **kw), ok=False)
    for a, b in zip(before, kern, strict=True):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- norm and clip


@pytest.mark.parametrize("n", [1, 255, 257, 10_000, 300_000])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_norm_kernels_reduction_equals_the_reference_norm(rng, n, dtype):
    """The fixed reduction tree (double sums) against clip.py: float64 to 1e-13, float32
    to 2e-6 (the reference sums in float32); the clip factor exactly, in T."""
    g = (rng.standard_normal(n) * 3).astype(dtype)
    norm, coef = kernel_norm(g, max_norm=1.0)
    reference = total_norm([g])
    np.testing.assert_allclose(norm, reference, rtol=1e-13 if dtype == "float64" else 2e-6)
    assert norm.dtype == np.dtype(dtype)
    assert coef == clip_coefficient(norm, 1.0)
    assert kernel_norm(g, max_norm=1e30)[1] == 1.0


def test_the_norm_kernels_clip_factor_is_1_for_a_nan_or_inf_norm():
    for bad in (np.nan, np.inf):
        g = np.array([1.0, bad, 2.0], dtype="float32")
        norm, coef = kernel_norm(g, max_norm=1.0)
        assert not np.isfinite(norm) and coef == 1.0


def test_every_kernel_used_is_an_entry_point_of_its_file():
    modules = (cupy_dropout, cupy_adam, cupy_clip)
    text = "".join(open(m.__file__, encoding="utf-8").read() for m in modules)
    used = set(re.findall(r'kernel_for\(\s*"(\w+\.cu)",\s*"(\w+)"', text))  # literal names
    dropout = set(re.findall(r'_dropout_launch\("(\w+)"', text))
    used |= {("dropout.cu", n + tail) for n in dropout for tail in ("", "_graph")}
    used |= {("adam.cu", n) for n in re.findall(r'name\b.*"(adam_update\w*)"', text)}
    for file, name in used:
        defined = cuda_source.entry_points(cuda_source.source(file))
        assert {name + "_f32", name + "_f64"} <= set(defined), (file, name)
    assert len(used) == 10, used


def test_the_module_names_and_grids():
    """Importable without CuPy; every kernel launch is a function of its twin's file, and
    the step's twins are registered for CuPy (fast/cupy/__init__.py's TWINS)."""
    for module, names in [
        (cupy_dropout, ("dropout_forward", "dropout_backward", "dropout_add_forward")),
        (cupy_clip, ("grad_norm", "clip_grad_norm", "step_ok", "clip_flat")),
        (cupy_adam, ("adam_update", "adam_scalars")),
    ]:
        for name in names:
            assert callable(getattr(module, name)), name
    twins = fast_cupy.TWINS.values()
    assert cupy_adam.adam_update in twins and cupy_clip.step_ok in twins
    assert cupy_clip.clip_flat in twins
    assert cupy_dropout.Dropout in twins and cupy_dropout.DropoutAdd in twins
    assert cuda_source.elementwise_grid(0) == 1
    assert cuda_source.elementwise_grid(10**12) == 65536
    assert cupy_clip.norm_grid(257) == 2 and cupy_clip.norm_grid(10**9) == 1024


# ----------------------------------------------------------------------------- on a GPU

gpu = pytest.mark.gpu  # skipped without a GPU (tests/conftest.py)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_dropout_kernels_are_bit_exact(rng, dtype):
    import cupy as cp

    x = cp.asarray(rng.standard_normal((37, 129)), dtype=dtype)
    r = cp.asarray(rng.standard_normal((37, 129)), dtype=dtype)
    keep = Generator(9, "cuda:0").keep_mask(x.shape, 0.2)
    keys = Generator(9, "cuda:0").dropout_keys(0.2)
    expect = cp.where(keep, x * (1 / 0.8), 0.0)
    cp.testing.assert_array_equal(cupy_dropout.dropout_forward(x, keys, 1 / 0.8), expect)
    cp.testing.assert_array_equal(cupy_dropout.dropout_backward(x, keys, 1 / 0.8), expect)
    cp.testing.assert_array_equal(cupy_dropout.dropout_add_forward(x, r, keys, 1 / 0.8), r + expect)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_adam_kernel_equals_numpy_and_skips_when_not_ok(rng, dtype):
    import cupy as cp

    kw = dict(lr=1e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01, t=3)
    host = [rng.standard_normal(5000).astype(dtype) for _ in range(4)]
    host[3] = np.abs(host[3])
    dev = [cp.asarray(a) for a in host]
    numpy_adam.adam_update(host[0], host[1], host[2], host[3], **kw)
    cupy_adam.adam_update(*dev, ok=cp.asarray(True), **kw)
    for a, b in zip(host, dev, strict=True):
        np.testing.assert_array_equal(cp.asnumpy(b), a)
    before = [a.copy() for a in dev]
    cupy_adam.adam_update(*dev, ok=cp.asarray(False), **kw)
    for a, b in zip(before, dev, strict=True):
        cp.testing.assert_array_equal(a, b)


@gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_norm_clip_and_flag_stay_on_the_device(rng, dtype):
    import cupy as cp

    g_host = (rng.standard_normal(300_000) * 3).astype(dtype)
    g = cp.asarray(g_host)
    norm = cupy_clip.clip_grad_norm(g, 1.0)
    assert isinstance(norm, cp.ndarray) and norm.shape == ()
    expect_norm, coef = kernel_norm(g_host, 1.0)
    assert cp.asnumpy(norm) == expect_norm  # the transcription is bit-exact
    np.testing.assert_array_equal(cp.asnumpy(g), g_host * coef)
    assert cp.asnumpy(cupy_clip.grad_norm(cp.asarray(g_host))) == expect_norm
    ok = cupy_clip.step_ok(cp.asarray(1.5, dtype=dtype), norm)
    assert isinstance(ok, cp.ndarray) and ok.shape == () and bool(ok)
    bad = cupy_clip.step_ok(cp.asarray(np.nan, dtype=dtype), norm, prev=ok)
    assert not bool(bad)
