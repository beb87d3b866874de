"""Checked once (issue 27), the config flowing down once (issue 43, item 5): a
TransformerConfig is frozen and validated once, when it is made; the model hands it to its
stacks and they to their layers, which read it and check nothing again; a layer or stack
built by hand checks its loose arguments once, where they enter; the rule that h heads split
d_model is stated in one place; and a layer built from a config is the layer built from the
equivalent loose arguments (the same parameter names, weights and outputs).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import checks, nn
from minitransformer.config import TransformerConfig
from minitransformer.config.model import head_split_problem
from minitransformer.errors import ArgumentError, ConfigError, ShapeError

CHECKS = {f.__code__: name for name, f in vars(checks).items() if inspect.isfunction(f)}
VALIDATE = TransformerConfig.validate.__code__


def calls(build) -> Counter:
    """How often ``build()`` calls each function of checks.py, and TransformerConfig.validate."""
    counted: Counter = Counter()

    def hook(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code in CHECKS:
                counted[CHECKS[code]] += 1
            elif code is VALIDATE:
                counted["validate"] += 1

    sys.setprofile(hook)
    try:
        build()
    finally:
        sys.setprofile(None)
    return counted


@pytest.mark.parametrize("decoder_only", [False, True], ids=["Transformer", "TransformerLM"])
def test_a_config_is_validated_once_when_made_and_the_model_only_reads_it(decoder_only):
    """The config validates itself once, when it is made; the model (and every layer it
    builds from it) reads it and checks nothing of it again, so the count does not grow with
    N: only the seed is checked, where it enters. Before issue 27 the tiny model (N = 2)
    made 100 positive_int calls, 47 more for each layer of N."""
    counts = []
    for N in (1, 6):
        made: list[TransformerConfig] = []
        fields = dict(src_vocab=50, tgt_vocab=50, N=N, pre_norm=True, tie_embeddings=False,
                      attention_block_size=8, decoder_only=decoder_only)  # fmt: skip
        made_config = calls(lambda: made.append(TransformerConfig.preset("tiny", **fields)))  # noqa: B023
        assert made_config["validate"] == 1, made_config
        counts.append(calls(lambda: nn.build_model(made[0])))  # noqa: B023 (called at once)
    assert counts[0] == counts[1], counts
    assert counts[0] == Counter({"non_negative_int": 1, "is_int": 1}), counts[0]  # the seed


def test_a_frozen_config_refuses_assignment_and_names_the_fix():
    cfg = TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9)
    fix = r"dataclasses\.replace\(cfg, dropout=\.\.\.\)"
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"^TransformerConfig is frozen "
                       r"\(validated once, when it was made\), so 'dropout' cannot be set; "
                       r"make a changed copy, validated in turn, with " + fix + "$"):  # fmt: skip
        cfg.dropout = 0.3
    with pytest.raises(AttributeError, match="'h' cannot be deleted"):
        del cfg.h
    model = nn.Transformer(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError, match="'eos_id' cannot be set"):
        model.cfg.eos_id = -1  # the model holds the very config it was given
    assert model.cfg is cfg and (cfg.dropout, cfg.h, cfg.eos_id) == (0.0, 4, 2)


def test_replace_makes_a_changed_copy_and_validates_it_once():
    cfg = TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9)
    made: list[TransformerConfig] = []
    counted = calls(lambda: made.append(dataclasses.replace(cfg, dropout=0.3, N=1)))
    assert counted["validate"] == 1
    assert (made[0].dropout, made[0].N, cfg.dropout, cfg.N) == (0.3, 1, 0.0, 2)
    with pytest.raises(ConfigError) as error:  # one library error, naming the fix
        dataclasses.replace(cfg, h=3)
    assert str(error.value).startswith("invalid TransformerConfig: d_model (64) must be ")
    assert head_split_problem(64, 3) in str(error.value)
    with pytest.raises(ConfigError, match=r"dropout must be in \[0, 1\) \(a number\), got 1\.5"):
        dataclasses.replace(cfg, dropout=1.5)


def test_a_preset_is_validated_once():
    counted = calls(lambda: TransformerConfig.preset("tiny", src_vocab=50, tgt_vocab=50))
    assert counted["validate"] == 1
    counted = calls(lambda: TransformerConfig.from_dict({"src_vocab": 9, "tgt_vocab": 9}))
    assert counted["validate"] == 1


@pytest.mark.parametrize("stack", [nn.Encoder, nn.Decoder, nn.CausalStack])
def test_a_stack_built_by_hand_checks_its_arguments_once(stack):
    """Encoder(N, ...) checks N and the layer arguments once, not once per layer: they
    become one config (blocks.layer_config), validated once, which every layer reads."""
    one = calls(lambda: stack(1, 8, 2, 16, dropout=0.1, pre_norm=True))
    six = calls(lambda: stack(6, 8, 2, 16, dropout=0.1, pre_norm=True))
    assert one == six, (one, six)  # the same checks for 1 layer as for 6
    assert one["positive_int"] <= 5, one  # N, d_model, h, d_ff (and d_model for the FFN)
    assert one["validate"] == 1, one


@pytest.mark.parametrize(
    "build, error, words",
    [
        (lambda: nn.EncoderLayer(8, 3, 16), ShapeError,
         [r"^EncoderLayer: d_model \(8\) must be divisible by h \(3\)"]),
        (lambda: nn.EncoderLayer(8, 2, 0), ArgumentError,
         ["EncoderLayer: d_ff must be a positive int, got 0", "inner width"]),
        (lambda: nn.DecoderLayer(8, 2, 16, activation="tanh"), ConfigError,
         ["DecoderLayer: activation must be one of", "'tanh'"]),
        (lambda: nn.DecoderLayer(8, 2, 16, d_k=0), ArgumentError, ["DecoderLayer: d_k", "got 0"]),
        (lambda: nn.EncoderLayer(8, 2, 16, scale=1), ArgumentError,
         ["EncoderLayer: scale must be True or False"]),
        (lambda: nn.Encoder(2, 8, 2, 16, block_size=0), ArgumentError,
         ["EncoderLayer", "block_size", "got 0"]),
        (lambda: nn.Decoder(2, 8.0, 2, 16), ArgumentError,
         ["DecoderLayer: d_model must be a positive int", "8.0"]),
        (lambda: nn.Encoder(-1, 8, 2, 16), ArgumentError,
         ["Encoder: N must be a positive int", "-1", "number of layers"]),
        (lambda: nn.PositionwiseFeedForward(8, 16, activation=None), ConfigError,
         ["PositionwiseFeedForward: activation must be one of"]),
    ],
)  # fmt: skip
def test_layers_built_by_hand_still_check_where_the_arguments_enter(build, error, words):
    with pytest.raises(error) as info:
        build()
    for word in words:
        assert re.search(word, str(info.value)), (word, str(info.value))


def test_block_size_reaches_every_attention_through_construction():
    layers = nn.Decoder(2, 8, 2, 16, block_size=4).modules()
    attentions = [m for m in layers if isinstance(m, nn.MultiHeadAttention)]
    assert len(attentions) == 4 and {m.block_size for m in attentions} == {4}
    assert "block_size=4" in repr(attentions[0])


def test_the_head_rule_is_stated_once():
    """TransformerConfig and MultiHeadAttention (and the layers) give the same sentence."""
    rule = head_split_problem(10, 4)
    assert rule is not None and head_split_problem(12, 4) is None
    assert "pick h in [1, 2, 5, 10]" in rule and "pick e.g. d_model = 8" in rule
    with pytest.raises(ConfigError) as config_error:
        TransformerConfig(src_vocab=9, tgt_vocab=9, d_model=10, h=4)
    assert rule in str(config_error.value)
    for where, build in (
        ("MultiHeadAttention", lambda: nn.MultiHeadAttention(10, 4)),
        ("DecoderLayer", lambda: nn.DecoderLayer(10, 4, 16)),
    ):
        with pytest.raises(ShapeError) as layer_error:
            build()
        assert str(layer_error.value) == f"{where}: {rule}"


def test_a_hand_built_layer_equals_the_models():
    """The checked path and the trusted one build the same weights from one seed."""
    cfg = TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20, N=1)
    model = nn.Transformer(cfg, seed=3)
    gen = mt.backend.Generator(3, "cpu")
    nn.Embedding(20, cfg.d_model, generator=gen)  # the model draws its embedding first
    layer = nn.EncoderLayer(cfg.d_model, cfg.h, cfg.d_ff, generator=gen)
    mine = layer.state_dict()
    theirs = model.encoder.layers[0].state_dict()
    assert list(mine) == list(theirs)
    for name in mine:
        assert (mt.backend.to_numpy(mine[name]) == mt.backend.to_numpy(theirs[name])).all()


# ---------------------------------------------------------------- from a config or by hand
SIZES = dict(d_model=16, h=2, N=2, d_ff=32, dropout=0.1, pre_norm=True, key_dim=8,
             scale_attention=False, activation="gelu", attention_block_size=4)  # fmt: skip
DECODER = dict(decoder_N=3, decoder_h=4, decoder_d_ff=24)  # the decoder's own sizes
CFG = TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, max_len=12, **SIZES, **DECODER)
LM_CFG = TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, decoder_only=True, **SIZES)
LOOSE = dict(dropout=0.1, pre_norm=True, d_k=8, scale=False, activation="gelu", block_size=4)


def _x(*shape):
    return mt.Tensor(np.random.default_rng(5).standard_normal(shape), dtype="float32")


# name: (from the config, from the same sizes by hand, a forward pass); g: a Generator
PAIRS = {
    "EncoderLayer": (lambda g: nn.EncoderLayer(CFG, generator=g),
                     lambda g: nn.EncoderLayer(16, 2, 32, generator=g, **LOOSE),
                     lambda m: m(_x(2, 5, 16))),
    "DecoderLayer": (lambda g: nn.DecoderLayer(CFG, generator=g),  # the decoder's sizes
                     lambda g: nn.DecoderLayer(16, 4, 24, generator=g, **LOOSE),
                     lambda m: m(_x(2, 5, 16), _x(2, 7, 16))),
    "Encoder": (lambda g: nn.Encoder(CFG, generator=g),
                lambda g: nn.Encoder(2, 16, 2, 32, generator=g, **LOOSE),
                lambda m: m(_x(2, 5, 16))),
    "Decoder": (lambda g: nn.Decoder(CFG, generator=g),
                lambda g: nn.Decoder(3, 16, 4, 24, generator=g, **LOOSE),
                lambda m: m(_x(2, 5, 16), _x(2, 7, 16), None, nn.causal_mask(5, "cpu"))),
    "CausalStack": (lambda g: nn.CausalStack(LM_CFG, generator=g),
                    lambda g: nn.CausalStack(2, 16, 2, 32, generator=g, **LOOSE),
                    lambda m: m(_x(2, 5, 16), nn.causal_mask(5, "cpu"))),
    "MultiHeadAttention": (lambda g: nn.MultiHeadAttention(CFG, 2, g),
                           lambda g: nn.MultiHeadAttention(16, 2, g, d_k=8, scale=False,
                                                           block_size=4),
                           lambda m: m(_x(2, 5, 16), _x(2, 7, 16), _x(2, 7, 16))),
    "PositionwiseFeedForward": (lambda g: nn.PositionwiseFeedForward(CFG, 32, generator=g),
                                lambda g: nn.PositionwiseFeedForward(16, 32, generator=g,
                                                                     activation="gelu"),
                                lambda m: m(_x(2, 5, 16))),
    "PositionalEncoding": (lambda g: nn.PositionalEncoding(CFG),  # noqa: ARG005
                           lambda g: nn.PositionalEncoding(16, 12, 0.1),  # noqa: ARG005
                           lambda m: m(_x(2, 5, 16), offset=3)),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PAIRS))
def test_a_layer_from_a_config_is_the_layer_from_the_same_loose_arguments(name):
    """The same class, parameter names and shapes, weights from one seed, repr and outputs;
    and built from the config it checks nothing (nothing in checks.py, no validate)."""
    from_config, by_hand, run = PAIRS[name]
    gen = mt.backend.Generator
    built: list[nn.Module] = []
    assert calls(lambda: built.append(from_config(gen(3, "cpu")))) == Counter()
    mine, theirs = built[0].eval(), by_hand(gen(3, "cpu")).eval()
    assert type(mine) is type(theirs) and type(mine).__name__ == name
    assert repr(mine) == repr(theirs)
    a, b = mine.state_dict(), theirs.state_dict()
    assert [(k, v.shape) for k, v in a.items()] == [(k, v.shape) for k, v in b.items()]
    for k in a:
        np.testing.assert_array_equal(mt.backend.to_numpy(a[k]), mt.backend.to_numpy(b[k]))
    np.testing.assert_array_equal(run(mine).numpy(), run(theirs).numpy())


def test_block_is_the_encoder_layer_the_language_model_stacks():
    assert nn.Block is nn.EncoderLayer and "Block" in nn.__all__
    lm = nn.TransformerLM(config=LM_CFG)
    model = nn.Transformer(dataclasses.replace(CFG, **dict.fromkeys(DECODER)))
    assert all(type(layer) is nn.Block for layer in lm.decoder.layers)
    assert all(type(layer) is nn.Block for layer in model.encoder.layers)
    names = [k for k in lm.decoder.layers[0].state_dict()]
    assert names == [k for k in model.encoder.layers[0].state_dict()]


LAYER_NAMES = [  # one EncoderLayer's weights, as every checkpoint names them
    *(f"self_attn.{w}.{p}" for w in ("w_q", "w_k", "w_v", "w_o") for p in ("weight", "bias")),
    "ffn.w_1.weight", "ffn.w_1.bias", "ffn.w_2.weight", "ffn.w_2.bias",
    "block1.norm.gamma", "block1.norm.beta", "block2.norm.gamma", "block2.norm.beta",
]  # fmt: skip
LESSONS = Path(__file__).resolve().parents[2] / "lessons" / "checkpoints"


def test_the_weights_keep_their_names_so_checkpoints_still_load():
    """The parameter names are those of the shape table (TransformerConfig.parameter_shapes,
    which checkpoints are checked against) and of the checkpoints the lessons ship, written
    before the config flowed down as one object: they load, strictly, into models built now."""
    for cfg in (CFG, LM_CFG, TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9)):
        model = nn.build_model(cfg)
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        assert shapes == cfg.parameter_shapes()
        first = "decoder.layers.0." if cfg.decoder_only else "encoder.layers.0."
        assert [k[len(first) :] for k in shapes if k.startswith(first)] == LAYER_NAMES
    assert list(nn.EncoderLayer(8, 2, 16).state_dict()) == LAYER_NAMES
    translator = mt.Translator.from_checkpoint(LESSONS / "translate-tiny")  # strict load
    assert list(translator.model.state_dict()) == list(translator.model.cfg.parameter_shapes())
    marian = nn.Transformer.from_pretrained(LESSONS / "marian-tiny")  # Marian's switches
    assert list(marian.state_dict()) == list(marian.cfg.parameter_shapes())
