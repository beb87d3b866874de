"""nn/recurrent.py, the parts lesson 12 added: the bidirectional encoder of RNNSeq2Seq
(Bahdanau et al. 2015), its attention weights kept for heatmaps, and greedy decoding with the
decoder's own step loop.

- a NumPy reference of the bidirectional RNN encoder: the backward cell runs over the
  reversed source (without its padding) and its states are reversed back before they are
  added to the forward ones;
- gradcheck (float64) of the bidirectional model on every backend;
- padding at the end of a row changes nothing, in both directions;
- argument validation; attention weights are softmax rows (B, T, S) with no weight on padding;
- greedy decoding equals the slow loop that re-runs the whole prefix through ``forward``.
"""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import f64, sampled_gradcheck, to_np
from nn_helpers import rnn_batch as batch

import minitransformer as mt
from minitransformer.errors import ArgumentError, ConfigError
from minitransformer.nn import RNNSeq2Seq

V = 9


def _rnn_states(cell, xs: np.ndarray) -> np.ndarray:
    """h_t = tanh(x_t W_x + h_{t-1} W_h + b) over xs (L, d) from h = 0 -> (L, H)."""
    Wx, b, Wh = to_np(cell.w_x.weight), to_np(cell.w_x.bias), to_np(cell.w_h.weight)
    h, out = np.zeros(Wh.shape[0]), []
    for x in xs:
        h = np.tanh(x @ Wx + h @ Wh + b)
        out.append(h)
    return np.array(out)


def test_bidirectional_encoder_matches_a_numpy_reference():
    model = f64(RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, cell="rnn", bidirectional=True))
    src = to_np(batch()[0])
    memory, h, _ = model.encode(src)
    E = to_np(model.src_embed.weight)
    for row, ids in enumerate(src):
        n = int((ids != 0).sum())  # real tokens, then padding
        xs = E[ids[:n]]  # (n, d)
        fwd = _rnn_states(model.encoder, xs)  # fwd[j] has read x_0 .. x_j
        bwd = _rnn_states(model.encoder_back, xs[::-1])[::-1]  # bwd[j] has read x_{n-1} .. x_j
        np.testing.assert_allclose(to_np(memory)[row, :n], fwd + bwd, rtol=1e-12)
        np.testing.assert_allclose(to_np(h)[row], fwd[-1] + bwd[0], rtol=1e-12)


def test_backward_direction_reads_only_the_tokens_after_j():
    """bwd_j depends on x_j .. x_{S-1}: changing x_0 moves memory_j for j > 0 only through
    the forward cell, so with the forward cell's contribution removed nothing moves."""
    model = f64(RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, cell="gru", bidirectional=True))
    src = np.array([[3, 4, 5, 6, 7]])
    changed = src.copy()
    changed[0, 0] = 8
    uni = f64(RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, cell="gru"))
    uni.src_embed, uni.encoder = model.src_embed, model.encoder  # the same forward direction
    back = [to_np(model.encode(s)[0]) - to_np(uni.encode(s)[0]) for s in (src, changed)]
    np.testing.assert_allclose(back[0][:, 1:], back[1][:, 1:], rtol=1e-12)
    assert np.abs(back[0][:, 0] - back[1][:, 0]).max() > 1e-3  # bwd_0 has read x_0


@pytest.mark.parametrize("cell", ["rnn", "gru"])
@pytest.mark.parametrize("attention", [None, "additive", "dot"])
def test_bidirectional_shapes_and_gradcheck(device, cell, attention):
    model = RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, cell=cell, attention=attention)
    bi = RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, cell=cell, attention=attention, bidirectional=True)
    extra = bi.num_parameters() - model.num_parameters()
    assert extra == sum(p.size for p in bi.encoder_back.parameters())  # one more cell
    bi = f64(bi, device)
    src, tgt_in, tgt_out = batch(device)
    assert tuple(bi(src, tgt_in).shape) == (2, 4, V)
    memory, h, _ = bi.encode(src)
    assert tuple(memory.shape) == (2, 5, 4) and tuple(h.shape) == (2, 4)  # summed: H, not 2H
    sampled_gradcheck(lambda: bi.loss(bi(src, tgt_in), tgt_out), bi.parameters())


@pytest.mark.parametrize("attention", [None, "additive"])
def test_bidirectional_padding_changes_nothing(attention):
    model = f64(RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, attention=attention, bidirectional=True))
    src, tgt_in, _ = batch()
    short = model(src[1:, :3], tgt_in[1:]).numpy()  # row 1 without its padding
    np.testing.assert_allclose(model(src, tgt_in).numpy()[1:], short, rtol=1e-12)


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_bidirectional_must_be_a_bool(value):
    with pytest.raises(ConfigError, match="bidirectional"):
        RNNSeq2Seq(V, V, bidirectional=value)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_attention_weights_are_softmax_rows_without_padding(bidirectional):
    model = f64(
        RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, attention="dot", bidirectional=bidirectional)
    )
    src, tgt_in, _ = batch()
    model(src, tgt_in)
    assert model.last_weights is None  # off by default
    model.attention_weights(True)
    model(src, tgt_in)
    a = to_np(model.last_weights)
    assert a.shape == (2, 4, 5)
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-12)
    assert np.all(a[1, :, 3:] < 1e-300)  # the padded source positions
    model.attention_weights(False)
    assert model.last_weights is None
    with pytest.raises(ArgumentError, match="on must be True or False"):
        model.attention_weights("yes")


@pytest.mark.parametrize("attention", [None, "additive"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_greedy_decode_equals_rerunning_the_prefix(attention, bidirectional):
    model = f64(
        RNNSeq2Seq(V, V, d_embed=3, d_hidden=4, attention=attention, bidirectional=bidirectional)
    )
    src = to_np(batch()[0])
    got = model.greedy_decode(src, max_len=6)
    ys = np.ones((2, 1), dtype=np.int64)  # BOS
    for _ in range(6):  # the slow reference: the whole prefix through forward at every step
        nxt = model(src, ys).numpy()[:, -1].argmax(-1)
        ys = np.concatenate([ys, nxt[:, None]], axis=1)
    for row, out in zip(ys[:, 1:].tolist(), got, strict=True):
        assert out == (row[: row.index(2)] if 2 in row else row)


def test_greedy_decode_stops_at_eos_and_checks_its_arguments():
    model = RNNSeq2Seq(V, V, d_embed=3, d_hidden=4)
    with mt.no_grad():
        model.out.bias.data[:] = 0
        model.out.weight.data[:] = 0
        model.out.bias.data[2] = 1.0  # EOS always wins
    assert model.greedy_decode(to_np(batch()[0]), max_len=5) == [[], []]
    with pytest.raises(ArgumentError, match="max_len"):
        model.greedy_decode(to_np(batch()[0]), max_len=0)
    with pytest.raises(ArgumentError, match="eos_id"):
        model.greedy_decode(to_np(batch()[0]), max_len=3, eos_id=V)
