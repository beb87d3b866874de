"""Checked once (issue 27): a validated TransformerConfig is not checked again by every layer
the model builds, a layer built by hand still checks its arguments where they enter, and
the rule that h heads split d_model is stated in one place.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections import Counter

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


def test_a_transformer_checks_its_config_once_not_in_every_layer():
    """Transformer(cfg) validates cfg once; the layers it builds from it check nothing, so
    the count does not grow with N (only the seed is checked, where it enters); before this
    change the tiny model (N = 2) made 100 positive_int calls, 47 more for each layer of N."""
    counts = []
    for N in (1, 6):
        cfg = TransformerConfig.preset("tiny", src_vocab=50, tgt_vocab=50, N=N, pre_norm=True,
                                       tie_embeddings=False, attention_block_size=8)  # fmt: skip
        counts.append(calls(lambda: nn.Transformer(cfg)))  # noqa: B023 (called at once)
    assert counts[0] == counts[1], counts
    assert counts[0]["validate"] == 1
    assert counts[0]["positive_int"] == 0, counts[0]


def test_a_preset_is_validated_once():
    counted = calls(lambda: TransformerConfig.preset("tiny", src_vocab=50, tgt_vocab=50))
    assert counted["validate"] == 1
    counted = calls(lambda: TransformerConfig.from_dict({"src_vocab": 9, "tgt_vocab": 9}))
    assert counted["validate"] == 1


@pytest.mark.parametrize("stack", [nn.Encoder, nn.Decoder])
def test_a_stack_built_by_hand_checks_its_arguments_once(stack):
    """Encoder(N, ...) checks N and the layer arguments once, not once per layer."""
    one = calls(lambda: stack(1, 8, 2, 16, dropout=0.1, pre_norm=True))
    six = calls(lambda: stack(6, 8, 2, 16, dropout=0.1, pre_norm=True))
    assert one == six, (one, six)  # the same checks for 1 layer as for 6
    assert one["positive_int"] <= 5, one  # N, d_model, h, d_ff (and d_model for the FFN)


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
