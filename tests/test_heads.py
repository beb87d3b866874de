"""What the heads do (``minitransformer/tools/heads``) and the heads' gates
(``MultiHeadAttention.head_mask``): statistics on hand-made attention patterns give their
known values; a head switched off contributes exactly nothing; the gates' gradients pass
gradcheck, and the importance score is the loss's derivative by finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import nn
from minitransformer.config import TransformerConfig
from minitransformer.errors import ArgumentError, DTypeError, ShapeError
from minitransformer.tools import heads

# ----------------------------------------------------------------------------- statistics


def _stats(p, valid=None):
    return heads.head_stats(np.asarray(p, dtype=float)[None, None], valid)


def test_uniform_attention_has_the_largest_entropy():
    T = S = 5
    s = _stats(np.full((T, S), 1 / S))
    assert s["entropy"][0] == pytest.approx(math.log(S))
    assert s["confidence"][0] == pytest.approx(1 / S)
    assert s["same"][0] == pytest.approx(1 / S)
    assert s["prev"][0] == pytest.approx((T - 1) / T / S)  # row 0 has no previous key
    # mean |s - t| over a uniform row, averaged over rows t
    want = np.mean([np.mean(np.abs(np.arange(S) - t)) for t in range(T)])
    assert s["distance"][0] == pytest.approx(want)


def test_a_diagonal_head_attends_to_itself():
    s = _stats(np.eye(6))
    assert s["entropy"][0] == 0.0 and s["same"][0] == 1.0 and s["confidence"][0] == 1.0
    assert s["prev"][0] == 0.0 and s["next"][0] == 0.0 and s["distance"][0] == 0.0


def test_a_previous_token_head():
    """Row t puts all its weight on t - 1 (row 0 on itself): prev = (T-1)/T, distance too."""
    T = 8
    p = np.eye(T, k=-1)
    p[0, 0] = 1.0
    s = _stats(p)
    assert s["prev"][0] == pytest.approx((T - 1) / T)
    assert s["same"][0] == pytest.approx(1 / T)
    assert s["distance"][0] == pytest.approx((T - 1) / T)
    assert s["next"][0] == 0.0 and s["entropy"][0] == 0.0


def test_padding_rows_are_left_out():
    p = np.eye(4)
    p[3] = np.full(4, 0.25)  # a padding row, uniform
    valid = np.array([[True, True, True, False]])
    s = _stats(p, valid)
    assert s["entropy"][0] == 0.0 and s["same"][0] == 1.0
    assert _stats(p)["entropy"][0] == pytest.approx(math.log(4) / 4)


def test_several_heads_are_kept_apart():
    p = np.stack([np.eye(3), np.full((3, 3), 1 / 3)])[None]  # (1, 2, 3, 3)
    s = heads.head_stats(p)
    np.testing.assert_allclose(s["confidence"], [1.0, 1 / 3])


def test_wrong_shapes_are_refused():
    with pytest.raises(ShapeError, match=r"\(B, H, T, S\)"):
        heads.head_stats(np.ones((3, 3)))
    with pytest.raises(ShapeError, match="valid"):
        heads.head_stats(np.ones((1, 1, 3, 3)) / 3, np.ones((2, 3), dtype=bool))


# ----------------------------------------------------------------------------- the gates


def _attention(dtype="float64", h=4, D=16):
    mt.backend.manual_seed(0)
    return nn.MultiHeadAttention(D, h).to(dtype=dtype)


def _x(shape=(2, 5, 16), dtype="float64", seed=0):
    return mt.Tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def test_a_head_switched_off_contributes_nothing():
    """Gate 0 on head 2: changing that head's query, key and value projections changes
    nothing in the output, bit for bit; gates of 1 leave the layer as it was."""
    m, x = _attention(), _x()
    plain = m(x, x, x).numpy()
    m.head_mask = [1.0, 1.0, 1.0, 1.0]
    np.testing.assert_array_equal(m(x, x, x).numpy(), plain)
    m.head_mask = [1.0, 1.0, 0.0, 1.0]
    off = m(x, x, x).numpy()
    d = m.d_k
    for w in (m.w_q, m.w_k, m.w_v):
        w.weight.data[:, 2 * d : 3 * d] += 5.0
        w.bias.data[2 * d : 3 * d] -= 1.0
    np.testing.assert_array_equal(m(x, x, x).numpy(), off)
    assert np.abs(off - plain).max() > 1e-3  # the head did matter before
    m.head_mask = None
    assert m.head_mask is None and np.abs(m(x, x, x).numpy() - off).max() > 1e-3


def test_the_gates_pass_gradcheck():
    m, x = _attention(), _x(seed=1)
    gates = mt.Tensor(np.array([1.0, 0.5, 0.0, 2.0]), requires_grad=True)
    x.requires_grad = True

    def f(x, g):
        m.head_mask = g
        return m(x, x, x)

    assert mt.gradcheck(f, x, gates)


def test_the_gates_are_checked_where_they_enter():
    m = _attention("float32")
    with pytest.raises(ShapeError, match=r"need \(4,\)"):
        m.head_mask = [1.0, 0.0]
    with pytest.raises(DTypeError, match="float32"):
        m.head_mask = mt.Tensor(np.ones(4))  # float64 gates for float32 weights
    with pytest.raises(DTypeError):
        m.head_mask = ["on", "off", "on", "on"]
    m.head_mask = np.ones(4)  # numbers are made the weights' dtype
    assert m.head_mask.dtype == m.w_o.weight.dtype


# ----------------------------------------------------------------------------- a model


def _model():
    mt.backend.manual_seed(0)
    cfg = TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20)
    model = nn.Transformer(cfg, seed=0).to(dtype="float64")
    rng = np.random.default_rng(3)
    src = rng.integers(3, 20, size=(3, 7))
    src[0, 5:] = cfg.pad_id
    tgt = rng.integers(3, 20, size=(3, 6))
    return model, src, tgt[:, :-1], tgt[:, 1:]


def test_maps_and_stats_cover_every_kind_layer_and_head():
    model, src, tgt_in, _ = _model()
    maps = heads.attention_maps(model, src, tgt_in)
    assert set(maps) == {(k, i) for k in heads.KINDS for i in range(2)}
    assert maps[("encoder self", 0)].shape == (3, 4, 7, 7)
    assert maps[("cross", 1)].shape == (3, 4, 5, 7)
    assert maps[("encoder self", 0)][0, :, :, 5:].max() == 0.0  # padded keys get no weight
    rows = heads.model_head_stats(model, src, tgt_in)
    assert len(rows) == 3 * 2 * 4 and {r["kind"] for r in rows} == set(heads.KINDS)
    dec = [r for r in rows if r["kind"] == "decoder self"]
    assert max(r["next"] for r in dec) == 0.0  # the causal mask: never the next token
    assert all(0 <= r["entropy"] <= math.log(7) + 1e-12 for r in rows)
    assert model.training and all(m.last_weights is None for m in model.modules()
                                  if isinstance(m, nn.MultiHeadAttention))  # fmt: skip


def test_importance_is_the_derivative_of_the_loss_by_finite_differences():
    model, src, tgt_in, tgt_out = _model()
    scores = heads.head_importance(model, [(src, tgt_in, tgt_out)], normalize=False)
    model.eval()
    layer = dict(heads.importance._layers(model))[("cross", 1)]
    eps = 1e-6

    def loss(gate):
        layer.head_mask = gate
        with mt.no_grad():
            return float(model.loss(model(src, tgt_in), tgt_out).item())

    for h in range(layer.h):
        up, down = np.ones(layer.h), np.ones(layer.h)
        up[h] += eps
        down[h] -= eps
        numeric = (loss(up) - loss(down)) / (2 * eps)
        assert scores[("cross", 1)][h] == pytest.approx(abs(numeric), rel=1e-5, abs=1e-9)
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_pruning_order_ranks_every_layer_on_raw_scores(seed):
    """head_importance's default scores are the raw |dL/dm_h| (lesson 19: scores normalised
    per layer, ranked across layers, ordered heads no better than chance), and prune_order
    ranks every head of every layer on them at once; normalize=True only rescales each
    layer, its heads' order within the layer unchanged."""
    model, src, tgt_in, tgt_out = _model()
    mt.backend.manual_seed(seed)
    model = nn.Transformer(model.cfg, seed=seed).to(dtype="float64")
    batch = [(src, tgt_in, tgt_out)]
    raw = heads.head_importance(model, batch)
    explicit = heads.head_importance(model, batch, normalize=False)
    normed = heads.head_importance(model, batch, normalize=True)
    for key, v in raw.items():
        np.testing.assert_array_equal(v, explicit[key])
        np.testing.assert_allclose(normed[key], v / np.linalg.norm(v), rtol=1e-12)
        assert list(np.argsort(normed[key], kind="stable")) == list(np.argsort(v, kind="stable"))
    order = heads.prune_order(raw)
    flat = [raw[(k, i)][h] for k, i, h in order]
    assert flat == sorted(flat)
    assert heads.prune_order(normed) != order  # the old, per-layer ranking differs here


def test_pruning_order_and_switching_heads_off():
    model, src, tgt_in, tgt_out = _model()
    scores = heads.head_importance(model, [(src, tgt_in, tgt_out)])
    order = heads.prune_order(scores)
    assert len(order) == 24 and len(set(order)) == 24
    flat = [scores[(k, i)][h] for k, i, h in order]
    assert flat == sorted(flat)
    assert heads.set_heads(model, order[:5]) == 5
    kind, layer, h = order[0]
    gate = dict(heads.importance._layers(model))[(kind, layer)].head_mask
    assert gate.numpy()[h] == 0.0
    assert heads.set_heads(model) == 0
    assert all(m.head_mask is None for m in model.modules() if isinstance(m, nn.MultiHeadAttention))
    with pytest.raises(ArgumentError, match="no such head"):
        heads.set_heads(model, [("encoder self", 5, 0)])
