"""fast/gpu/decode_graph.py on the CPU: decoding's per-token step replayed from "CUDA graphs"
with CuPy's capture calls stood in for (a capture runs the step's Python once, its replay
runs the same step again on the captured input buffer and writes the captured output, as a
graph's kernels would): the tokens equal eager decoding for greedy, beam search and
TransformerLM.generate; the shape's cache and buffers are reused; each replay sets the
caches' host positions; a failed capture, the graph budget and a cache that would grow fall
back to eager steps, counted by reason and said once; use_graph is checked. The real
capture needs a GPU: ``test_graph_decoding_is_eager_decoding_bit_for_bit_on_a_gpu``."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from cupy_standin import fake_capture

from minitransformer import decode
from minitransformer.config import TransformerConfig
from minitransformer.errors import ArgumentError
from minitransformer.fast.gpu import decode_graph
from minitransformer.fast.gpu.decode_graph import CAPTURE_FAILED, TOO_MANY_GRAPHS, graphs_for
from minitransformer.nn import Transformer, TransformerLM


def _fake_cupy(launches, fail=None):
    """CuPy's calls that DecodeGraphs makes, on NumPy (``cupy_standin/fake_capture.py``):
    the graph's launch runs the captured step (``run``, ``inputs``, ``output`` of the
    capturing ``DecodeGraphs._capture``) again and writes the captured output in place, each
    launch counted in ``launches``. ``fail``: end_capture raises."""

    def replay(frame):
        launches.append(1)
        frame["output"][...] = frame["run"](frame["inputs"])

    return fake_capture.fake_cupy(replay, fail=fail)


@pytest.fixture
def graphed(monkeypatch):
    """Graphs on the CPU: use_graphs says yes, CuPy is the stand-in; returns the launches."""
    launches = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(launches))
    yes = lambda where, model, use_graph, use_cache: use_graph is not False and use_cache  # noqa: E731
    monkeypatch.setattr(decode, "use_graphs", yes)
    monkeypatch.setattr(decode_graph, "use_graphs", yes)
    decode_graph.install(kernels_on=True)
    return launches


def _cfg(kind="full", decoder_only=False, **extra):
    window = {"local": 2, "strided": 3}.get(kind)
    return TransformerConfig.preset(
        "tiny", src_vocab=13, tgt_vocab=13, max_len=24, dropout=0.0, attention=kind,
        attention_window=window, decoder_only=decoder_only, **extra,
    )  # fmt: skip


def _src(seed, rows=2, length=6):
    return np.random.default_rng(seed).integers(3, 13, (rows, length))


# Linear attention's running sums are added in place: the stand-in's capture runs the step
# for real, so its replay would add them twice (a real capture runs no kernel): GPU only.
@pytest.mark.parametrize("kind, extra", [("full", {}), ("local", {"kv_heads": 2}),
                                         ("strided", {"rotary": "halves"})])  # fmt: skip
def test_greedy_and_beam_from_graphs_equal_eager_decoding(graphed, kind, extra):
    model = Transformer(_cfg(kind, **extra), seed=1)
    sources = [_src(1), _src(1), _src(2), _src(3)]  # warm-up, capture, replays on others
    for src in sources:
        want = decode.greedy_decode(model, src, max_len=8, use_graph=False)
        assert decode.greedy_decode(model, src, max_len=8) == want
    runner = graphs_for(model)
    stats = runner.stats()
    assert stats["graphs"] == 7 and stats["fallbacks"] == {}  # positions 1..7, once each
    assert stats["replays"] == 3 * 7 and len(graphed) == 3 * 7
    assert stats["eager_steps"] == 8 + 3  # the warm-up decode, then each position 0
    ((shape, cache),) = runner.caches.items()
    assert shape == (2, 16, 8)  # rows, the source padded to a bucket, the capacity
    assert cache.offset == 8 and cache.self_attn[0].seen == 8  # as an eager decode leaves it
    for src in sources[2:]:
        want = decode.beam_search(model, src, beam_size=3, max_len=8, use_graph=False)
        assert decode.beam_search(model, src, beam_size=3, max_len=8) == want
    assert runner.stats()["replays"] > 3 * 7 and runner.stats()["fallbacks"] == {}


def test_generate_from_graphs_equals_eager_generate(graphed):
    lm = TransformerLM(config=_cfg(decoder_only=True, kv_heads=2), seed=4)
    for seed in (5, 5, 6):
        prompts = _src(seed, rows=3, length=4).tolist()
        want = lm.generate(prompts, 7, temperature=0, use_graph=False)
        assert lm.generate(prompts, 7, temperature=0) == want
    stats = graphs_for(lm).stats()
    assert stats["graphs"] == 6 and stats["replays"] == 12 and stats["fallbacks"] == {}


def test_a_failed_capture_runs_eagerly_counted_and_said_once(monkeypatch):
    launches, told = [], []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(launches, fail="not permitted"))
    monkeypatch.setattr(decode, "use_graphs", lambda where, model, use_graph, cached: use_graph)
    model = Transformer(_cfg(), seed=1)
    graphs_for(model).on_fallback = told.append
    for seed in (1, 1, 2):
        want = decode.greedy_decode(model, _src(seed), max_len=6, use_graph=False)
        assert decode.greedy_decode(model, _src(seed), max_len=6) == want
    stats = graphs_for(model).stats()
    assert launches == [] and stats["graphs"] == 0 and stats["replays"] == 0
    assert stats["fallbacks"] == {CAPTURE_FAILED: 2 * 5}  # positions 1..5 of two decodes
    assert len(told) == 1 and "could not be captured" in told[0] and "not permitted" in told[0]


def test_past_the_graph_budget_steps_run_eagerly(graphed):
    model = Transformer(_cfg(), seed=1)
    runner = graphs_for(model)
    runner.max_graphs = 3
    for seed in (1, 1, 2):
        want = decode.greedy_decode(model, _src(seed), max_len=6, use_graph=False)
        assert decode.greedy_decode(model, _src(seed), max_len=6) == want
    stats = runner.stats()
    assert stats["graphs"] == 3 and stats["fallbacks"] == {TOO_MANY_GRAPHS: 2 * 2}


@pytest.mark.parametrize("use_graph", ["yes", 1.0, 1, None, "on", np.array(True)])
def test_use_graph_is_checked(use_graph):
    model = Transformer(_cfg(), seed=1)
    with pytest.raises(ArgumentError, match="use_graph must be 'auto', True or False"):
        decode.greedy_decode(model, _src(1), max_len=3, use_graph=use_graph)
    lm = TransformerLM(config=_cfg(decoder_only=True))
    with pytest.raises(ArgumentError, match="use_graph must be 'auto', True or False"):
        lm.generate([[1, 4]], 2, use_graph=use_graph)


def test_the_cpu_never_replays_and_true_is_refused_there():
    model = Transformer(_cfg(), seed=1)
    assert decode.greedy_decode(model, _src(1), max_len=4)  # "auto": eager on the CPU
    assert model not in decode_graph._RUNNERS
    with pytest.raises(ArgumentError, match="needs cached decoding on a CUDA device"):
        decode.greedy_decode(model, _src(1), max_len=4, use_graph=True)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["full", "local", "strided", "linear"])
def test_graph_decoding_is_eager_decoding_bit_for_bit_on_a_gpu(kind):
    """On a GPU with the fused kernels: greedy, beam and generate replayed from CUDA graphs
    give the eager decodes' tokens and the same logits bit for bit (sources of 16 tokens:
    no bucket padding), across sources after the capture."""
    model = Transformer(_cfg(kind, kv_heads=2), seed=1).to("cuda")
    lm = TransformerLM(config=_cfg(kind, decoder_only=True, kv_heads=2), seed=1).to("cuda")
    for seed in (1, 1, 2, 3):
        src = _src(seed, rows=4, length=16)
        assert decode.greedy_decode(model, src, max_len=12) == decode.greedy_decode(
            model, src, max_len=12, use_graph=False
        )
        assert decode.beam_search(model, src, beam_size=3, max_len=12) == decode.beam_search(
            model, src, beam_size=3, max_len=12, use_graph=False
        )
        prompts = _src(seed, rows=3, length=5).tolist()
        want = lm.generate(prompts, 10, temperature=0, use_graph=False)
        assert lm.generate(prompts, 10, temperature=0) == want
    for runner in (graphs_for(model), graphs_for(lm)):
        stats = runner.stats()
        assert stats["replays"] > 0 and stats["fallbacks"] == {}, stats
