"""Linear, Embedding, LayerNorm, Dropout, PositionwiseFeedForward, PositionalEncoding, masks:
forward against NumPy, gradcheck in float64, on every backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
from nn_helpers import to_np

import minitransformer as mt
from minitransformer.errors import TokenIdError
from minitransformer.nn import (
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    PositionalEncoding,
    PositionwiseFeedForward,
    causal_mask,
    padding_mask,
    target_mask,
)


def f64(module, device):
    """The module in float64 on ``device`` with every parameter nudged off its init
    (LayerNorm's 1/0 and zero biases would hide transposition mistakes)."""
    module.to(device, "float64")
    rng = np.random.default_rng(1)
    for p in module.parameters():
        p.data = mt.backend.asarray(to_np(p) + 0.3 * rng.standard_normal(p.shape), device=device)
    return module


def check(module, x, *extra):
    return mt.gradcheck(lambda x, *ps: module(x, *extra), x, *module.parameters())


def test_linear_forward_and_gradcheck(device, make, rng):
    layer = f64(Linear(5, 3), device)
    x = make(rng.standard_normal((2, 4, 5)))
    ref = to_np(x) @ to_np(layer.weight) + to_np(layer.bias)
    np.testing.assert_allclose(to_np(layer(x)), ref, rtol=1e-12)
    assert layer.weight.shape == (5, 3)  # (d_in, d_out): x W + b as in the paper
    assert check(layer, x)
    assert check(f64(Linear(5, 3, bias=False), device), x)


def test_linear_xavier_uniform_init():
    layer = Linear(300, 200, generator=mt.backend.Generator(0))
    w = to_np(layer.weight)
    bound = math.sqrt(6 / 500)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.var() - bound**2 / 3) < 0.05 * bound**2 / 3
    assert mt.backend.dtype_name(layer.weight.dtype) == "float32"
    assert not to_np(layer.bias).any()


def test_same_seed_same_weights_and_float64_matches_float32():
    a = Linear(4, 4, generator=mt.backend.Generator(7))
    b = Linear(4, 4, generator=mt.backend.Generator(7))
    np.testing.assert_array_equal(to_np(a.weight), to_np(b.weight))
    c = mt.nn.Transformer(mt.TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9))
    d = mt.nn.Transformer(
        mt.TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, dtype="float64")
    )
    for (_, p), (_, q) in zip(c.named_parameters(), d.named_parameters(), strict=True):
        np.testing.assert_allclose(to_np(p), to_np(q), rtol=1e-7)


def test_embedding_lookup_gradient_and_init(device, make):
    emb = Embedding(7, 16, generator=mt.backend.Generator(0))
    assert abs(to_np(emb.weight).std() - 16**-0.5) < 0.03
    emb = f64(emb, device)
    ids = mt.backend.asarray(np.array([[1, 3, 3], [6, 0, 1]]), device=device)
    out = emb(ids)
    np.testing.assert_array_equal(to_np(out), to_np(emb.weight)[to_np(ids)])
    assert mt.gradcheck(lambda w: emb(ids), emb.weight)


def test_layer_norm_forward_and_gradcheck(device, make, rng):
    ln = f64(LayerNorm(6), device)
    x = make(rng.standard_normal((2, 3, 6)) * 3 + 1)
    xn = to_np(x)
    mu, var = xn.mean(-1, keepdims=True), xn.var(-1, keepdims=True)
    ref = (xn - mu) / np.sqrt(var + 1e-5) * to_np(ln.gamma) + to_np(ln.beta)
    np.testing.assert_allclose(to_np(ln(x)), ref, rtol=1e-10, atol=1e-12)
    assert check(ln, x)


def test_dropout_modes(device, make):
    x = make(np.ones((100, 100)), dtype="float32", requires_grad=False)
    drop = Dropout(0.25, generator=mt.backend.Generator(0, device))
    y = to_np(drop(x))
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y == 0).mean() - 0.25) < 0.02
    drop.eval()
    assert drop(x) is x
    assert Dropout(0.0)(x) is x


