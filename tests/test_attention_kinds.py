"""The attention kinds in the models (issue 44, item 2): TransformerConfig(attention=...,
attention_window=...) reaches every self-attention of the encoder-decoder and of
TransformerLM (cross-attention stays full), cached decoding equals the uncached pass for
each kind, a window that covers every key gives full attention's numbers, beam search keeps
the right rows of each kind's cache, the weights are refused where they are never formed,
and the fields are checked where they enter (the config, the layer, the CLI)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from test_cli import assert_user_error, run_main
from test_lm_cli import SMALL as LM_SMALL
from tiny_runs import TINY

import minitransformer as mt
from minitransformer.config import TransformerConfig
from minitransformer.decode import beam_search, greedy_decode
from minitransformer.errors import ArgumentError, ConfigError, ShapeError
from minitransformer.gradcheck import gradcheck
from minitransformer.nn import MultiHeadAttention, Transformer, TransformerLM
from minitransformer.nn.masks import Causal, causal_mask, decoder_mask

KINDS = {"local": 2, "strided": 3, "linear": None}  # kind -> attention_window
PAD, BOS = 0, 1


def _cfg(kind, decoder_only=False, window="kind", **extra):
    window = KINDS.get(kind) if window == "kind" else window
    return TransformerConfig.preset(
        "tiny", src_vocab=13, tgt_vocab=13, max_len=24, dtype="float64", dropout=0.0,
        attention=kind, attention_window=window, decoder_only=decoder_only, **extra,
    )  # fmt: skip


def _ids(shape, seed=1, low=3):
    return np.random.default_rng(seed).integers(low, 13, shape)


# ------------------------------------------------------------------ the config


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"attention": "sparse"}, "attention must be one of"),
        ({"attention": 3}, "attention must be one of"),
        ({"attention": "local"}, "local attention needs its window"),
        ({"attention": "strided"}, "strided attention needs its stride"),
        ({"attention": "linear", "attention_window": 4}, "leave attention_window unset"),
        ({"attention": "full", "attention_window": 4}, "leave attention_window unset"),
        ({"attention": "local", "attention_window": 0}, "attention_window must be an int > 0"),
        ({"attention": "local", "attention_window": 2.5}, "attention_window must be an int"),
        ({"attention": "local", "attention_window": True}, "attention_window must be an int"),
        (
            {"attention": "strided", "attention_window": 4, "attention_block_size": 8},
            "leave attention_block_size unset",
        ),
        ({"attention": "linear", "scale_attention": False}, "leave scale_attention on"),
    ],
)
def test_the_config_refuses_a_kind_and_window_that_do_not_fit(fields, words):
    with pytest.raises(ConfigError, match=words):
        TransformerConfig.preset("tiny", src_vocab=9, tgt_vocab=9, **fields)


def test_the_kind_round_trips_through_a_dict_and_old_dicts_mean_full():
    cfg = _cfg("local")
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("attention", "attention_window")}
    assert TransformerConfig.from_dict(old).attention == "full"


def test_cross_attention_stays_full_and_self_attention_takes_the_kind():
    model = Transformer(_cfg("local"), seed=0)
    for layer in model.encoder.layers:
        assert (layer.self_attn.attention, layer.self_attn.window) == ("local", 2)
    for layer in model.decoder.layers:
        assert layer.self_attn.attention == "local"
        assert (layer.cross_attn.attention, layer.cross_attn.window) == ("full", None)
    assert "attention='local', window=2" in repr(model.encoder.layers[0].self_attn)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"attention": "band"}, "attention must be one of"),
        ({"attention": "local"}, "needs its window"),
        ({"attention": "linear", "window": 3}, "leave attention_window unset"),
    ],
)
def test_a_layer_built_by_hand_checks_its_kind(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        MultiHeadAttention(16, 2, **kwargs)


# ------------------------------------------------------------------ the layer


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_layer_passes_gradcheck_with_each_kind(kind, causal):
    layer = MultiHeadAttention(8, 2, generator=mt.backend.Generator(0), attention=kind,
                               window=KINDS[kind]).to(dtype="float64")  # fmt: skip
    x = mt.Tensor(np.random.default_rng(2).normal(size=(2, 5, 8)), requires_grad=True)
    keep = np.ones((2, 1, 1, 5), bool)
    keep[1, ..., 3:] = False  # a padded row
    mask = Causal(keep) if causal else keep
    assert gradcheck(lambda x: layer(x, x, x, mask), x)


@pytest.mark.parametrize("kind, window", [("local", 9), ("strided", 9)])
def test_a_window_over_every_key_is_full_attention(kind, window):
    """With a window (or stride) at least the length, local and strided attention read
    every key: the model then gives the full model's logits, weights drawn alike."""
    ids = _ids((2, 8))
    full = TransformerLM(config=_cfg("full", decoder_only=True), seed=4)
    other = TransformerLM(config=_cfg(kind, decoder_only=True, window=window), seed=4)
    np.testing.assert_allclose(other(ids).numpy(), full(ids).numpy(), atol=1e-12)


