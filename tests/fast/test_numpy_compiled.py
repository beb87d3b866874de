"""numba's LayerNorm row kernels (``fast/numpy/compiled.py``, an optional extra): off by
default and without numba; switched on, the same values and gradients as the NumPy kernels
and the reference (float32 and float64, one row and many, D = 1), rows that overflow or
underflow handed to the NumPy kernel's redo, other dtypes and layouts not taken."""

from __future__ import annotations

import numpy as np
import pytest
from test_optim import adam_runs

import minitransformer as mt
import minitransformer.functional as F
from minitransformer import fast
from minitransformer.fast.numpy import compiled
from minitransformer.fast.numpy import layernorm as layernorm_twin


def test_off_by_default_and_importing_it_imports_no_numba():
    import sys

    assert not compiled.enabled()
    assert "numba" not in sys.modules or compiled.available()
    x = np.ones((2, 3))
    assert not compiled.fits(x, x[0], x[0])  # off: nothing fits


def test_enable_without_numba_changes_nothing(monkeypatch):
    monkeypatch.setattr(compiled, "available", lambda: False)
    assert compiled.enable() is False and not compiled.enabled()


@pytest.fixture
def switched_on():
    pytest.importorskip("numba")
    assert compiled.enable()
    yield
    compiled.disable()


def _ln_forward_backward(x, dtype, seed=0):
    rng = np.random.default_rng(seed)
    D = x.shape[-1]
    xt = mt.tensor(x, dtype=dtype, requires_grad=True)
    gamma = mt.tensor(rng.standard_normal(D), dtype=dtype, requires_grad=True)
    beta = mt.tensor(rng.standard_normal(D), dtype=dtype, requires_grad=True)
    y = F.layer_norm(xt, gamma, beta, eps=1e-5)
    u = rng.standard_normal(y.shape).astype(dtype)
    (y * mt.tensor(u)).sum().backward()
    return [y.numpy(), xt.grad, gamma.grad, beta.grad]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 16), (1, 1), (5, 1), (64, 64)])
def test_the_compiled_kernels_match_the_reference(switched_on, shape, dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape) * 3 + 1
    calls = []
    real = compiled._kernels["layer_norm_forward"]
    compiled._kernels["layer_norm_forward"] = lambda *a: calls.append(1) or real(*a)
    with fast.switched_on():
        got = _ln_forward_backward(x, dtype)
    compiled._kernels["layer_norm_forward"] = real
    assert calls  # the compiled kernel is what ran
    want = _ln_forward_backward(x, dtype)  # the reference
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-11, atol=1e-12)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a, b, **tol)


@pytest.mark.parametrize("scale", [1e25, 1e-25, 0.0])
def test_rows_out_of_range_go_to_the_numpy_redo(switched_on, scale):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 8)).astype("float32")
    x[1] *= scale  # a sum of squares that overflows, underflows, or a constant row
    gamma, beta = np.ones(8, "float32"), np.zeros(8, "float32")
    assert compiled.layer_norm_forward(x, gamma, beta, 0.0) is None  # handed back
    got = layernorm_twin.layer_norm_forward(x, gamma, beta, 0.0)
    compiled.disable()
    want = layernorm_twin.layer_norm_forward(x, gamma, beta, 0.0)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_other_dtypes_and_layouts_are_not_taken(switched_on):
    x = np.ones((4, 6), dtype="float32")
    g = np.ones(6, dtype="float32")
    assert compiled.fits(x, g, g)
    assert not compiled.fits(x.astype("float16"), g.astype("float16"), g.astype("float16"))
    assert not compiled.fits(x[:, ::2], g[::2], g[::2])  # not C-contiguous
    assert not compiled.fits(x, g.astype("float64"), g)  # dtypes mixed
    assert not compiled.fits(x[:0], g, g) and not compiled.fits(x, g[:0], g)  # empty


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-6), ("float64", 1e-13)])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("ok", [None, True, False])
def test_the_compiled_adam_matches_the_reference_update(switched_on, dtype, tol, weight_decay, ok):
    calls = []
    real = compiled._kernels["adam"]
    compiled._kernels["adam"] = lambda *a: calls.append(1) or real(*a)
    runs, p0 = adam_runs(dtype, weight_decay, ok)  # the NumPy twin takes the compiled kernel
    compiled._kernels["adam"] = real
    assert len(calls) == (0 if ok is False else 6)
    for ref, got in zip(runs["reference"], runs["fused"], strict=True):
        assert ref.dtype == got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    if ok is False:
        np.testing.assert_array_equal(runs["fused"][0], p0)


def test_a_training_step_with_the_compiled_kernels_is_the_references(switched_on):
    from minitransformer import nn
    from minitransformer.optim import Adam

    def steps():
        cfg = nn.TransformerConfig(src_vocab=11, tgt_vocab=11, d_model=8, h=2, N=1,
                                   d_ff=16, dropout=0.0)  # fmt: skip
        model = nn.Transformer(cfg, seed=0)
        opt = Adam(model.parameters(), lr=1e-2)
        src = mt.tensor(np.arange(12).reshape(2, 6) % 9 + 2)
        tgt = mt.tensor(np.arange(14).reshape(2, 7) % 8 + 2)
        losses = []
        for _ in range(3):
            loss = model.loss(model(src, tgt[:, :-1]), tgt[:, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        # a key's bias moves no score (softmax ignores a shift): its gradient is rounding
        # noise, which Adam's m / sqrt(v) makes a full step either way; left out
        named = model.named_parameters()
        return losses, [p.numpy().copy() for n, p in named if not n.endswith("w_k.bias")]

    want = steps()  # the reference
    with fast.switched_on():
        got = steps()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for a, b in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("ids_shape", [(3, 5), (7,), (1, 1)])
def test_the_compiled_embedding_and_relu_backward_match_the_reference(switched_on, dtype,
                                                                      ids_shape):  # fmt: skip
    def run():
        rng = np.random.default_rng(5)
        V, D = 6, 4  # ids repeat: the scatter-add sums them
        table = mt.tensor(rng.standard_normal((V, D)), dtype=dtype, requires_grad=True)
        ids = mt.tensor(rng.integers(0, V, ids_shape))
        h = F.relu(F.embedding(ids, table) - 0.2)  # some entries 0: ReLU's mask matters
        u = rng.standard_normal(h.shape).astype(dtype)
        (h * mt.tensor(u)).sum().backward()
        return [h.numpy(), table.grad]

    used = []
    for name in ("scatter_add", "relu_backward"):
        real = compiled._kernels[name]
        compiled._kernels[name] = lambda *a, _r=real, _n=name: used.append(_n) or _r(*a)
    with fast.switched_on():
        got = run()
    compiled.disable()
    assert set(used) == {"scatter_add", "relu_backward"}
    want = run()
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_without_the_compiled_kernels_the_new_twins_run_the_reference():
    rng = np.random.default_rng(6)
    table = mt.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    ids = mt.tensor(np.array([[1, 1, 4]]))
    with fast.switched_on():
        F.relu(F.embedding(ids, table)).sum().backward()
    got = table.grad.copy()
    table.grad = None
    F.relu(F.embedding(ids, table)).sum().backward()
    np.testing.assert_array_equal(got, table.grad)
