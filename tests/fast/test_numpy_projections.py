"""The twins of ``ops/projections.py``: NumPy's (``fast/numpy/projections.py``: one product
each way, the attention twin on the packed heads) and CuPy's (``fast/cupy/projections.py``,
its wiring run here with NumPy in CuPy's place and ``numpy.matmul`` for cuBLAS) give the
reference's values and gradients: self- and cross-attention, GQA's h_kv heads, biases on
and off, float32 and float64, into the optimizer's buffers; and a Transformer's training
step takes them."""

from __future__ import annotations

import numpy as np
import pytest
from cupy_standin import numpy_cublaslt

import minitransformer as mt
from minitransformer import fast, nn
from minitransformer.fast.cupy import projections as cupy_projections
from minitransformer.fast.gpu import cublas, cublaslt
from minitransformer.fast.numpy import projections as numpy_projections
from minitransformer.function import TWINS
from minitransformer.ops.attention import ScaledDotProductAttention
from minitransformer.ops.heads import SplitHeads
from minitransformer.ops.projections import PackedAttention, Projections
from minitransformer.optim import Adam

HEADS = [(2, 2, 3, 3), (4, 2, 2, 2), (2, 1, 3, 2)]  # (h, h_kv, d_k, d_v)


def _step(h, h_kv, d_k, d_v, bias, cross, dtype, optimizer):
    """The output and every gradient of sum(u * attention) through the packed ops."""
    rng = np.random.default_rng(0)
    B, T, S, D = 2, 3, 4 if cross else 3, 6

    def t(*shape, grad=True):
        return mt.tensor(rng.standard_normal(shape) * 0.5, dtype=dtype, requires_grad=grad)

    x = t(B, T, D)
    memory = t(B, S, D) if cross else x
    widths = [h * d_k, h_kv * d_k, h_kv * d_v]
    weights = [t(D, w) for w in widths]
    biases = [t(w) for w in widths] if bias else []
    opt = Adam([*weights, *biases]) if optimizer else None
    mask = mt.tensor(rng.random((B, 1, T, S)) > 0.3)
    if cross:
        q = SplitHeads.apply(x @ weights[0] + (biases[0] if bias else 0.0), h=h)
        y = Projections.apply(memory, *weights[1:], *biases[1:], parts=2)
    else:
        q, y = None, Projections.apply(x, *weights, *biases, parts=3)
    out = PackedAttention.apply(y, q, mask, h=h, h_kv=h_kv, d_k=d_k)
    u = rng.standard_normal(out.shape).astype(dtype)
    (out * mt.tensor(u)).sum().backward()
    leaves = [x, *([memory] if cross else []), *weights, *biases]
    if opt is not None:  # the parameters' gradients are in the optimizer's buffer
        assert all(np.shares_memory(p.grad, opt.groups[0].grad) for p in (*weights, *biases))
    return [out.numpy(), *[np.array(a.grad) for a in leaves]]


def _close(got, want, dtype):
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype == np.dtype(dtype) and a.shape == b.shape
        np.testing.assert_allclose(a, b, **tol)


CASES = [
    pytest.param(*heads, bias, cross, id=f"{heads}-bias{bias}-{'cross' if cross else 'self'}")
    for heads in HEADS
    for bias in (True, False)
    for cross in (False, True)
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("h, h_kv, d_k, d_v, bias, cross", CASES)
def test_the_numpy_twins_match_the_references(h, h_kv, d_k, d_v, bias, cross, dtype):
    want = _step(h, h_kv, d_k, d_v, bias, cross, dtype, optimizer=False)
    with fast.switched_on():
        assert TWINS[(Projections, np.ndarray)] is numpy_projections.Projections
        assert TWINS[(PackedAttention, np.ndarray)] is numpy_projections.PackedAttention
        for optimizer in (False, True):
            _close(_step(h, h_kv, d_k, d_v, bias, cross, dtype, optimizer), want, dtype)


@pytest.mark.parametrize("lt", [True, False], ids=["cublaslt", "no-cublaslt"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("h, h_kv, d_k, d_v, bias, cross", CASES)
def test_the_cupy_twins_wiring_matches_the_references(
    monkeypatch, h, h_kv, d_k, d_v, bias, cross, dtype, lt
):
    want = _step(h, h_kv, d_k, d_v, bias, cross, dtype, optimizer=False)
    monkeypatch.setattr(cupy_projections, "cp", np)  # NumPy in CuPy's place
    monkeypatch.setattr(cublas, "matmul", lambda a, b, cp=None, out=None: np.matmul(a, b, out=out))
    monkeypatch.setattr(cublaslt, "matmul", numpy_cublaslt(lt))
    # the CUDA softmax is tested on a GPU: here the math around it, on the reference's
    monkeypatch.setattr(cupy_projections, "ScaledDotProductAttention", ScaledDotProductAttention)
    monkeypatch.setattr(cupy_projections.PackedAttention, "attention", ScaledDotProductAttention)
    monkeypatch.setitem(TWINS, (Projections, np.ndarray), cupy_projections.Projections)
    monkeypatch.setitem(TWINS, (PackedAttention, np.ndarray), cupy_projections.PackedAttention)
    for optimizer in (False, True):
        _close(_step(h, h_kv, d_k, d_v, bias, cross, dtype, optimizer), want, dtype)


@pytest.mark.parametrize("kv_heads", [None, 1])
def test_a_training_step_with_the_twins_is_the_references(kv_heads):
    def step():
        cfg = nn.TransformerConfig(src_vocab=11, tgt_vocab=11, d_model=8, h=2, N=1,
                                   d_ff=16, dropout=0.0, kv_heads=kv_heads)  # fmt: skip
        model = nn.Transformer(cfg, seed=0)
        src = mt.tensor(np.arange(12).reshape(2, 6) % 9 + 2)
        tgt = mt.tensor(np.arange(14).reshape(2, 7) % 8 + 2)
        loss = model.loss(model(src, tgt[:, :-1]), tgt[:, 1:])
        loss.backward()
        return [loss.numpy()] + [np.array(p.grad) for p in model.parameters()]

    want = step()
    with fast.switched_on():
        _close(step(), want, "float32")
