"""The config switches Marian needs, checked without transformers: gradients against central
differences, cached decoding, the position layouts, the feature-reordered twin, training."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import PAD, sampled_gradcheck, tiny_batch, tiny_config, to_np
from test_nn_transformer import check_layer, nudged
from tiny_runs import TINY

import minitransformer as mt
from minitransformer.cli import main
from minitransformer.nn import PositionwiseFeedForward, Transformer, sinusoid_table
from minitransformer.nn.marian_weights import feature_order
from minitransformer.runtime.translator import Translator

MARIAN = dict(  # every switch away from the paper at once, decoder sizes of its own
    activation="swish", position_layout="halves", logits_bias=True, scale_embedding=False,
    decoder_N=1, decoder_h=4, decoder_d_ff=12, bos_id=PAD,
)  # fmt: skip


@pytest.mark.parametrize("activation", ["gelu", "swish"])
def test_feed_forward_gradcheck(device, make, rng, activation):
    ffn = nudged(PositionwiseFeedForward(8, 16, activation=activation), device)
    x = make(rng.standard_normal((2, 3, 8)))
    assert check_layer(ffn, [x], ffn, device)
    assert f"activation={activation}" in repr(ffn)


@pytest.mark.parametrize("overrides", [MARIAN, dict(MARIAN, activation="gelu", N=1)])
def test_model_loss_gradient_with_marian_switches(device, overrides):
    model = nudged(Transformer(tiny_config(**overrides)), device)
    assert len(model.decoder.layers) == 1 and model.decoder.layers[0].self_attn.h == 4
    src, tgt_in, tgt_out = tiny_batch(device)
    sampled_gradcheck(lambda: model.loss(model(src, tgt_in), tgt_out), model.parameters(), 3)


def test_cached_decoding_with_the_pad_id_as_start(device):
    model = nudged(Transformer(tiny_config(**MARIAN)), device)
    src, _, _ = tiny_batch(device)
    tgt = mt.backend.asarray(np.array([[PAD, 9, 10, 3, 4], [PAD, 4, 2, PAD, PAD]]), device=device)
    with mt.no_grad():
        full = to_np(model(src, tgt))
        memory, cache = model.encode(src), model.new_cache()
        steps = [to_np(model.decode(tgt[:, t : t + 1], memory, src, cache)) for t in range(5)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-11, atol=1e-12)
    assert np.isfinite(full).all()  # the start token (the pad id) is never masked out


def test_the_start_token_is_attended_when_it_is_the_pad_id():
    model = nudged(Transformer(tiny_config(**MARIAN)), "cpu")
    src, _, _ = tiny_batch()
    model.attention_weights(True)
    with mt.no_grad():
        model(src, np.array([[PAD, 5, 6]]).repeat(2, axis=0))
    weights = model.decoder.layers[0].self_attn.last_weights  # (B, H, T, T)
    np.testing.assert_allclose(weights[:, :, 0, 0], 1.0)  # position 0 sees itself
    assert (weights[:, :, :, 0] > 0).all()


def test_the_halves_table_is_the_interleaved_one_reordered():
    for d_model in (8, 7, 512):
        interleaved = sinusoid_table(50, d_model)
        halves = sinusoid_table(50, d_model, "halves")
        np.testing.assert_array_equal(halves, interleaved[:, feature_order(d_model)])
        assert np.all(halves[:, 0] == np.sin(np.arange(50)))  # sin(pos), the first frequency
    with pytest.raises(mt.errors.ConfigError, match="layout must be 'interleaved' or 'halves'"):
        sinusoid_table(4, 4, "mixed")


@pytest.mark.parametrize("tie", [True, False])
def test_a_paper_model_is_saved_as_its_marian_twin(tmp_path, tie):
    cfg = tiny_config(tie_embeddings=tie, logits_bias=not tie, tgt_vocab=11 if tie else 13)
    model = nudged(Transformer(cfg), "cpu")
    src, tgt_in, _ = tiny_batch()
    model.save_pretrained(tmp_path)
    twin = Transformer.from_pretrained(tmp_path, dtype="float64")
    assert (twin.cfg.position_layout, model.cfg.position_layout) == ("halves", "interleaved")
    with mt.no_grad():
        got, want = to_np(twin(src, tgt_in)), to_np(model(src, tgt_in))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        before = to_np(twin.src_embed.weight)
        assert not np.allclose(before, to_np(model.src_embed.weight))  # reordered, not copied


def test_training_with_the_switches_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "run"
    switches = ["--model", "activation=gelu", "--model", "position_layout=halves",
                "--model", "logits_bias=true", "--model", "decoder_N=2"]  # fmt: skip
    assert main(["train", "copy", "--steps", "12", "--out", str(out), *TINY, *switches]) == 0
    capsys.readouterr()
    translator = Translator.from_checkpoint(out)
    cfg = translator.model.cfg
    assert (cfg.activation, cfg.position_layout, cfg.logits_bias, cfg.decoder_N) == (
        "gelu", "halves", True, 2,
    )  # fmt: skip
    assert isinstance(translator.translate("3 4 5"), str)
