"""Transformer.from_pretrained / save_pretrained against Hugging Face's MarianMTModel.

Small random-weight Marian models are built with transformers inside the tests (no network):
every weight, bias, LayerNorm parameter and the final logits bias drawn at random, so a wrong
mapping (a transposed or swapped matrix, a missing bias) shows in the logits.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.decode import greedy_decode
from minitransformer.errors import ArgumentError, CheckpointError, ConfigError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V, PAD, EOS = 37, 36, 0
CONFIGS = {  # name: MarianConfig fields; sizes 1-3 layers, 1-4 heads, every activation
    "swish-tied": dict(activation_function="swish", encoder_layers=2, decoder_layers=2,
                       encoder_attention_heads=4, decoder_attention_heads=4),
    "gelu-1layer-1head": dict(activation_function="gelu", encoder_layers=1, decoder_layers=1,
                              encoder_attention_heads=1, decoder_attention_heads=1),
    "relu-3+2-unscaled": dict(activation_function="relu", encoder_layers=3, decoder_layers=2,
                              encoder_attention_heads=2, decoder_attention_heads=4,
                              scale_embedding=False),
    "silu-untied-ffn": dict(activation_function="silu", encoder_layers=1, decoder_layers=3,
                            encoder_attention_heads=2, decoder_attention_heads=1,
                            decoder_ffn_dim=40, share_encoder_decoder_embeddings=False,
                            tie_word_embeddings=False, decoder_vocab_size=41),
}  # fmt: skip


def marian(folder, seed=0, **fields):
    """A random MarianMTModel (eval mode) saved to ``folder``; returns the torch model."""
    base = dict(
        vocab_size=V, d_model=16, encoder_ffn_dim=24, decoder_ffn_dim=24,
        max_position_embeddings=32, pad_token_id=PAD, decoder_start_token_id=PAD,
        eos_token_id=EOS, forced_eos_token_id=EOS, scale_embedding=True, dropout=0.1,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, activation_function="relu",
    )  # fmt: skip
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**{**base, **fields})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:  # the fixed sinusoids
                p.copy_(torch.randn_like(p) * (0.5 if p.ndim > 1 else 1.0))
        model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias))
    model.save_pretrained(folder)
    return model


def batch(seed=0, tgt_vocab=V):
    """src (3, 7) with padding in one row; tgt_in (3, 5) starting with the pad id (Marian)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, PAD, (3, 7))
    src[:, -1], src[1, 4:] = EOS, PAD
    tgt = rng.integers(1, min(PAD, tgt_vocab), (3, 5))
    tgt[:, 0] = PAD
    return src, tgt


def torch_logits(model, src, tgt):
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != PAD),
            decoder_input_ids=torch.tensor(tgt),
        )
    return out.logits.numpy()


def float64(model):
    """The torch model in float64 with its sinusoid tables in float64 (transformers rounds
    them through float32 even then: torch.FloatTensor in create_weight). The table is
    MarianSinusoidalPositionalEmbedding.create_weight's formula, written out here in NumPy."""
    model = model.double()
    for stack in (model.model.encoder, model.model.decoder):
        n_pos, dim = stack.embed_positions.weight.shape
        j = np.arange(dim)
        angle = np.arange(n_pos)[:, None] / np.power(10000, 2 * (j // 2) / dim)[None, :]
        half = dim // 2 + dim % 2
        table = np.concatenate([np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])], axis=1)
        assert table[:, :half].shape[1] == half
        with torch.no_grad():
            stack.embed_positions.weight.copy_(torch.from_numpy(table))
    return model


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_match_marian(tmp_path, name):
    ref = marian(tmp_path, **CONFIGS[name])
    src, tgt = batch(tgt_vocab=CONFIGS[name].get("decoder_vocab_size", V))
    want = torch_logits(ref, src, tgt)
    ours = mt.nn.Transformer.from_pretrained(tmp_path)
    assert not ours.training and ours.cfg.dtype == "float32"
    got = ours(src, tgt).numpy()
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    want64 = torch_logits(float64(ref), src, tgt)
    got64 = mt.nn.Transformer.from_pretrained(tmp_path, dtype="float64")(src, tgt).numpy()
    assert np.abs(got64 - want64).max() <= 1e-10 * np.abs(want64).max()


