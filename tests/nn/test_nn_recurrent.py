"""nn/recurrent.py: RNN and GRU cells, additive and dot-product attention, the RNN
encoder-decoder. Shapes, gradcheck in float64 on every backend, padding, argument
validation, PyTorch parity of the RNN cell, and a few training steps that lower the loss."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import f64, sampled_gradcheck, to_np
from nn_helpers import rnn_batch as batch

import minitransformer as mt
import minitransformer.optim as optim
from minitransformer.errors import ConfigError, DTypeError, ShapeError, TokenIdError
from minitransformer.nn import (
    AdditiveAttention,
    DotProductAttention,
    GRUCell,
    RNNCell,
    RNNSeq2Seq,
)

V = 9


@pytest.mark.parametrize("cell_class", [RNNCell, GRUCell])
def test_cell_shapes_and_gradcheck(device, make, rng, cell_class):
    cell = f64(cell_class(3, 4, generator=mt.backend.Generator(0, "cpu")), device)
    x, h = make(rng.standard_normal((2, 3))), make(rng.standard_normal((2, 4)))
    assert tuple(cell(x, h).shape) == (2, 4)
    assert tuple(cell.zero_state(5).shape) == (5, 4)
    assert mt.gradcheck(lambda x, h, *ps: cell(x, h), x, h, *cell.parameters())


def test_rnn_cell_formula(rng):
    cell = f64(RNNCell(3, 4), "cpu")
    x_np, h_np = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    expected = np.tanh(
        x_np @ to_np(cell.w_x.weight) + h_np @ to_np(cell.w_h.weight) + to_np(cell.w_x.bias)
    )
    np.testing.assert_allclose(cell(mt.tensor(x_np), mt.tensor(h_np)).numpy(), expected)


def test_gru_cell_formula(rng):
    cell = f64(GRUCell(3, 4), "cpu")
    x_np, h_np = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    xw = x_np @ to_np(cell.w_x.weight) + to_np(cell.w_x.bias)  # (2, 12)
    hzr = h_np @ to_np(cell.w_hzr.weight)  # (2, 8)
    z, r = sig(xw[:, :4] + hzr[:, :4]), sig(xw[:, 4:8] + hzr[:, 4:])
    n = np.tanh(xw[:, 8:] + (r * h_np) @ to_np(cell.w_hn.weight))
    expected = (1 - z) * h_np + z * n
    np.testing.assert_allclose(cell(mt.tensor(x_np), mt.tensor(h_np)).numpy(), expected)


def test_rnn_cell_matches_torch(rng):
    torch = pytest.importorskip("torch")
    cell = f64(RNNCell(3, 4), "cpu")
    ref = torch.nn.RNNCell(3, 4).double()
    with torch.no_grad():
        ref.weight_ih.copy_(torch.tensor(to_np(cell.w_x.weight).T))
        ref.weight_hh.copy_(torch.tensor(to_np(cell.w_h.weight).T))
        ref.bias_ih.copy_(torch.tensor(to_np(cell.w_x.bias)))
        ref.bias_hh.zero_()
    x_np, h_np = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    g_np = rng.standard_normal((2, 4))
    x = mt.tensor(x_np, requires_grad=True)
    (cell(x, mt.tensor(h_np)) * g_np).sum().backward()
    xt = torch.tensor(x_np, requires_grad=True)
    (ref(xt, torch.tensor(h_np)) * torch.tensor(g_np)).sum().backward()
    np.testing.assert_allclose(to_np(x.grad), xt.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(to_np(cell.w_h.weight.grad), ref.weight_hh.grad.numpy().T)


@pytest.mark.parametrize("kind", ["additive", "dot"])
def test_attention_gradcheck_and_padding(device, make, rng, kind):
    attn = AdditiveAttention(4, 3, 5) if kind == "additive" else DotProductAttention(4, 3)
    attn = f64(attn, device)
    q, memory = make(rng.standard_normal((2, 4))), make(rng.standard_normal((2, 6, 3)))
    keep = np.ones((2, 6))
    keep[1, 4:] = 0
    bias = mt.backend.asarray((keep - 1) * 1e9, device=device)
    ctx = attn(q, memory, attn.keys(memory), bias)
    assert tuple(ctx.shape) == (2, 3)
    assert mt.gradcheck(
        lambda q, m, *ps: attn(q, m, attn.keys(m), bias), q, memory, *attn.parameters()
    )
    # a padded key gets no attention: changing it changes nothing
    changed = to_np(memory).copy()
    changed[1, 4:] += 10.0
    m2 = make(changed)
    np.testing.assert_allclose(to_np(attn(q, m2, attn.keys(m2), bias)), to_np(ctx))


@pytest.mark.parametrize("cell", ["rnn", "gru"])
@pytest.mark.parametrize("attention", [None, "additive", "dot"])
def test_seq2seq_shapes_and_gradcheck(device, cell, attention):
    model = f64(RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, cell=cell, attention=attention), device)
    src, tgt_in, tgt_out = batch(device)
    logits = model(src, tgt_in)
    assert tuple(logits.shape) == (2, 4, V)
    memory, h, _ = model.encode(src)
    assert tuple(memory.shape) == (2, 5, 4) and tuple(h.shape) == (2, 4)
    sampled_gradcheck(lambda: model.loss(model(src, tgt_in), tgt_out), model.parameters())


@pytest.mark.parametrize("attention", [None, "additive", "dot"])
def test_padding_changes_nothing(attention):
    model = f64(RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, attention=attention), "cpu")
    src, tgt_in, _ = batch()
    short = model(src[1:, :3], tgt_in[1:]).numpy()  # row 1 without its padding
    padded = model(src, tgt_in).numpy()[1:]
    np.testing.assert_allclose(padded, short, rtol=1e-12)
    _, h, _ = model.encode(src)
    _, h_short, _ = model.encode(src[1:, :3])
    np.testing.assert_allclose(to_np(h)[1:], to_np(h_short), rtol=1e-12)


def test_float32_by_default_and_grads_reach_every_parameter():
    model = RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, attention="additive")
    src, tgt_in, tgt_out = batch()
    logits = model(src, tgt_in)
    assert mt.backend.dtype_name(logits.dtype) == "float32"
    model.loss(logits, tgt_out).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and np.abs(to_np(p.grad)).sum() > 0, name


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(cell="lstm"), "cell='lstm'"),
        (dict(attention="luong"), "attention='luong'"),
        (dict(d_hidden=0), "d_hidden=0"),
        (dict(d_embed=2.5), "d_embed=2.5"),
        (dict(pad_id=V), "pad_id"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        RNNSeq2Seq(V, V, **kwargs)


def test_input_validation(rng):
    model = RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, attention="dot")
    src, tgt_in, _ = (to_np(a) for a in batch())
    with pytest.raises(DTypeError, match="src must hold integer"):
        model(src.astype(float), tgt_in)
    with pytest.raises(TokenIdError, match="tgt_in holds ids outside"):
        model(src, tgt_in + V)
    with pytest.raises(ShapeError, match="src must have shape"):
        model(src[0], tgt_in)
    with pytest.raises(ShapeError, match="batch size"):
        model(src, tgt_in[:1])
    cell = GRUCell(3, 4)
    with pytest.raises(ShapeError, match="x has shape"):
        cell(mt.tensor(rng.standard_normal((2, 5))), cell.zero_state(2))
    with pytest.raises(ShapeError, match="h has shape"):
        cell(mt.tensor(rng.standard_normal((2, 3))), cell.zero_state(3))


@pytest.mark.parametrize("attention", [None, "additive", "dot"])
def test_training_steps_lower_the_loss(attention):
    model = RNNSeq2Seq(V, V, d_embed=8, d_hidden=16, attention=attention, seed=0)
    src, tgt_in, tgt_out = batch()
    opt = optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(15):
        loss = model.loss(model(src, tgt_in), tgt_out)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
