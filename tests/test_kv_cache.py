"""The preallocated key/value cache (nn/kv_cache.py, issue 49 item 3): cached decoding equals
recomputing for every attention kind, grouped-query heads and rotary positions (greedy,
beam, TransformerLM.generate); no step concatenates the cache (nor the output ids): the
number of concatenations of a decode does not grow with its length; the buffers are
allocated once for a known capacity, grown geometrically without one, slid for local
attention's window; beam search reorders rows in place (same buffers); new_cache checks
its capacity."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import functional as F
from minitransformer.backend import namespaces
from minitransformer.config import TransformerConfig
from minitransformer.decode import beam_search, greedy_decode
from minitransformer.errors import ArgumentError
from minitransformer.nn import KVCache, Transformer, TransformerLM
from minitransformer.nn.kv_cache import MIN_GROWTH, PositionBuffer
from minitransformer.tensor import Tensor

KINDS = {"full": None, "local": 2, "strided": 3, "linear": None}  # kind -> window
HEADS = {
    "paper": {}, "gqa": {"kv_heads": 2}, "mqa": {"kv_heads": 1}, "rotary": {"rotary": "halves"},
    "gqa+rotary": {"kv_heads": 2, "rotary": "interleaved"},
}  # fmt: skip


def _cfg(kind, heads, decoder_only=False):
    return TransformerConfig.preset(
        "tiny", src_vocab=13, tgt_vocab=13, max_len=24, dtype="float64", dropout=0.0,
        attention=kind, attention_window=KINDS[kind], decoder_only=decoder_only,
        **HEADS[heads],
    )  # fmt: skip


def _ids(shape, seed=1):
    return np.random.default_rng(seed).integers(3, 13, shape)


# ------------------------------------------------------------------ cached == recomputing


@pytest.mark.parametrize("heads", list(HEADS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_cached_lm_logits_equal_the_whole_pass(kind, heads):
    """A prompt, then one token a step through the preallocated cache: the logits of the
    whole sequence at once (float64), for each kind and each head layout."""
    lm = TransformerLM(config=_cfg(kind, heads, decoder_only=True), seed=3).eval()
    ids = _ids((3, 12))
    with mt.no_grad():
        full = lm(ids).numpy()
        cache = lm.new_cache(capacity=12)
        parts = [lm(ids[:, :5], cache).numpy()]
        parts += [lm(ids[:, t : t + 1], cache).numpy() for t in range(5, 12)]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), full, rtol=1e-9, atol=1e-11)
    held = cache.self_attn[0]
    if kind == "linear":
        assert held.k is None and held.state.kv is not None
    else:
        assert held.k.shape[2] == (2 if kind == "local" else 12)  # local: its window
        assert held.keys.room == 12  # allocated once, for the capacity


@pytest.mark.parametrize("heads", ["paper", "gqa+rotary"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_greedy_generate_and_beam_with_the_cache_equal_recomputing(kind, heads):
    model = Transformer(_cfg(kind, heads), seed=2)
    src = _ids((3, 7))
    src[0, 5:] = 0  # a padded source row
    cached = greedy_decode(model, src, max_len=9)
    assert cached == greedy_decode(model, src, max_len=9, use_cache=False)
    lm = TransformerLM(config=_cfg(kind, heads, decoder_only=True), seed=2)
    prompts = _ids((2, 4)).tolist()
    with_cache = lm.generate(prompts, 8, temperature=0, seed=0)
    assert with_cache == lm.generate(prompts, 8, temperature=0, seed=0, use_cache=False)
    # beam search: with buffers allocated once == with buffers grown from one position
    want = beam_search(model, src, beam_size=3, max_len=9)
    small = model.new_cache
    model.new_cache = lambda capacity=None: small(capacity=1)  # grows at every fill
    assert beam_search(model, src, beam_size=3, max_len=9) == want


# ------------------------------------------------------------------ no concatenation a token


def _count_concats(monkeypatch):
    """Count the concatenations made outside the ops (the Tensor op F.concat, the NumPy
    namespace's concat, NumPy's concatenate): the attention kinds' ops assemble each step's
    own scores with concat (a band and its columns), which copies no cached keys."""
    calls = []

    def counted(name, fn):
        def wrapper(*a, **k):
            caller = sys._getframe(1).f_code.co_filename.replace("\\", "/")
            if "minitransformer/ops/" not in caller:
                calls.append((name, caller))
            return fn(*a, **k)

        return wrapper

    ns = namespaces._numpy_ns
    monkeypatch.setattr(F, "concat", counted("F.concat", F.concat))
    monkeypatch.setattr(ns, "concat", counted("xp.concat", np.concat))
    monkeypatch.setattr(ns, "concatenate", counted("xp.concatenate", np.concatenate))
    return calls


@pytest.mark.parametrize("kind", list(KINDS))
def test_no_step_concatenates_the_cache_or_the_ids(kind, monkeypatch):
    """No cached decode concatenates the cache or the ids: none at all, whatever its length
    (the code before concatenated every layer's keys and values, the target mask and the
    ids at each step: 33 calls at 3 tokens, 177 at 12, for these three decodes)."""
    model = Transformer(_cfg(kind, "gqa"), seed=2)
    lm = TransformerLM(config=_cfg(kind, "gqa", decoder_only=True), seed=2)
    src, prompts = _ids((2, 6)), _ids((2, 3)).tolist()
    model.cfg, lm.cfg = _no_eos(model.cfg), _no_eos(lm.cfg)  # every decode runs its length
    for steps in (3, 12):
        calls = _count_concats(monkeypatch)
        assert len(greedy_decode(model, src, max_len=steps)[0]) == steps
        beam_search(model, src, beam_size=2, max_len=steps)
        assert len(lm.generate(prompts, steps, temperature=0)[0]) == 3 + steps
        monkeypatch.undo()
        assert calls == [], calls


def _no_eos(cfg):
    """The config with an EOS id no argmax returns (as the decoding benchmark does)."""
    import dataclasses

    cfg = dataclasses.replace(cfg)
    object.__setattr__(cfg, "eos_id", -1)
    return cfg


# ------------------------------------------------------------------ the buffers


def _step(rng, rows=2, heads=2, width=3, T=1):
    return Tensor(rng.standard_normal((rows, heads, T, width)))


@pytest.mark.parametrize("capacity", [1, 4, 7, 40])
def test_a_known_capacity_is_allocated_once_and_filled_in_place(capacity):
    rng = np.random.default_rng(0)
    cache = KVCache(capacity=capacity)
    steps = [_step(rng, T=T) for T in (2, 1, 1, 3, 1)]
    buffers = set()
    for i, k in enumerate(steps):
        got_k, got_v = cache.append(k, k * 2.0)
        buffers.add(id(cache.keys.data))
        want = np.concatenate([s.numpy() for s in steps[: i + 1]], axis=2)
        np.testing.assert_array_equal(got_k.numpy(), want)
        np.testing.assert_array_equal(got_v.numpy(), want * 2.0)
    if capacity >= 8:  # the 8 positions fit: one buffer, never grown
        assert buffers == {id(cache.keys.data)} and cache.keys.room == capacity
    else:  # grown geometrically: each growth at least doubles
        assert cache.keys.room >= max(8, MIN_GROWTH) and len(buffers) <= 2


@pytest.mark.parametrize("positions", [5, 17, 40, 100])
def test_without_a_capacity_the_buffers_grow_geometrically(positions):
    """One position at a time, no capacity: grown to 16, 32, 64, ... (O(log L) copies)."""
    rng = np.random.default_rng(1)
    buf, rooms, steps = PositionBuffer(axis=2), [], []
    for _ in range(positions):
        steps.append(rng.standard_normal((1, 2, 1, 3)))
        view = buf.append(steps[-1])
        if not rooms or rooms[-1] != buf.room:
            rooms.append(buf.room)
    np.testing.assert_array_equal(view, np.concatenate(steps, axis=2))
    assert rooms == [MIN_GROWTH * 2**i for i in range(len(rooms))]
    assert rooms[-1] < 2 * max(positions, MIN_GROWTH)


@pytest.mark.parametrize("window, capacity", [(2, 3), (3, 4), (3, 9), (1, None)])
def test_local_windows_slide_inside_their_buffer(window, capacity):
    """keep_last(window): the view is the last ``window`` positions; when room runs out the
    held ones move to the front instead of the buffer growing."""
    rng = np.random.default_rng(2)
    cache, steps = KVCache(capacity=capacity), []
    for _ in range(20):
        steps.append(_step(rng))
        cache.append(steps[-1], steps[-1])
        cache.keep_last(window)
        want = np.concatenate([s.numpy() for s in steps[-window:]], axis=2)
        np.testing.assert_array_equal(cache.k.numpy(), want)
    assert cache.keys.room == (capacity or MIN_GROWTH)  # never grown


@pytest.mark.parametrize("order", [[1, 1, 0], [2, 0, 1], [0, 0, 0]])
def test_keep_rows_reorders_in_place_into_the_same_buffers(order):
    rng = np.random.default_rng(3)
    cache = KVCache(capacity=8)
    for _ in range(3):
        cache.append(_step(rng, rows=3), _step(rng, rows=3))
    before_k, before_v = cache.k.numpy().copy(), cache.v.numpy().copy()
    address = cache.keys.data.ctypes.data, cache.values.data.ctypes.data
    cache.keep_rows(np.asarray(order))
    np.testing.assert_array_equal(cache.k.numpy(), before_k[order])
    np.testing.assert_array_equal(cache.v.numpy(), before_v[order])
    assert (cache.keys.data.ctypes.data, cache.values.data.ctypes.data) == address
    cache.append(_step(rng, rows=3), _step(rng, rows=3))  # and it goes on from there
    np.testing.assert_array_equal(cache.k.numpy()[:, :, :3], before_k[order])


def test_the_decoder_cache_reset_keeps_every_buffer_and_decodes_the_same():
    model = Transformer(_cfg("full", "gqa"), seed=4)
    src = _ids((2, 5))
    with mt.no_grad():
        memory = model.encode(src)
        cache = model.new_cache(capacity=4)
        tgt = np.concatenate([np.full((2, 1), 1), _ids((2, 3), seed=5)], axis=1)
        first = [model.decode(tgt[:, t : t + 1], memory, src, cache).numpy() for t in range(4)]
        buffers = [kv.keys.data for kv in cache.self_attn + cache.cross_attn]
        cache.reset()
        again = [model.decode(tgt[:, t : t + 1], memory, src, cache).numpy() for t in range(4)]
    after = [kv.keys.data for kv in cache.self_attn + cache.cross_attn]
    assert all(a is b for a, b in zip(after, buffers, strict=True))  # the same buffers
    np.testing.assert_array_equal(np.concatenate(again, 1), np.concatenate(first, 1))


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True, "8", [4]])
def test_new_cache_checks_its_capacity(capacity):
    lm = TransformerLM(config=_cfg("full", "paper", True))
    for model in (Transformer(_cfg("full", "paper")), lm):
        with pytest.raises(ArgumentError, match="capacity"):
            model.new_cache(capacity=capacity)


def test_a_capacity_past_max_len_is_cut_to_it():
    lm = TransformerLM(config=_cfg("full", "paper", True))
    assert lm.new_cache(capacity=10**9).self_attn[0].capacity == lm.cfg.max_len
