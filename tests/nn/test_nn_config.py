"""TransformerConfig: presets, validation messages, JSON round trip."""

from __future__ import annotations

import json

import pytest

import minitransformer as mt
from minitransformer.errors import ConfigError


def test_defaults_are_the_papers_base_model():
    cfg = mt.TransformerConfig(src_vocab=100, tgt_vocab=100)
    assert (cfg.d_model, cfg.h, cfg.N, cfg.d_ff, cfg.dropout) == (512, 8, 6, 2048, 0.1)
    assert (cfg.label_smoothing, cfg.pre_norm, cfg.tie_embeddings) == (0.1, False, True)
    assert cfg.d_k == 64 and cfg.dtype == "float32"


@pytest.mark.parametrize(
    "name, sizes",
    [
        ("tiny", (64, 4, 2, 256, 0.0)),
        ("small", (128, 4, 2, 512, 0.1)),
        ("base", (512, 8, 6, 2048, 0.1)),
        ("big", (1024, 16, 6, 4096, 0.3)),
    ],
)
def test_presets(name, sizes):
    cfg = mt.TransformerConfig.preset(name, src_vocab=50, tgt_vocab=50)
    assert (cfg.d_model, cfg.h, cfg.N, cfg.d_ff, cfg.dropout) == sizes


def test_preset_overrides_and_errors():
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20, N=1, max_len=32)
    assert cfg.N == 1 and cfg.max_len == 32 and cfg.d_model == 64
    with pytest.raises(ConfigError, match="unknown name 'huge'.*'base'"):
        mt.TransformerConfig.preset("huge", src_vocab=5, tgt_vocab=5)
    with pytest.raises(ConfigError, match="src_vocab, tgt_vocab must be given"):
        mt.TransformerConfig.preset("tiny")
    with pytest.raises(ConfigError, match=r"unknown field\(s\) \['d_modle'\]"):
        mt.TransformerConfig.preset("tiny", src_vocab=5, tgt_vocab=5, d_modle=8)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 30, "h": 4}, r"d_model \(30\) must be divisible by h \(4\)"),
        ({"N": 0}, "N must be a positive int, got 0"),
        ({"d_ff": -3}, "d_ff must be a positive int"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\) \(a number\), got 1.0"),
        ({"label_smoothing": -0.1}, "label_smoothing must be in"),
        ({"eos_id": 0}, "pad_id, bos_id and eos_id must be distinct"),
        ({"bos_id": 2}, r"must be distinct \(only bos_id may equal pad_id"),
        (
            {"activation": "tanh"},
            r"activation must be one of \('relu', 'gelu', 'gelu_tanh', 'swish'\)",
        ),
        ({"position_layout": "mixed"}, "position_layout must be one of"),
        ({"logits_bias": 1}, "logits_bias must be True or False, got 1"),
        ({"scale_embedding": "yes"}, "scale_embedding must be True or False"),
        ({"decoder_N": 0}, r"decoder_N must be a positive int or None \(= N\)"),
        ({"decoder_h": 3}, r"d_model \(16\) must be divisible by h \(3\)"),
        ({"decoder_d_ff": 2.0}, "decoder_d_ff must be a positive int or None"),
        ({"eos_id": 99}, "eos_id = 99 is outside the vocabulary of size 20"),
        ({"tgt_vocab": 30}, "set tie_embeddings=False"),
        ({"dtype": "float16"}, "dtype must be one of"),
    ],
)
def test_validate_names_the_problem(overrides, message):
    fields = {"src_vocab": 20, "tgt_vocab": 20, "d_model": 16, "h": 4, **overrides}
    with pytest.raises(ConfigError, match=message):
        mt.TransformerConfig(**fields).validate()


def test_untied_vocabularies_may_differ():
    cfg = mt.TransformerConfig(src_vocab=20, tgt_vocab=30, tie_embeddings=False).validate()
    assert cfg.tgt_vocab == 30


def test_validate_lists_every_problem_at_once():
    with pytest.raises(ConfigError) as info:
        mt.TransformerConfig(src_vocab=20, tgt_vocab=20, dropout=2.0, dtype="int8").validate()
    assert "dropout" in str(info.value) and "dtype" in str(info.value)


def test_dict_round_trip_through_json():
    cfg = mt.TransformerConfig.preset("small", src_vocab=40, tgt_vocab=40, pre_norm=True)
    again = mt.TransformerConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg


def test_from_dict_rejects_unknown_and_missing_keys():
    d = mt.TransformerConfig(src_vocab=8, tgt_vocab=8).to_dict()
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['heads'\].*valid keys"):
        mt.TransformerConfig.from_dict({**d, "heads": 4})
    del d["src_vocab"]
    with pytest.raises(ConfigError, match="src_vocab"):
        mt.TransformerConfig.from_dict(d)


def test_model_rejects_invalid_config():
    with pytest.raises(ConfigError, match="divisible"):
        mt.nn.Transformer(mt.TransformerConfig(src_vocab=8, tgt_vocab=8, d_model=10, h=4))
