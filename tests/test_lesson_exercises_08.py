"""Lesson 08 (encoder-decoder), issue 28.

- 08.1: "tgt_in = <bos> + target, tgt_out = target + <eos>" is the text of the section on
  teacher forcing, so the exercise now asks for a padded batch of them: a swapped pair, <eos>
  after the padding, a T without room for the shift, hard-coded ids and ``make_batch`` itself
  fail (each with its hint); lists and other integer dtypes pass.
- 08.2 says "Use NumPy only": the library's ``target_mask`` now fails.
- 08.3: calling the library's ``greedy_decode`` fails with a hint that names it (not only the
  stand-in model's missing attribute).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from lesson_notebooks import checks
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


def test_08_2_the_library_mask_fails():
    assert "calls the library" in _fails(
        checks.check_08_2, lambda ids, pad: mt.nn.target_mask(ids, pad)
    )


def test_08_3_greedy_decode_fails_with_its_name():
    message = _fails(checks.check_08_3, lambda m, src, n: greedy_decode(m, src, max_len=n))
    assert "greedy_decode" in message and "model.decode" in message
