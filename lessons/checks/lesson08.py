"""Lesson 08 (encoder-decoder): the checks of its exercises.

- ``check_08_1``: Exercise 1 (shift right, for a padded batch)
- ``check_08_2``: Exercise 2 (one step of the self-attention cache)
- ``check_08_3``: Exercise 3 (batched greedy decoding)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt

from ._shared import _array, _exercise, _library_calls, _without_library

_LIBRARY_IDS = (1, 2, 0)  # <bos>, <eos>, <pad>: the ids make_batch writes


def _decoder_io(targets: list[list[int]], bos: int, eos: int, pad: int) -> tuple[np.ndarray, ...]:
    """The reference: (tgt_in, tgt_out) (B, T), T = the longest target + 1, padded with pad."""
    T = max(len(t) for t in targets) + 1
    tgt_in, tgt_out = np.full((len(targets), T), pad), np.full((len(targets), T), pad)
    for b, t in enumerate(targets):
        tgt_in[b, : len(t) + 1] = [bos, *t]
        tgt_out[b, : len(t) + 1] = [*t, eos]
    return tgt_in, tgt_out


def _io_hint(got_in: np.ndarray, got_out: np.ndarray, want_in: np.ndarray,
             want_out: np.ndarray, targets: list[list[int]], eos: int) -> str:  # fmt: skip
    """Where to look, for right-shaped (tgt_in, tgt_out) that differ from the reference."""
    if np.array_equal(got_in, want_out) and np.array_equal(got_out, want_in):
        return "the pair is swapped: tgt_in is what the decoder reads, starting with <bos>"
    library = _decoder_io(targets, *_LIBRARY_IDS)
    if np.array_equal(got_in, library[0]) and np.array_equal(got_out, library[1]):
        return "use the ids bos_id, eos_id and pad_id you are given, not the library's"
    if np.array_equal(got_in, want_in) and np.all(got_out[:, -1] == eos):
        return "each sentence's <eos> comes right after its last word; padding fills the rest"
    if not np.array_equal(got_in, want_in):
        return "tgt_in: what does the decoder read at the very first step, and what after?"
    return "tgt_out: what must the decoder predict after the last word?"


@_exercise("Exercise 1 (shift right, for a padded batch)")
def check_08_1(make_decoder_io: Callable) -> None:
    """(tgt_in, tgt_out) of a padded batch against make_batch (the library's ids) and against
    the same arithmetic with other ids; no call into the library."""
    from minitransformer.data.batching import make_batch

    ids = _LIBRARY_IDS
    batches = [([[8, 9], [4, 5, 6, 7], [10]], ids), ([[5, 6, 7]], ids),
               ([[3], [7, 7, 7]], (11, 12, 13))]  # fmt: skip
    for targets, (bos, eos, pad) in batches:
        want_in, want_out = _decoder_io(targets, bos, eos, pad)
        if (bos, eos, pad) == ids:  # the reference is what the library's batches hold
            b = make_batch([([4], t) for t in targets])
            assert np.array_equal(b.tgt_in, want_in) and np.array_equal(b.tgt_out, want_out)
        where = f"make_decoder_io({targets}, {bos}, {eos}, {pad})"
        got = _without_library(
            make_decoder_io, targets, bos, eos, pad, where=where,
            instead="build the two padded arrays yourself, with NumPy or Python lists",
        )  # fmt: skip
        assert isinstance(got, tuple | list) and len(got) == 2, (
            f"{where}: return the pair (tgt_in, tgt_out), got {type(got).__name__}"
        )
        got_in, got_out = (np.asarray(a) for a in got)
        for name, arr in (("tgt_in", got_in), ("tgt_out", got_out)):
            assert arr.shape == want_in.shape, (
                f"{where}: {name} has shape {arr.shape}, expected (B, T) = {want_in.shape}; "
                "hint: T must hold the longest target plus the one token the shift adds"
            )
        if not (np.array_equal(got_in, want_in) and np.array_equal(got_out, want_out)):
            hint = _io_hint(got_in, got_out, want_in, want_out, targets, eos)
            raise AssertionError(
                f"{where}: expected tgt_in {want_in.tolist()} and tgt_out {want_out.tolist()}, "
                f"got {got_in.tolist()} and {got_out.tolist()}; hint: {hint}"
            )


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """softmax(q kᵀ / scale) v over the last two axes, no mask (float64)."""
    s = q @ np.swapaxes(k, -1, -2) / scale
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def _causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The reference: full causal self-attention over all T positions, (B, H, T, d_k)."""
    T, d_k = q.shape[-2], q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def _step_hint(out: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, t: int) -> str:
    """Where to look, for step t's output (B, H, 1, d_k) that is not causal attention's row t;
    k and v hold positions 0..t."""
    d_k, heads = q.shape[-1], q.shape[1]
    mistakes = [
        (v[:, :, t : t + 1], "the new query attends to every position so far: the cached keys "
                             "and values too, not only its own"),
        (v[:, :, :1], "the new token is the latest position, so every cached key is at or "
                      "before it: nothing is masked in a cached step (a tril of shape (1, t + 1) "
                      "keeps only key 0)"),
        (_attend(q, k, v, np.sqrt(t + 1)), "scale by √d_k, the width of one head's keys, as "
                                           "in the full pass (not by the number of keys)"),
        (_attend(q, k, v, np.sqrt(heads * d_k)), "scale by √d_k, the width of one head's keys "
                                                 "(not of all heads together)"),
        (_attend(q, k, v, 1.0), "the scores are divided by √d_k, as in the full pass"),
    ]  # fmt: skip
    if t > 0:
        before = _attend(q, k[:, :, :t], v[:, :, :t], np.sqrt(d_k))
        first = "the new token's own key and value are among the keys it attends to: append "
        mistakes.insert(0, (before, first + "them to the cache first, then attend"))
    for other, hint in mistakes:
        if out.shape == other.shape and np.allclose(out, other):
            return hint
    return (
        "the new token's query against the keys of positions 0 .. t (the cached ones and its "
        "own), softmax over them, then the weighted sum of their values"
    )


def _cache_hint(mine: np.ndarray, want: np.ndarray, other: np.ndarray) -> str:
    """Where to look, for a returned cache of the right shape that is not positions 0..t."""
    if np.allclose(mine, other):
        return "the key and value caches are swapped"
    if np.allclose(mine, np.concatenate([want[:, :, -1:], want[:, :, :-1]], axis=2)):
        return (
            "keep the positions in order: row j of the cache is position j, the new one last "
            "(a later mask or a sliding window reads it by position)"
        )
    return "the cache after step t holds the keys (values) of positions 0 .. t, in order"


# (B, H, T, d_k, first): several heads and widths, steps first .. T-1, the cache holding
# positions 0 .. first-1 at the first one (from 2 on, the usual mistakes give different outputs)
STEP_SIZES = [(2, 2, 5, 4, 2), (1, 3, 4, 2, 0), (3, 1, 6, 8, 0)]


@_exercise("Exercise 2 (one step of the self-attention cache)")
def check_08_2(cached_attention_step: Callable) -> None:
    """A sequence fed one position at a time, the caches the answer returned passed back in:
    each step's output against full causal attention's row t, the caches against the keys and
    values of positions 0..t in order; float64 inputs (a float32 answer passes), NumPy only."""
    rng = np.random.default_rng(8)
    for B, H, T, d_k, first in STEP_SIZES:
        q, k, v = (rng.standard_normal((B, H, T, d_k)) for _ in range(3))
        full = _causal_attention(q, k, v)  # (B, H, T, d_k)
        k_cache, v_cache = k[:, :, :first], v[:, :, :first]
        for t in range(first, T):
            where = f"cached_attention_step at step {t} (B, H, d_k = {B}, {H}, {d_k})"
            new = (q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1])
            got = _without_library(
                cached_attention_step, *new, k_cache, v_cache, where=where,
                instead="np.concatenate along the positions axis, then lesson 05's attention",
            )  # fmt: skip
            assert isinstance(got, tuple | list) and len(got) == 3, (
                f"{where}: return the triple (out, k_cache, v_cache), got {type(got).__name__}"
            )
            out = _array(got[0], f"{where}: out", "f")
            k_cache = _array(got[1], f"{where}: k_cache", "f")
            v_cache = _array(got[2], f"{where}: v_cache", "f")
            grown = (B, H, t + 1, d_k)
            for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
                if cache.shape == (B, H, t, d_k):
                    raise AssertionError(
                        f"{where}: {name} still has shape {cache.shape}; hint: return the grown "
                        "caches, so that the next step sees this token's key and value"
                    )
                assert cache.shape == grown, (
                    f"{where}: {name} has shape {cache.shape}, expected {grown}; hint: the "
                    "cache grows by one position per step, along the positions axis (axis 2)"
                )
            for name, cache, want, other in (
                ("k_cache", k_cache, k, v),
                ("v_cache", v_cache, v, k),
            ):
                if not np.allclose(cache, want[:, :, : t + 1]):
                    hint = _cache_hint(cache, want[:, :, : t + 1], other[:, :, : t + 1])
                    raise AssertionError(f"{where}: {name} is not positions 0 .. {t}; hint: {hint}")
            assert out.shape == (B, H, 1, d_k), (
                f"{where}: out has shape {out.shape}, expected {(B, H, 1, d_k)}: the new "
                "position's output for every head"
            )
            if not np.allclose(out, full[:, :, t : t + 1], rtol=1e-5, atol=1e-6):
                hint = _step_hint(out, *new[:1], k[:, :, : t + 1], v[:, :, : t + 1], t)
                raise AssertionError(
                    f"{where}: out differs from row {t} of full causal attention over the "
                    f"sequence; hint: {hint}"
                )