def test_an_opus_mt_config_json_is_accepted_as_published(tmp_path):
    # The fields of Helsinki-NLP/opus-mt-en-es's config.json (sizes shrunk, values as there).
    marian(tmp_path)
    published = dict(
        _name_or_path="/tmp/Helsinki-NLP/opus-mt-en-es", _num_labels=3, activation_dropout=0.0,
        activation_function="swish", add_bias_logits=False, add_final_layer_norm=False,
        architectures=["MarianMTModel"], attention_dropout=0.0, bad_words_ids=[[PAD]],
        bos_token_id=0, classif_dropout=0.0, classifier_dropout=0.0, d_model=16,
        decoder_attention_heads=2, decoder_ffn_dim=24, decoder_layerdrop=0.0,
        decoder_layers=1, decoder_start_token_id=PAD, decoder_vocab_size=V, dropout=0.1,
        encoder_attention_heads=2, encoder_ffn_dim=24, encoder_layerdrop=0.0,
        encoder_layers=1, eos_token_id=EOS, extra_pos_embeddings=V, forced_eos_token_id=EOS,
        gradient_checkpointing=False, id2label={"0": "LABEL_0"}, init_std=0.02,
        is_encoder_decoder=True, label2id={"LABEL_0": 0}, max_length=512,
        max_position_embeddings=32, model_type="marian", normalize_before=False,
        normalize_embedding=False, num_beams=4, num_hidden_layers=1, output_past=True,
        pad_token_id=PAD, scale_embedding=True, share_encoder_decoder_embeddings=True,
        static_position_embeddings=True, torch_dtype="float32",
        transformers_version="4.34.0.dev0", use_cache=True, vocab_size=V,
    )  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(published))
    cfg = mt.nn.Transformer.from_pretrained(tmp_path).cfg
    assert (cfg.activation, cfg.N, cfg.d_model, cfg.src_vocab) == ("swish", 1, 16, V)


def test_config_switches_follow_config_json(tmp_path):
    marian(tmp_path, **CONFIGS["silu-untied-ffn"])
    cfg = mt.nn.Transformer.from_pretrained(tmp_path).cfg
    assert (cfg.activation, cfg.position_layout, cfg.logits_bias) == ("swish", "halves", True)
    assert (cfg.N, cfg.sizes("decoder")) == (1, (3, 1, 40))
    assert (cfg.src_vocab, cfg.tgt_vocab, cfg.tie_embeddings) == (V, 41, False)
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.max_len) == (PAD, PAD, EOS, 32)


@pytest.mark.parametrize("name", ["swish-tied", "relu-3+2-unscaled"])
def test_greedy_equals_generate(tmp_path, name):
    ref = marian(tmp_path, seed=3, **CONFIGS[name])
    src, _ = batch(seed=1)
    with torch.no_grad():
        out = ref.generate(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != PAD),
            num_beams=1,
            do_sample=False,
            max_new_tokens=12,
            bad_words_ids=[[PAD]],
            forced_eos_token_id=None,
        ).numpy()
    want = [[t for t in row[1:] if t != PAD] for row in out.tolist()]  # after the start token
    want = [row[: row.index(EOS)] if EOS in row else row for row in want]
    got = greedy_decode(mt.nn.Transformer.from_pretrained(tmp_path), src, max_len=12)
    assert got == want
    assert any(len(row) > 3 for row in got)  # a real sequence, not EOS at once


def test_our_model_round_trips_through_transformers(tmp_path):
    # The paper's model as trained here: interleaved positions, relu, bos != pad, tied.
    cfg = mt.TransformerConfig(
        src_vocab=V, tgt_vocab=V, d_model=12, h=3, N=2, d_ff=20, max_len=32, dropout=0.0,
        pad_id=0, bos_id=1, eos_id=2, logits_bias=True,
    )  # fmt: skip
    ours = mt.nn.Transformer(cfg, seed=4)
    rng = np.random.default_rng(2)
    for p in ours.parameters():  # off the init: biases and LayerNorms nonzero
        p.data = (p.data + 0.3 * rng.standard_normal(p.shape)).astype("float32")
    src, tgt = rng.integers(3, V, (2, 6)), rng.integers(3, V, (2, 4))
    tgt[:, 0] = 1
    want = ours(src, tgt).numpy()
    ours.save_pretrained(tmp_path / "out")
    back = transformers.MarianMTModel.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        theirs = back(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != 0),
            decoder_input_ids=torch.tensor(tgt),
        ).logits.numpy()
    assert np.abs(theirs - want).max() <= 1e-4 * np.abs(want).max()
    again = mt.nn.Transformer.from_pretrained(tmp_path / "out")  # now in Marian's layout
    assert again.cfg.position_layout == "halves"
    assert np.abs(again(src, tgt).numpy() - want).max() <= 1e-4 * np.abs(want).max()
    with pytest.raises(CheckpointError, match=r"already holds \['config.json'"):
        ours.save_pretrained(tmp_path / "out")
    ours.save_pretrained(tmp_path / "out", overwrite=True)


