"""Lesson 08 (encoder-decoder), issue 28.

- 08.1: "tgt_in = <bos> + target, tgt_out = target + <eos>" is the text of the section on
  teacher forcing, so the exercise now asks for a padded batch of them: a swapped pair, <eos>
  after the padding, a T without room for the shift, hard-coded ids and ``make_batch`` itself
  fail (each with its hint); lists and other integer dtypes pass.
- 08.2 (issue 46) no longer asks for the decoder's self-attention mask (a tril mask, the skill
  of exercise 05.3) but for one step of the self-attention cache, which the lesson runs inside
  ``model.decode(..., cache)`` without showing: attending before appending, attending to the
  new key only, a tril mask on the one query, a wrong scale, caches not grown, prepended or
  swapped and a library call each get their own hint; a loop over heads, np.append, lists and
  float32 pass; nothing above the exercise concatenates a cache.
- 08.1 passes the target lists themselves (no copies): an answer that appends <eos> to the
  caller's lists fails (the inputs guard of ``checks/_inputs.py``).
- 08.3: calling the library's ``greedy_decode`` fails with a hint that names it (not only the
  stand-in model's missing attribute).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import LESSONS, checks, code_before, markdown_cells
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
from minitransformer.data.batching import make_batch
from minitransformer.decode import greedy_decode

s8 = importlib.import_module("solutions.lesson08")


def _eos_after_padding(targets, bos, eos, pad):
    tgt_in, _ = s8.make_decoder_io(targets, bos, eos, pad)
    T = tgt_in.shape[1]
    tgt_out = np.array([[*t, *[pad] * (T - 1 - len(t)), eos] for t in targets])
    return tgt_in, tgt_out


def _no_room(targets, bos, eos, pad):  # padded to the longest target: the shift falls off
    T = max(len(t) for t in targets)
    rows_in = [[bos, *t][:T] + [pad] * (T - len(t) - 1) for t in targets]
    rows_out = [[*t, eos][:T] + [pad] * (T - len(t) - 1) for t in targets]
    return np.array(rows_in), np.array(rows_out)


def _hard_coded(targets, bos, eos, pad):  # the library's ids whatever is passed
    return s8.make_decoder_io(targets, 1, 2, 0)


def _with_make_batch(targets, bos, eos, pad):
    b = make_batch([([4], t) for t in targets])
    return b.tgt_in, b.tgt_out


IO_WRONG = {
    "swapped": (lambda *a: s8.make_decoder_io(*a)[::-1], "swapped"),
    "eos after the padding": (_eos_after_padding, "right after its last word"),
    "no room for the shift": (_no_room, "the one token the shift adds"),
    "hard-coded ids": (_hard_coded, "you are given"),
    "make_batch": (_with_make_batch, "calls the library"),
    "one array": (lambda *a: s8.make_decoder_io(*a)[0], "the pair"),
}


@pytest.mark.parametrize("name", IO_WRONG)
def test_08_1_each_mistake_has_its_hint(name):
    answer, hint = IO_WRONG[name]
    assert hint in _fails(checks.check_08_1, answer)


@pytest.mark.parametrize(
    "answer",
    [
        s8.make_decoder_io,
        lambda *a: tuple(x.tolist() for x in s8.make_decoder_io(*a)),
        lambda *a: tuple(x.astype(np.int32) for x in s8.make_decoder_io(*a)),
    ],
    ids=["arrays", "lists", "int32"],
)
def test_08_1_accepts_valid_forms(answer):
    assert checks.check_08_1(answer) == checks.CORRECT


def test_the_library_ids_are_make_batchs():
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=20, tgt_vocab=20)
    assert checks.lesson08._LIBRARY_IDS == (cfg.bos_id, cfg.eos_id, cfg.pad_id)


def _appends_eos(targets, bos, eos, pad):  # writes into the caller's lists
    for t in targets:
        t.append(eos)
    T = max(len(t) for t in targets)
    tgt_in = np.array([[bos, *t[:-1]] + [pad] * (T - len(t)) for t in targets])
    tgt_out = np.array([t + [pad] * (T - len(t)) for t in targets])
    return tgt_in, tgt_out


def test_08_1_an_answer_that_appends_to_the_callers_lists_fails():
    assert "in place" in _fails(checks.check_08_1, _appends_eos)


# ------------------------------------------------------------------ 08.2: the cache step
NOTEBOOK = LESSONS / "08_encoder_decoder.ipynb"


def _attend(q, k, v, scale=None, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / (np.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) @ v


def _grown(k, v, kc, vc):
    return np.concatenate([kc, k], axis=2), np.concatenate([vc, v], axis=2)


def _attends_before_appending(q, k, v, kc, vc):
    out = _attend(q, kc, vc) if kc.shape[2] else v
    return (out, *_grown(k, v, kc, vc))


def _own_key_only(q, k, v, kc, vc):
    return (v, *_grown(k, v, kc, vc))


def _tril_on_one_query(q, k, v, kc, vc):
    K, V = _grown(k, v, kc, vc)
    return _attend(q, K, V, mask=np.tril(np.ones((1, K.shape[2]), dtype=bool))), K, V


def _scaled(scale):
    def answer(q, k, v, kc, vc):
        K, V = _grown(k, v, kc, vc)
        return _attend(q, K, V, scale=scale(q, K)), K, V

    return answer


def _prepended(q, k, v, kc, vc):
    K, V = np.concatenate([k, kc], axis=2), np.concatenate([v, vc], axis=2)
    return _attend(q, K, V), K, V


def _not_grown(q, k, v, kc, vc):
    K, V = _grown(k, v, kc, vc)
    return _attend(q, K, V), kc, vc


def _swapped(q, k, v, kc, vc):
    out, K, V = s8.cached_attention_step(q, k, v, kc, vc)
    return out, V, K


def _library_softmax(q, k, v, kc, vc):
    K, V = _grown(k, v, kc, vc)
    scores = mt.tensor(q @ np.swapaxes(K, -1, -2) / np.sqrt(q.shape[-1]))
    return mt.functional.softmax(scores).numpy() @ V, K, V


def _scales_q_in_place(q, k, v, kc, vc):
    q /= np.sqrt(q.shape[-1])
    K, V = _grown(k, v, kc, vc)
    return _attend(q, K, V, scale=1.0), K, V


STEP_WRONG = {
    "attends before appending": (_attends_before_appending, "append them to the cache first"),
    "its own key only": (_own_key_only, "the cached keys and values too"),
    "a tril on the one query": (_tril_on_one_query, "nothing is masked in a cached step"),
    "scaled by the number of keys": (_scaled(lambda q, K: np.sqrt(K.shape[2])), "number of keys"),
    "scaled by all heads' width": (
        _scaled(lambda q, K: np.sqrt(q.shape[1] * q.shape[-1])),
        "not of all heads together",
    ),
    "not scaled": (_scaled(lambda q, K: 1.0), "divided by √d_k"),
    "prepended": (_prepended, "keep the positions in order"),
    "caches not grown": (_not_grown, "return the grown caches"),
    "caches swapped": (_swapped, "swapped"),
    "the library's softmax": (_library_softmax, "calls the library"),
    "scales q in place": (_scales_q_in_place, "in place"),
    "one array": (lambda *a: s8.cached_attention_step(*a)[0], "the triple"),
}


@pytest.mark.parametrize("name", STEP_WRONG)
def test_08_2_each_mistake_has_its_hint(name):
    answer, hint = STEP_WRONG[name]
    assert hint in _fails(checks.check_08_2, answer)


def _step_loop_over_heads(q, k, v, kc, vc):
    K, V = np.append(kc, k, axis=2), np.append(vc, v, axis=2)
    out = np.zeros_like(q)
    for b, h in np.ndindex(q.shape[0], q.shape[1]):
        s = K[b, h] @ q[b, h, 0] / np.sqrt(q.shape[-1])
        w = np.exp(s - s.max())
        out[b, h, 0] = w / w.sum() @ V[b, h]
    return out, K, V


def _step_lists_and_float32(q, k, v, kc, vc):
    out, K, V = s8.cached_attention_step(q, k, v, kc, vc)
    return [out.tolist(), K.astype(np.float32), V.astype(np.float32)]


@pytest.mark.parametrize(
    "answer",
    [s8.cached_attention_step, _step_loop_over_heads, _step_lists_and_float32],
    ids=["solution", "loop over heads, np.append", "a list, float32 caches"],
)
def test_08_2_accepts_valid_forms(answer):
    assert checks.check_08_2(answer) == checks.CORRECT


def test_08_2_the_solution_is_the_librarys_cached_step():
    """The solution, fed one layer's own projections one position at a time, gives what the
    library's cached self-attention gives (and full causal attention, the check's reference)."""
    from minitransformer.nn.attention import KVCache

    rng = np.random.default_rng(3)
    B, D, h, T = 2, 8, 2, 5
    layer = mt.nn.MultiHeadAttention(D, h)
    layer.to(dtype="float64")
    x = rng.standard_normal((B, T, D))

    def heads(a):  # (B, T, D) -> (B, H, T, d_k)
        return a.reshape(B, -1, h, D // h).transpose(0, 2, 1, 3)

    with mt.no_grad():
        q, k, v = (heads(lin(mt.tensor(x)).numpy()) for lin in (layer.w_q, layer.w_k, layer.w_v))
        full = layer(mt.tensor(x), mt.tensor(x), mt.tensor(x), mt.nn.causal_mask(T)).numpy()
        cache, library = KVCache(), []
        for t in range(T):
            xt = mt.tensor(x[:, t : t + 1])
            library.append(layer(xt, xt, xt, None, cache).numpy())
    kc, vc, mine = np.zeros((B, h, 0, D // h)), np.zeros((B, h, 0, D // h)), []
    for t in range(T):
        out, kc, vc = s8.cached_attention_step(q[:, :, t : t + 1], k[:, :, t : t + 1],
                                               v[:, :, t : t + 1], kc, vc)  # fmt: skip
        merged = out.transpose(0, 2, 1, 3).reshape(B, 1, D)
        mine.append(merged @ layer.w_o.weight.numpy() + layer.w_o.bias.numpy())
    assert np.allclose(np.concatenate(mine, axis=1), np.concatenate(library, axis=1))
    assert np.allclose(np.concatenate(mine, axis=1), full)


def test_08_2_nothing_above_builds_a_cache_step():
    code = code_before(NOTEBOOK, "cached_attention_step")
    # code above stacks logits (np.concatenate of (1, V) rows), never keys along positions
    for giveaway in ("axis=2", "axis=-2", "np.append(", "F.concat(", "k_cache", "v_cache"):
        assert giveaway not in code, giveaway
    text = "\n".join(markdown_cells(NOTEBOOK))
    before = text[: text.index("### Exercise 2")]
    for giveaway in ("nothing is masked", "needs no mask", "append them"):
        assert giveaway not in before, giveaway


def test_08_3_greedy_decode_fails_with_its_name():
    message = _fails(checks.check_08_3, lambda m, src, n: greedy_decode(m, src, max_len=n))
    assert "greedy_decode" in message and "model.decode" in message