class _ScriptedModel:
    """A stand-in for a Transformer whose next-token scores follow a script per sentence.

    ``script[b][t]`` is the best token for sentence b at step t. After its EOS a sentence's
    script goes on with ordinary tokens, so a loop that keeps appending after EOS shows it. At
    some steps <pad> or <bos> score even higher (a decoder must never emit them). ``fed``
    records the tokens fed in at each step.
    """

    def __init__(self, script: list[list[int]], V: int = 12):
        self.cfg = mt.TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V)
        self.script, self.V, self.fed = script, V, []

    def encode(self, src):
        return mt.tensor(np.zeros((len(src), 1, 2)))

    def new_cache(self):
        return {"step": 0}

    def decode(self, tgt_in, memory, src, cache=None):
        t = cache["step"]
        cache["step"] += 1
        self.fed.append(np.asarray(tgt_in)[:, -1].tolist())
        logits = np.zeros((len(self.script), 1, self.V))
        for b, row in enumerate(self.script):
            logits[b, 0, row[min(t, len(row) - 1)]] = 5.0
            if (t + b) % 3 == 0:
                logits[b, 0, self.cfg.pad_id] = 9.0
            if (t + b) % 4 == 1:
                logits[b, 0, self.cfg.bos_id] = 8.0
        return mt.tensor(logits)

    def __call__(self, *a, **k):  # pragma: no cover - the exercise must not train or score
        raise AssertionError("greedy_batch should use encode / new_cache / decode")


