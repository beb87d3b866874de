"""Lesson 10 (decoding, BLEU): the checks of its exercises.

- ``check_10_1``: Exercise 1 (modified n-gram precision)
- ``check_10_2``: Exercise 2 (brevity penalty)
- ``check_10_3``: Exercise 3 (log-probability of an output)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng

_SENTENCES = [
    ("the cat is on the mat", "the cat sat on the mat"),
    ("a small dog reads a book", "the small dog reads the book"),
    ("the the the the the the the", "the cat is on the mat"),
    ("we do not eat the red bread", "we do not eat red bread"),
    ("bread", "the teacher eats bread"),
    ("one two three four five", "one two three four five six"),
]


@_exercise("Exercise 1 (modified n-gram precision)")
def check_10_1(modified_precision: Callable, pairs: list[tuple[str, str]] = ()) -> None:
    import sacrebleu

    h, r = "the the the the the the the".split(), "the cat is on the mat".split()
    assert tuple(modified_precision(h, r, 1)) == (2, 7), (
        f"got {modified_precision(h, r, 1)} for the classic example; expected (2, 7). "
        "Hint: a hypothesis n-gram can be matched at most as often as it occurs in the reference."
    )
    for hyp, ref in [*_SENTENCES, *pairs]:
        sb = sacrebleu.corpus_bleu([hyp], [[ref]])
        for n in range(1, 5):
            mine = tuple(modified_precision(hyp.split(), ref.split(), n))
            assert mine == (sb.counts[n - 1], sb.totals[n - 1]), (
                f"n = {n}: you give {mine}, sacreBLEU counts "
                f"{(sb.counts[n - 1], sb.totals[n - 1])} for\n  hyp: {hyp}\n  ref: {ref}"
            )


@_exercise("Exercise 2 (brevity penalty)")
def check_10_2(brevity_penalty: Callable) -> None:
    import sacrebleu

    assert brevity_penalty(10, 10) == 1.0 and brevity_penalty(12, 10) == 1.0, (
        "a hypothesis at least as long as the reference is not penalised"
    )
    refs = [r for _, r in _SENTENCES]
    for cut in (1, 2, 3):
        short = [" ".join(x.split()[:-cut]) for x in refs]
        sb = sacrebleu.corpus_bleu(short, [refs])
        mine = brevity_penalty(sb.sys_len, sb.ref_len)
        assert np.isclose(mine, sb.bp), (
            f"BP({sb.sys_len}, {sb.ref_len}) should be {sb.bp:.4f}, you give {mine}; hint: "
            "an exponential of the length ratio, 1 at equal lengths"
        )


@_exercise("Exercise 3 (log-probability of an output)")
def check_10_3(sequence_logprob: Callable) -> None:
    rng = _rng(19)
    eos = 2
    for T, V, scale in [(4, 7, 1.0), (6, 11, 3.0), (1, 5, 1.0), (5, 9, 1000.0)]:
        logits = rng.normal(size=(T, V)) * scale
        out_ids = [int(i) for i in rng.integers(3, V, size=T - 1)]
        logp = F.log_softmax(mt.tensor(logits, dtype="float64"), axis=-1).numpy()
        expected = float(logp[np.arange(T), [*out_ids, eos]].sum())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                mine = float(sequence_logprob(logits, out_ids, eos))
            except RuntimeWarning as w:
                raise AssertionError(f"NumPy warned: {w}; hint: stabilise the exponent") from None
        assert np.isclose(mine, expected, atol=1e-6), (
            f"T={T}, V={V}: you give {mine:.4f}, expected {expected:.4f}. Hint: one log-"
            "probability per row, at that row's target; and the output ends with EOS."
        )
