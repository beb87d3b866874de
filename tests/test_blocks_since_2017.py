"""The block since 2017 in the models (issue 45, item 2): TransformerConfig's switches
(norm, norm_eps, rotary, rotary_base, gated_ffn, kv_heads, linear_bias, activation
"gelu_tanh") and the blocks that name sets of them ("paper", "gpt2", "llama") build the
weights the shape table lists, decode with the KV cache as they compute without it (the
cache holding kv_heads heads), pass gradcheck as layers, train, save and generate through
the CLI (``--model block=llama``), and are checked where they enter."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from test_attention_kinds import (
    decoded_stepwise_and_full,
    generated_with_and_without_cache,
    kept_rows_step_and_fresh,
    lm_stepwise_and_full,
)
from test_cli import assert_user_error, run_main
from test_lm_cli import SMALL as LM_SMALL
from tiny_runs import TINY

import minitransformer as mt
from minitransformer.config import TransformerConfig
from minitransformer.config.blocks import BLOCKS
from minitransformer.decode import beam_search, greedy_decode
from minitransformer.errors import ConfigError
from minitransformer.gradcheck import gradcheck
from minitransformer.nn import MultiHeadAttention, RMSNorm, Transformer, TransformerLM
from minitransformer.nn.layers import PositionwiseFeedForward
from minitransformer.nn.masks import Causal

PAD, BOS = 0, 1

# name -> switches: each block, each switch alone, and mixes the blocks do not make
SWITCHES = {
    "paper": {"block": "paper"},
    "gpt2": {"block": "gpt2"},
    "llama": {"block": "llama"},
    "llama-gqa": {"block": "llama", "kv_heads": 2},
    "llama-mqa": {"block": "llama", "kv_heads": 1},
    "rms-post-ln": {"norm": "rms"},
    "rotary-interleaved": {"rotary": "interleaved", "rotary_base": 500.0},
    "gated-relu": {"gated_ffn": True},
    "gelu-tanh": {"activation": "gelu_tanh"},
    "no-bias": {"linear_bias": False},
    "gqa-post-ln": {"kv_heads": 2},
    "rotary-local": {"rotary": "halves", "attention": "local", "attention_window": 3},
    "rotary-gqa-linear": {"rotary": "halves", "kv_heads": 2, "attention": "linear"},
    "mqa-strided": {"kv_heads": 1, "attention": "strided", "attention_window": 3},
}


def _cfg(name, decoder_only=True, **extra):
    fields = dict(SWITCHES[name])
    block = fields.pop("block", None)
    return TransformerConfig.preset(
        "tiny", block, src_vocab=13, tgt_vocab=13, max_len=24, dtype="float64", dropout=0.0,
        decoder_only=decoder_only, **{**fields, **extra},
    )  # fmt: skip


def _ids(shape, seed=1, low=3):
    return np.random.default_rng(seed).integers(low, 13, shape)


# ------------------------------------------------------------------ the config


def test_the_blocks_set_what_the_table_says():
    paper, gpt2, llama = (_cfg(name) for name in ("paper", "gpt2", "llama"))
    assert (paper.pre_norm, paper.norm, paper.rotary, paper.activation) == (
        False, "layer", None, "relu")  # fmt: skip
    assert (gpt2.pre_norm, gpt2.learned_positions, gpt2.activation, gpt2.scale_embedding) == (
        True, True, "gelu_tanh", False)  # fmt: skip
    assert (llama.norm, llama.rotary, llama.gated_ffn, llama.linear_bias) == (
        "rms", "halves", True, False)  # fmt: skip
    assert _cfg("llama", kv_heads=2).kv_heads == 2  # a field given beside a block wins
    assert set(BLOCKS) == {"paper", "gpt2", "llama"}


@pytest.mark.parametrize("name", SWITCHES)
@pytest.mark.parametrize("decoder_only", [True, False])
def test_the_shape_table_lists_the_weights_the_model_builds(name, decoder_only):
    cfg = _cfg(name, decoder_only=decoder_only)
    model = mt.nn.build_model(cfg, seed=0)
    built = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert built == cfg.parameter_shapes()
    assert sum(math.prod(s) for s in built.values()) == cfg.num_parameters()
    assert len(built) == cfg.num_weight_arrays()


def test_gqa_and_bias_free_linears_shrink_the_model_as_counted():
    mha, gqa, mqa = (_cfg("llama", kv_heads=k) for k in (None, 2, 1))
    D, d_k, N = 64, 16, 2
    assert mha.num_parameters() - gqa.num_parameters() == N * 2 * D * (4 - 2) * d_k
    assert mha.num_parameters() - mqa.num_parameters() == N * 2 * D * (4 - 1) * d_k
    with_bias = _cfg("paper").num_parameters()
    without = _cfg("paper", linear_bias=False).num_parameters()
    assert with_bias - without == N * (4 * D + 256 + D)


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"norm": "batch"}, "norm must be one of"),
        ({"norm_eps": 0.0}, "norm_eps must be a number in"),
        ({"norm_eps": float("nan")}, "norm_eps must be a number in"),
        ({"norm_eps": "1e-5"}, "norm_eps must be a number in"),
        ({"rotary": "both"}, "rotary must be None or one of"),
        ({"rotary": "halves", "learned_positions": True}, "choose one"),
        ({"rotary_base": 1.0}, "rotary_base must be a finite number > 1"),
        ({"rotary_base": float("inf")}, "rotary_base must be a finite number > 1"),
        ({"gated_ffn": 1}, "gated_ffn must be True or False"),
        ({"linear_bias": "no"}, "linear_bias must be True or False"),
        ({"kv_heads": 3}, r"kv_heads \(3\) must divide the query heads h \(4\)"),
        ({"kv_heads": 0}, "kv_heads must be an int > 0"),
        ({"kv_heads": 2.0}, "kv_heads must be an int > 0"),
        ({"activation": "gelu_new"}, "activation must be one of"),
        ({"rotary": "halves", "key_dim": 7}, "even d_k"),
    ],
)
def test_the_config_refuses_switches_that_do_not_fit(fields, words):
    with pytest.raises(ConfigError, match=words):
        TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, **fields)


CAP_WORDS = [(None, "GiB of position table"), ("halves", "rotary positions need no table")]


@pytest.mark.parametrize("rotary, words", CAP_WORDS)
def test_the_position_cap_says_why_for_a_table_and_for_rotary(rotary, words):
    with pytest.raises(ConfigError, match=rf"above the cap of 65,536 positions \(.*{words}"):
        TransformerConfig(src_vocab=9, tgt_vocab=9, max_len=131_072, rotary=rotary)


def test_kv_heads_must_divide_the_decoders_heads_too():
    with pytest.raises(ConfigError, match=r"must divide the query heads h \(2\)"):
        TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, kv_heads=4, decoder_h=2)


@pytest.mark.parametrize("block", ["gpt3", 2, "Llama"])
def test_an_unknown_block_is_refused_with_the_names(block):
    with pytest.raises(ConfigError, match=r"unknown block .*'gpt2', 'llama', 'paper'"):
        TransformerLM(vocab=9, block=block)
    with pytest.raises(ConfigError, match="unknown block"):
        TransformerConfig.preset("tiny", block=block, src_vocab=9, tgt_vocab=9)


def test_the_switches_round_trip_and_old_dicts_mean_the_paper():
    cfg = _cfg("llama-gqa")
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    new = ("norm", "norm_eps", "rotary", "rotary_base", "gated_ffn", "kv_heads", "linear_bias")
    old = TransformerConfig.from_dict({k: v for k, v in _cfg("paper").to_dict().items()
                                       if k not in new})  # fmt: skip
    assert old == _cfg("paper")
    assert set(new) <= set(TransformerConfig.ADDED)


def test_a_language_model_may_end_with_its_start_token_and_a_translator_may_not():
    lm = TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, decoder_only=True,
                                  bos_id=2, eos_id=2)  # fmt: skip
    assert lm.bos_id == lm.eos_id  # GPT-2's one <|endoftext|>
    with pytest.raises(ConfigError, match="must be distinct"):
        TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, bos_id=2, eos_id=2)
    with pytest.raises(ConfigError, match="must be distinct"):
        TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, decoder_only=True,
                                 pad_id=2, eos_id=2, bos_id=1)  # fmt: skip


def test_replace_checks_the_switches_again():
    with pytest.raises(ConfigError, match="choose one"):
        dataclasses.replace(_cfg("gpt2"), rotary="halves")


# ------------------------------------------------------------------ the layers


LAYER_SWITCHES = [
    {"kv_heads": 2, "rotary": "halves", "linear_bias": False},
    {"kv_heads": 1, "rotary": "interleaved"},
    {"kv_heads": 2, "attention": "local", "attention_window": 2},
]


@pytest.mark.parametrize("switches", LAYER_SWITCHES)
@pytest.mark.parametrize("causal", [False, True])
def test_the_attention_layer_passes_gradcheck_with_the_switches(switches, causal):
    cfg = TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, d_model=8, h=4,
                                   **switches)  # fmt: skip
    layer = MultiHeadAttention(cfg, 4, mt.backend.Generator(0)).to(dtype="float64")
    x = mt.Tensor(np.random.default_rng(2).normal(size=(2, 5, 8)), requires_grad=True)
    keep = np.ones((2, 1, 1, 5), bool)
    keep[1, ..., 3:] = False
    mask = Causal(keep) if causal else keep
    weights = [p for p in layer.parameters()]
    assert gradcheck(lambda x, *w: layer(x, x, x, mask), x, *weights)


@pytest.mark.parametrize("activation", ["swish", "relu", "gelu_tanh"])
def test_the_gated_feed_forward_passes_gradcheck_and_is_the_formula(activation):
    cfg = TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, d_model=6, d_ff=5,
                                   h=2, gated_ffn=True, activation=activation)  # fmt: skip
    ffn = PositionwiseFeedForward(cfg, 5, generator=mt.backend.Generator(1)).to(dtype="float64")
    x = mt.Tensor(np.random.default_rng(3).normal(size=(2, 3, 6)), requires_grad=True)
    assert gradcheck(lambda x, *w: ffn(x), x, *ffn.parameters())
    act = getattr(mt.functional, PositionwiseFeedForward.FUNCTIONS[activation])
    w1, w2, w3 = (getattr(ffn, n).weight.numpy() for n in ("w_1", "w_2", "w_3"))
    b1, b2, b3 = (getattr(ffn, n).bias.numpy() for n in ("w_1", "w_2", "w_3"))
    hidden = act(mt.Tensor(x.numpy() @ w1 + b1)).numpy() * (x.numpy() @ w3 + b3)
    np.testing.assert_allclose(ffn(x).numpy(), hidden @ w2 + b2, atol=1e-12)


def test_the_rms_norm_layer_passes_gradcheck_and_checks_its_arguments():
    norm = RMSNorm(6, eps=1e-6).to(dtype="float64")
    x = mt.Tensor(np.random.default_rng(4).normal(size=(3, 6)), requires_grad=True)
    assert gradcheck(lambda x, g: norm(x), x, norm.gamma)
    want = x.numpy() / np.sqrt((x.numpy() ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(norm(x).numpy(), want, atol=1e-12)
    with pytest.raises(mt.errors.ArgumentError, match="eps"):
        RMSNorm(6, eps=0)


def test_cross_attention_is_never_rotated_and_groups_its_keys():
    model = Transformer(_cfg("llama-gqa", decoder_only=False), seed=0)
    layer = model.decoder.layers[0]
    assert (layer.self_attn.rotary, layer.cross_attn.rotary) == ("halves", None)
    assert layer.cross_attn.h_kv == 2 and layer.cross_attn.w_k.weight.shape == (64, 32)


# ------------------------------------------------------------------ cached decoding


@pytest.mark.parametrize("name", SWITCHES)
def test_the_lm_cached_equals_uncached(name):
    """Logits of a 12-token sequence fed at once, and as a 5-token prompt then one token a
    step through the cache (rotary: each step rotated at its own position)."""
    model = TransformerLM(config=_cfg(name), seed=1)
    stepwise, full, cache = lm_stepwise_and_full(model, _ids((3, 12)))
    np.testing.assert_allclose(stepwise, full, atol=1e-10)
    assert cache.self_attn[0].seen == 12


@pytest.mark.parametrize("kv_heads", [None, 2, 1])
def test_the_cache_holds_kv_heads_heads(kv_heads):
    model = TransformerLM(config=_cfg("llama", kv_heads=kv_heads), seed=1)
    cache = model.new_cache()
    with mt.no_grad():
        model(_ids((2, 7)), cache)
    k = cache.self_attn[0].k
    assert k.shape == (2, kv_heads or 4, 7, 16) == cache.self_attn[0].v.shape
    per_token = sum(c.k.data.nbytes + c.v.data.nbytes for c in cache.self_attn) / (2 * 7)
    assert per_token == 2 * 2 * (kv_heads or 4) * 16 * 8  # N layers * (k, v) * h_kv * d_k * 8 B


@pytest.mark.parametrize("name", ["paper", "gpt2", "llama", "llama-mqa", "rotary-local"])
def test_generate_with_the_cache_equals_without(name):
    model = TransformerLM(config=_cfg(name), seed=2)
    np.testing.assert_array_equal(*generated_with_and_without_cache(model, _ids((2, 3))))


@pytest.mark.parametrize("name", ["llama-gqa", "rotary-interleaved", "gpt2"])
def test_the_translator_cached_equals_uncached_and_beam_one_is_greedy(name):
    model = Transformer(_cfg(name, decoder_only=False), seed=3)
    src = _ids((3, 6))
    src[2, 4:] = PAD
    tgt = _ids((3, 7), seed=2)
    tgt[:, 0] = BOS
    steps, full = decoded_stepwise_and_full(model, src, tgt)
    np.testing.assert_allclose(steps, full, atol=1e-10)
    assert greedy_decode(model, src, max_len=10) == greedy_decode(
        model, src, max_len=10, use_cache=False
    )
    assert beam_search(model, src, beam_size=1, max_len=8) == greedy_decode(model, src, 8)


@pytest.mark.parametrize("name", ["llama-gqa", "rotary-interleaved"])
def test_keeping_rows_of_a_cache_equals_decoding_those_rows(name):
    model = TransformerLM(config=_cfg(name), seed=5)
    step, fresh = kept_rows_step_and_fresh(model, _ids((3, 6)), np.array([2, 0, 0]))
    np.testing.assert_allclose(step, fresh, atol=1e-10)


def test_rotary_logits_do_not_depend_on_where_a_sequence_starts():
    """RoPE's scores depend on distances only: without a table added to the tokens, a
    rotary model gives a sequence the same logits at offset 0 and after a prefix it cannot
    see... except through attention. With one layer reading only itself (a 1-token window),
    the logits of a token are the same whatever position it sits at."""
    cfg = _cfg("llama", attention="local", attention_window=1, N=1)
    model = TransformerLM(config=cfg, seed=0)
    ids = _ids((1, 6))
    with mt.no_grad():
        shifted = model(np.concatenate([_ids((1, 4), seed=9), ids], axis=1)).numpy()[:, 5:]
        plain = model(ids).numpy()[:, 1:]
    np.testing.assert_allclose(shifted, plain, atol=1e-10)


# ------------------------------------------------------------------ training, CLI


@pytest.mark.parametrize("block", ["paper", "gpt2", "llama"])
def test_a_tiny_lm_run_of_each_block_trains_saves_and_generates(block, tmp_path, capsys):
    """`train lm --model block=B`: the card records the block's switches, the checkpoint
    (safetensors) loads and generates through the cache."""
    out = tmp_path / "run"
    flags = [*LM_SMALL, "--model", f"block={block}", "--model", "kv_heads=2"]
    code, _, err = run_main(["train", "lm", *flags, "--steps", "12", "--out", str(out)], capsys)
    assert code == 0, err
    card = json.loads((out / "result.json").read_text(encoding="utf-8"))
    for key, value in {**BLOCKS[block], "kv_heads": 2}.items():
        assert card["config"][key] == value, key
    assert math.isfinite(card["metrics"]["loss"])
    code, printed, err = run_main(
        ["generate", "--checkpoint", str(out), "And God", "--max-new-tokens", "4"], capsys
    )
    assert code == 0, err
    assert printed.endswith("\n")


def test_a_translator_trains_with_the_llama_block(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = run_main(["train", "copy", *TINY, "--model", "block=llama", "--steps", "8",
                             "--out", str(out)], capsys)  # fmt: skip
    assert code == 0, err
    code, printed, err = run_main(["translate", "--checkpoint", str(out), "3 4 5"], capsys)
    assert code == 0, err


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--model", "block=gpt3"], "the block is one of paper, gpt2, llama"),
        (["--model", "rotary_base=0.5"], "rotary_base must be a finite number > 1"),
        (["--model", "norm_eps=0"], "norm_eps must be a number in (0, 1)"),
        (["--model", "kv_heads=3"], "must divide the query heads"),
        (["--model", "block=gpt2", "--model", "rotary=halves"], "choose one"),
        (["--model", "norm=batch"], "norm must be one of"),
    ],
)
def test_the_cli_refuses_switches_that_do_not_fit(flags, words, tmp_path, capsys):
    code, _, err = run_main(["train", "lm", *LM_SMALL, *flags, "--out", str(tmp_path / "r")],
                            capsys)  # fmt: skip
    assert_user_error(code, err, words)


def test_explicit_fields_win_over_the_block_whatever_their_order(tmp_path, capsys):
    out = tmp_path / "run"
    flags = ["--model", "norm=layer", "--model", "block=llama"]
    code, _, err = run_main(["train", "lm", *LM_SMALL, *flags, "--steps", "2", "--out",
                             str(out)], capsys)  # fmt: skip
    assert code == 0, err
    card = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert (card["config"]["norm"], card["config"]["rotary"]) == ("layer", "halves")


@pytest.mark.parametrize("switches", [{"block": "llama", "kv_heads": 2}, {"block": "gpt2"},
                                      {"rotary": "interleaved", "kv_heads": 1}])  # fmt: skip
@pytest.mark.parametrize("task", ["copy", "lm"])
def test_a_training_step_with_the_switches_makes_no_host_read(switches, task, tmp_path,
                                                              monkeypatch):  # fmt: skip
    """On the strict stand-in for a GPU, a step of each block never reads the device (the
    rotary angles are made on the device, at the offset the host knows)."""
    from test_no_sync import read_back_of_steps_without_host_reads

    values = read_back_of_steps_without_host_reads(tmp_path, monkeypatch, task, switches)
    assert all(math.isfinite(v) for v in values)
