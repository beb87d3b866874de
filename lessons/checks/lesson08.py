"""Lesson 08 (encoder-decoder): the checks of its exercises.

- ``check_08_1``: Exercise 1 (shift right, for a padded batch)
- ``check_08_2``: Exercise 2 (decoder self-attention mask)
- ``check_08_3``: Exercise 3 (batched greedy decoding)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import minitransformer as mt

from ._shared import _exercise, _library_calls, _without_library

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
            make_decoder_io, [list(t) for t in targets], bos, eos, pad, where=where,
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


@_exercise("Exercise 2 (decoder self-attention mask)")
def check_08_2(decoder_self_mask: Callable) -> None:
    ids = np.array([[1, 5, 6, 7, 0, 0], [1, 8, 0, 0, 0, 0], [1, 4, 5, 6, 7, 8], [0, 0, 0, 0, 0, 0]])
    mine = _without_library(
        decoder_self_mask, ids.copy(), 0, where="decoder_self_mask",
        instead="build it with NumPy from the ids: np.tril, comparisons, broadcasting",
    )  # fmt: skip
    mine = np.asarray(mine)
    expected = mt.nn.target_mask(ids, 0)
    assert mine.shape == expected.shape, (
        f"expected shape {expected.shape} = (B, 1, T, T), got {mine.shape}"
    )
    assert mine.dtype == bool, f"the mask must be bool, got {mine.dtype}"
    bad = np.argwhere(mine != expected)
    assert bad.size == 0, (
        f"{len(bad)} entries differ, first at (b, 0, query, key) = {tuple(bad[0])}; "
        "hint: two conditions, one about positions and one about which token is padding"
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