def test_the_causal_rule_given_to_full_attention_is_the_causal_mask():
    layer = MultiHeadAttention(8, 2, generator=mt.backend.Generator(0)).to(dtype="float64")
    x = mt.Tensor(np.random.default_rng(2).normal(size=(2, 5, 8)))
    keep = np.ones((2, 1, 1, 5), bool)
    keep[0, ..., 4] = False
    dense = causal_mask(5) & keep
    np.testing.assert_array_equal(layer(x, x, x, Causal(keep)).numpy(),
                                  layer(x, x, x, dense).numpy())  # fmt: skip
    assert decoder_mask("local", 5, "cpu", 0, keep).keys is keep


@pytest.mark.parametrize("kind", KINDS)
def test_a_mask_with_a_query_axis_is_refused_by_the_kinds_that_never_form_it(kind):
    layer = MultiHeadAttention(8, 2, attention=kind, window=KINDS[kind])
    x = mt.Tensor(np.zeros((1, 4, 8), np.float32))
    with pytest.raises(ShapeError, match=r"key padding mask \(B, 1, 1, S\)"):
        layer(x, x, x, causal_mask(4))


@pytest.mark.parametrize("kind", KINDS)
def test_attention_weights_are_refused_where_they_are_never_formed(kind):
    """A language model of another kind has no weights to keep: refused by name; a
    translator keeps its cross-attention's (always full) and none of its self-attention's;
    a layer told to keep them anyway refuses at its forward."""
    with pytest.raises(ArgumentError, match=f"attention is '{kind}', which never forms"):
        TransformerLM(config=_cfg(kind, decoder_only=True), seed=0).attention_weights(True)
    model = Transformer(_cfg(kind), seed=0)
    model.attention_weights(True)
    with mt.no_grad():
        model(_ids((1, 5)), _ids((1, 4)))
    layer = model.decoder.layers[0]
    assert layer.cross_attn.last_weights.shape == (1, 4, 4, 5)
    assert layer.self_attn.last_weights is None
    layer.self_attn.store_weights = True
    with pytest.raises(ArgumentError, match="never forms the weights"):
        model(_ids((1, 5)), _ids((1, 4)))


# ------------------------------------------------------------------ cached decoding
# (the helpers serve tests/test_blocks_since_2017.py too)


def lm_stepwise_and_full(model, ids, prompt=5):
    """(logits of ids fed as a ``prompt``-token prompt then one token a step through the
    cache, logits of ids fed at once, the cache)."""
    with mt.no_grad():
        full = model(ids).numpy()
        cache = model.new_cache()
        parts = [model(ids[:, :prompt], cache).numpy()]
        parts += [model(ids[:, t : t + 1], cache).numpy() for t in range(prompt, ids.shape[1])]
    return np.concatenate(parts, axis=1), full, cache


def generated_with_and_without_cache(model, prompt, max_new_tokens=10):
    """Greedy continuations of ``prompt``, with the cache and recomputing."""
    cached = model.generate(prompt, max_new_tokens, temperature=0, seed=0)
    uncached = model.generate(prompt, max_new_tokens, temperature=0, seed=0, use_cache=False)
    return np.asarray(cached), np.asarray(uncached)


def decoded_stepwise_and_full(model, src, tgt):
    """(the translator's logits of tgt decoded one token a step through the cache, of tgt
    decoded at once)."""
    with mt.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory, src).numpy()
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, src, cache).numpy()
                 for t in range(tgt.shape[1])]  # fmt: skip
    return np.concatenate(steps, axis=1), full


def kept_rows_step_and_fresh(model, ids, order):
    """(the last position's logits after the cache of ids[:, :-1] kept the rows ``order``,
    the same logits of ids[order] computed afresh)."""
    with mt.no_grad():
        cache = model.new_cache()
        model(ids[:, :-1], cache)
        for layer in cache.self_attn:
            layer.keep_rows(order)
        step = model(ids[order, -1:], cache).numpy()
        fresh = model(ids[order]).numpy()[:, -1:]
    return step, fresh


@pytest.mark.parametrize("kind", KINDS)
def test_no_kind_lets_the_future_leak(kind):
    """Changing the ids from position 4 on leaves the logits of positions 0..3 as they were."""
    model = TransformerLM(config=_cfg(kind, decoder_only=True), seed=7)
    ids = _ids((2, 10))
    changed = ids.copy()
    changed[:, 4:] = 3
    before, after = model(ids).numpy(), model(changed).numpy()
    np.testing.assert_allclose(after[:, :4], before[:, :4], atol=1e-13)
    assert np.abs(after[:, 4:] - before[:, 4:]).max() > 1e-6