def test_loaded_model_fine_tunes(tmp_path):
    marian(tmp_path, **CONFIGS["gelu-1layer-1head"])
    model = mt.nn.Transformer.from_pretrained(tmp_path).train()
    src, tgt = batch()
    opt = mt.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        loss = model.loss(model(src, tgt[:, :-1]), tgt[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_pickle_weights_are_refused_unopened(tmp_path):
    marian(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"not even a pickle")
    with pytest.raises(CheckpointError, match=r"never a pickle.*save_pretrained"):
        mt.nn.Transformer.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"normalize_before": True}, r"normalize_before = True \(this library computes False\)"),
        ({"attention_dropout": 0.1}, "attention_dropout = 0.1"),
        ({"layernorm_embedding": True}, "unsupported field 'layernorm_embedding'"),
        ({"do_blenderbot_90_layernorm": True}, "do_blenderbot_90_layernorm = True"),
        ({"activation_function": "gelu_new"}, "activation_function 'gelu_new'"),
        ({"d_model": "16"}, "d_model must be an int >= 1, got '16'"),
        ({"model_type": "bart"}, "model_type = 'bart'"),
        ({"tie_word_embeddings": False}, "only both true"),
        ({"pad_token_id": 99}, "pad_id = 99 is outside the vocabulary"),
    ],
)
def test_config_fields_are_refused_by_name(tmp_path, edit, message):
    marian(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **edit}))
    with pytest.raises(ConfigError, match=message):
        mt.nn.Transformer.from_pretrained(tmp_path)


def test_weights_that_do_not_fit_are_refused(tmp_path):
    from safetensors.numpy import load_file, save_file

    marian(tmp_path)
    good = load_file(tmp_path / "model.safetensors")
    cases = [
        ({k: v for k, v in good.items() if "fc2.bias" not in k},
         "missing model.decoder.layers.0.fc2.bias; missing model.enc"),
        ({**good, "model.extra.weight": np.ones(2, "float32")}, "unexpected model.extra"),
        ({**good, "final_logits_bias": np.ones((1, 5), "float32")}, r"F32\[1, 5\]"),
        ({**good, "model.encoder.embed_positions.weight": np.ones((32, 16), "float32")},
         "not the sinusoid table"),
        ({**good, "lm_head.weight": good["model.shared.weight"] + 1}, "not the shared embedding"),
    ]  # fmt: skip
    for tensors, message in cases:
        save_file(tensors, tmp_path / "model.safetensors")
        with pytest.raises(CheckpointError, match=message):
            mt.nn.Transformer.from_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        mt.nn.Transformer.from_pretrained(tmp_path)


def test_folder_problems_say_what_to_do(tmp_path):
    with pytest.raises(CheckpointError, match="minitransformer translate --pretrained"):
        mt.nn.Transformer.from_pretrained("Helsinki-NLP/opus-mt-en-es")
    with pytest.raises(CheckpointError, match="needs config.json"):
        mt.nn.Transformer.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        mt.nn.Transformer.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_bytes(b" " * (2 << 20))
    with pytest.raises(CheckpointError, match="above the cap of 1,048,576"):
        mt.nn.Transformer.from_pretrained(tmp_path)
    with pytest.raises(ArgumentError, match="must be a Marian model folder"):
        mt.nn.Transformer.from_pretrained(3)


def test_what_marian_cannot_compute_is_not_saved(tmp_path):
    fields = (dict(pre_norm=True), dict(learned_positions=True), dict(key_dim=4),
              dict(attention="local", attention_window=4), dict(attention="linear"))  # fmt: skip
    for field in fields:
        cfg = mt.TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V, **field)
        with pytest.raises(ConfigError, match=f"no place for {next(iter(field))}"):
            mt.nn.Transformer(cfg).save_pretrained(tmp_path)
    assert not any(tmp_path.iterdir())