@_exercise("Exercise 3 (batched greedy decoding)")
def check_08_3(greedy_batch: Callable, model: Any = None, src: Any = None) -> None:
    """A scripted model (stops, EOS handling, what is fed after EOS); then, given a trained
    ``model`` and a padded ``src``, the same outputs as ``greedy_decode``."""
    cfg = mt.TransformerConfig.preset("tiny", src_vocab=12, tgt_vocab=12)
    eos, pad = cfg.eos_id, cfg.pad_id
    script = [
        [5, 6, eos, 7, 8, 9, 10, 11, 7, 7],  # done after 3 steps, then keeps "talking"
        [7, 8, 9, 10, eos, 5, 5, 5, 5, 5],  # done after 5 steps
        [eos, 9, 9, 9, 9, 9, 9, 9, 9, 9],  # empty output
    ]
    stub = _ScriptedModel(script)
    src_stub = np.full((3, 4), 5)
    called: set[str] = set()
    try:
        out, _ = _library_calls(greedy_batch, stub, src_stub, 9, record=called)
    finally:  # also when the library's decoder stumbled on the scripted stand-in
        decode = sorted(c for c in called if c.startswith("minitransformer.decode."))
        if decode:
            raise AssertionError(
                f"greedy_batch calls the library's decoding ({', '.join(decode)}): this "
                "exercise writes that loop; hint: use only model.encode, model.new_cache and "
                "model.decode"
            )
    expected = [[5, 6], [7, 8, 9, 10], []]
    assert len(out) == 3, f"one output list per sentence: expected 3, got {len(out)}"
    got = [[int(i) for i in o] for o in out]
    for b in range(3):
        assert got[b] == expected[b], (
            f"scripted sentence {b}: expected {expected[b]}, got {got[b]}; hint: a sentence's "
            "output ends at its first <eos> (nothing after it, and no <pad>/<bos> anywhere)"
        )
    assert len(stub.fed) == 5, (
        f"decode ran {len(stub.fed)} steps; all sentences were done after 5: stop as soon as "
        "every sentence has produced <eos>"
    )
    for t, fed in enumerate(stub.fed[1:], start=1):
        for b, stop in enumerate([2, 4, 0]):
            # the step right after EOS may feed the EOS itself; from then on only <pad>
            if t > stop + 1 or (t == stop + 1 and fed[b] != eos):
                assert fed[b] == pad, (
                    f"step {t}: sentence {b} finished at step {stop} but was fed {fed[b]}, "
                    "not <pad>; hint: keep a 'done' flag per sentence"
                )
    if model is not None and src is not None:
        from minitransformer.decode import greedy_decode

        want = greedy_decode(model, src, max_len=10)
        mine = greedy_batch(model, src, 10)
        assert [[int(i) for i in m] for m in mine] == want, (
            "on the trained model your outputs differ from greedy_decode's"
        )