@pytest.mark.parametrize("kind", KINDS)
def test_the_lm_cached_equals_uncached(kind):
    """Logits of a 12-token sequence fed at once, and fed as a 5-token prompt then one
    token a step through the cache: local's window of the cache, strided's whole cache,
    linear's running sums."""
    model = TransformerLM(config=_cfg(kind, decoder_only=True), seed=1)
    stepwise, full, cache = lm_stepwise_and_full(model, _ids((3, 12)))
    np.testing.assert_allclose(stepwise, full, atol=1e-10)
    if kind == "local":  # the window of the cache: no more than the last 2 positions
        assert cache.self_attn[0].k.shape[2] == 2
    if kind == "linear":  # no keys at all, the sums: (B, H, d_k, d_v) and (B, H, d_k)
        assert cache.self_attn[0].k is None
        assert cache.self_attn[0].state.kv.shape == (3, 4, 16, 16)


@pytest.mark.parametrize("kind", KINDS)
def test_generate_with_the_cache_equals_without(kind):
    model = TransformerLM(config=_cfg(kind, decoder_only=True), seed=2)
    np.testing.assert_array_equal(*generated_with_and_without_cache(model, _ids((2, 3))))


@pytest.mark.parametrize("kind", KINDS)
def test_the_translator_cached_equals_uncached_with_a_padded_target(kind):
    model = Transformer(_cfg(kind), seed=3)
    src = _ids((3, 6))
    src[2, 4:] = PAD
    tgt = _ids((3, 7), seed=2)
    tgt[:, 0] = BOS
    tgt[1, 5:] = PAD  # padding after a shorter target
    steps, full = decoded_stepwise_and_full(model, src, tgt)
    np.testing.assert_allclose(steps[:, :5], full[:, :5], atol=1e-10)
    np.testing.assert_allclose(steps[0], full[0], atol=1e-10)
    assert greedy_decode(model, src, max_len=10) == greedy_decode(
        model, src, max_len=10, use_cache=False
    )


@pytest.mark.parametrize("kind", KINDS)
def test_keeping_rows_of_a_cache_equals_decoding_those_rows(kind):
    """What beam search does to a cache (keep_rows) leaves each kind's cache as if the kept
    rows had been decoded on their own."""
    model = TransformerLM(config=_cfg(kind, decoder_only=True), seed=5)
    step, fresh = kept_rows_step_and_fresh(model, _ids((3, 6)), np.array([2, 0, 0]))
    np.testing.assert_allclose(step, fresh, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_beam_search_runs_with_each_kind_and_a_beam_of_one_is_greedy(kind):
    model = Transformer(_cfg(kind), seed=6)
    src = _ids((2, 5))
    assert beam_search(model, src, beam_size=1, max_len=8) == greedy_decode(model, src, 8)
    assert len(beam_search(model, src, beam_size=3, max_len=8)) == 2


# ------------------------------------------------------------------ training, CLI


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("task", ["copy", "lm"])
def test_a_tiny_run_trains_saves_and_decodes_with_each_kind(kind, task, tmp_path, capsys):
    """`train` with --model attention=KIND: the run's card records the kind, and its
    checkpoint translates (copy) or generates (lm) through the kind's cache."""
    out = tmp_path / "run"
    window = [] if KINDS[kind] is None else ["--model", f"attention_window={KINDS[kind]}"]
    flags = [*(TINY if task == "copy" else LM_SMALL), "--model", f"attention={kind}", *window]
    code, _, err = run_main(["train", task, *flags, "--steps", "12", "--out", str(out)], capsys)
    assert code == 0, err
    card = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert (card["config"]["attention"], card["config"]["attention_window"]) == (
        kind, KINDS[kind])  # fmt: skip
    assert math.isfinite(card["metrics"]["loss"])
    text = ["And God", "--max-new-tokens", "4"] if task == "lm" else ["3 4 5"]
    command = "generate" if task == "lm" else "translate"
    code, printed, err = run_main([command, "--checkpoint", str(out), *text], capsys)
    assert code == 0, err
    assert printed.endswith("\n")


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--model", "attention=local"], "attention_window=32"),
        (["--model", "attention=sparse"], "attention must be one of"),
        (["--model", "attention=linear", "--model", "attention_window=8"], "leave"),
    ],
)
def test_the_cli_refuses_a_kind_without_what_it_needs(flags, words, tmp_path, capsys):
    code, _, err = run_main(["train", "copy", *TINY, *flags, "--out", str(tmp_path / "r")],
                            capsys)  # fmt: skip
    assert_user_error(code, err, words)


def test_replace_checks_the_kind_again():
    with pytest.raises(ConfigError, match="needs its window"):
        dataclasses.replace(_cfg("full"), attention="local")


@pytest.mark.parametrize("kind", KINDS)
def test_a_training_step_of_each_kind_makes_no_host_read(kind, tmp_path, monkeypatch):
    """On the strict stand-in for a GPU, a step with each kind never reads the device."""
    from test_no_sync import read_back_of_steps_without_host_reads

    overrides = {"attention": kind, "attention_window": KINDS[kind]}
    values = read_back_of_steps_without_host_reads(tmp_path, monkeypatch, "copy", overrides)
    assert all(math.isfinite(v) for v in values)