def test_feed_forward_is_the_papers_formula(device, make, rng):
    ffn = f64(PositionwiseFeedForward(4, 10), device)
    x = make(rng.standard_normal((2, 3, 4)))
    w1, b1, w2, b2 = (to_np(p) for p in ffn.parameters())
    ref = np.maximum(0, to_np(x) @ w1 + b1) @ w2 + b2  # max(0, x W1 + b1) W2 + b2
    np.testing.assert_allclose(to_np(ffn(x)), ref, rtol=1e-12)
    assert check(ffn, x)


def test_sinusoid_table_matches_the_paper(device):
    pe = PositionalEncoding(6, max_len=50).to(device)
    table = to_np(pe.table)
    pos, i = 17, 1
    assert table[pos, 2 * i] == pytest.approx(math.sin(pos / 10000 ** (2 * i / 6)), abs=1e-6)
    assert table[pos, 2 * i + 1] == pytest.approx(math.cos(pos / 10000 ** (2 * i / 6)), abs=1e-6)
    assert PositionalEncoding(5, max_len=3).table.shape == (3, 5)  # odd d_model works
    assert "table" not in pe.state_dict()  # the config determines it: not checkpointed


def _paper_table(max_len, d_model):
    """The paper's formula, element by element in Python floats (float64)."""
    out = np.empty((max_len, d_model))
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (2 * (j // 2) / d_model)
            out[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return out


def test_float64_positions_are_computed_in_float64(device):
    """A float64 model's table is the float64 sinusoid, not a float32 one widened (which
    is off by ~5e-8), also after casting a float32 module to float64 and back and forth."""
    ref = _paper_table(50, 6)
    pe = PositionalEncoding(6, max_len=50).to(device, "float64")
    np.testing.assert_allclose(to_np(pe.table), ref, rtol=0, atol=1e-13)
    pe.to(dtype="float32").to(dtype="float64")
    np.testing.assert_allclose(to_np(pe.table), ref, rtol=0, atol=1e-13)
    assert str(to_np(pe.to(dtype="float32").table).dtype) == "float32"
    cfg = mt.TransformerConfig(
        src_vocab=7, tgt_vocab=7, d_model=6, h=2, N=1, d_ff=8, max_len=50, dtype="float64"
    )
    model = mt.nn.Transformer(cfg)
    np.testing.assert_allclose(to_np(model.positions.table), ref, rtol=0, atol=1e-13)


def test_positional_encoding_adds_positions_with_offset(device, make):
    pe = PositionalEncoding(4, max_len=10).to(device, "float64")
    x = make(np.zeros((2, 3, 4)), requires_grad=False)
    np.testing.assert_allclose(
        to_np(pe(x, offset=5)), np.broadcast_to(to_np(pe.table)[5:8], (2, 3, 4))
    )
    with pytest.raises(
        TokenIdError, match=r"positions 8..10 exceed\(s\) max_len = 10.*raise max_len"
    ):
        pe(x, offset=8)
    with pytest.raises(TokenIdError, match="length T = 11 exceed"):
        pe(make(np.zeros((1, 11, 4)), requires_grad=False))


def test_learned_positions_gradcheck(device, make, rng):
    pe = PositionalEncoding(4, max_len=6, learned=True)
    assert "table" in dict(pe.named_parameters()) and "table" in pe.state_dict()
    pe = f64(pe, device)
    x = make(rng.standard_normal((2, 3, 4)))
    assert mt.gradcheck(lambda x, t: pe(x, offset=2), x, pe.table)


def test_masks(device):
    ids = mt.backend.asarray(np.array([[5, 6, 0], [7, 0, 0]]), device=device)
    pm = padding_mask(ids, 0)
    assert pm.shape == (2, 1, 1, 3) and mt.backend.device_of(pm) == device
    assert to_np(pm)[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    cm = causal_mask(3, device)
    assert cm.shape == (1, 1, 3, 3) and mt.backend.device_of(cm) == device
    np.testing.assert_array_equal(to_np(cm)[0, 0], np.tril(np.ones((3, 3), bool)))
    step = to_np(causal_mask(2, device, offset=3))[0, 0]  # queries at positions 3 and 4
    np.testing.assert_array_equal(step, np.tril(np.ones((5, 5), bool))[3:])
    tm = to_np(target_mask(ids, 0))
    assert tm.shape == (2, 1, 3, 3)
    np.testing.assert_array_equal(tm[1, 0], [[1, 0, 0], [1, 0, 0], [1, 0, 0]])
