"""Lesson 10 (decoding, BLEU): the checks of its exercises.

- ``check_10_1``: Exercise 1 (modified n-gram precision against several references)
- ``check_10_2``: Exercise 2 (brevity penalty with several references)
- ``check_10_3``: Exercise 3 (log-probability of an output)

See the package docstring (``checks/__init__.py``) for what a check does.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

import minitransformer as mt
import minitransformer.functional as F

from ._shared import _exercise, _rng, _without_library


def _sacrebleu() -> tuple[str, ...]:
    """sacreBLEU's folder: exercises 1 and 2 are what it computes, so a call into it fails."""
    import sacrebleu

    return (str(Path(sacrebleu.__file__).resolve().parent),)


# (hypothesis, its references): one to three references each; the multi-reference ones are
# chosen so that clipping by the best single reference, by the sum over references or by the
# first reference alone each give another count than BLEU's
_SENTENCES = [
    ("the cat is on the mat", ["the cat sat on the mat"]),
    ("the the the the the the the", ["the cat is on the mat", "there is a cat on the mat"]),
    ("the the cat sat on the the mat", ["the cat the mat", "a cat sat on the mat",
                                        "on the mat sat the cat"]),
    ("a small dog reads a book", ["the small dog reads the book", "a dog reads",
                                  "a small book"]),
    ("we do not eat the red bread", ["we do not eat red bread", "we eat no red bread"]),
    ("bread", ["the teacher eats bread"]),
    ("one two three four five", ["one two three four five six", "five four three two one"]),
]  # fmt: skip


def _counts(words: list[str], n: int) -> dict[tuple[str, ...], int]:
    c: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - n + 1):
        g = tuple(words[i : i + n])
        c[g] = c.get(g, 0) + 1
    return c


def _precision_hint(mine: tuple, hyp: list[str], refs: list[list[str]], n: int) -> str:
    """Where to look, for a wrong (matched, total) against several references."""
    h = _counts(hyp, n)
    per_ref = [_counts(r, n) for r in refs]
    total = max(len(hyp) - n + 1, 0)
    if mine[1] != total:
        return "total counts every n-gram of the hypothesis, matched or not"
    matched = {
        "best": max(sum(min(k, c.get(g, 0)) for g, k in h.items()) for c in per_ref),
        "sum": sum(min(k, sum(c.get(g, 0) for c in per_ref)) for g, k in h.items()),
        "first": sum(min(k, per_ref[0].get(g, 0)) for g, k in h.items()),
        "unclipped": sum(k for g, k in h.items() if any(g in c for c in per_ref)),
    }
    hints = {
        "best": "you clipped against each reference and kept the best total; the clip is "
                "per n-gram: each n-gram may use the reference that has it most often",
        "sum": "an n-gram's clip is its count in one reference (the one with most), not the "
               "sum over the references",
        "first": "every reference counts, not only the first",
        "unclipped": "a hypothesis n-gram is matched at most as often as a reference has it",
    }  # fmt: skip
    for name, value in matched.items():
        if mine[0] == value:
            return hints[name]
    return "count each n-gram of the hypothesis, and clip it by its largest count in a reference"


@_exercise("Exercise 1 (modified n-gram precision)")
def check_10_1(modified_precision: Callable, pairs: list[tuple[str, str]] = ()) -> None:
    """(matched, total) against sacreBLEU's counts for one sentence and its references;
    ``pairs`` adds (hypothesis, reference) strings with one reference each."""
    import sacrebleu

    cases = [*_SENTENCES, *((hyp, [ref]) for hyp, ref in pairs)]
    for hyp, refs in cases:
        sb = sacrebleu.corpus_bleu([hyp], [[r] for r in refs])
        for n in range(1, 5):
            words = [r.split() for r in refs]
            where = f"modified_precision(hyp, refs, {n})"
            got = _without_library(
                modified_precision, hyp.split(), words, n, where=where,
                instead="count n-grams with a dict (or collections.Counter)", also=_sacrebleu(),
            )  # fmt: skip
            mine = tuple(int(x) for x in got)
            want = (sb.counts[n - 1], sb.totals[n - 1])
            assert mine == want, (
                f"n = {n}: you give {mine}, sacreBLEU counts {want} for\n  hyp: {hyp}\n  refs: "
                f"{refs}\nHint: {_precision_hint(mine, hyp.split(), words, n)}"
            )


def _closest(c: int, lens: list[int]) -> int:
    return min(lens, key=lambda r: (abs(r - c), r))


def _bp(c: int, r: int) -> float:
    return 1.0 if c >= r else math.exp(1 - r / c) if c else 0.0


def _bp_hint(mine: float, hyp_lens: list[int], ref_lens: list[list[int]]) -> str:
    """Where to look, for a wrong corpus brevity penalty."""
    c = sum(hyp_lens)
    pairs = list(zip(hyp_lens, ref_lens, strict=True))
    rules = {
        "the closest reference, not the shortest": sum(min(r) for r in ref_lens),
        "two references are equally close to one hypothesis (one longer, one shorter) and "
        "you took the longer: BLEU's best match length takes the shorter one on a tie "
        "(sacreBLEU and NIST's mteval do)": sum(
            max(lens, key=lambda r, h=h: (-abs(r - h), r)) for h, lens in pairs
        ),
        "the closest reference, not the longest": sum(max(r) for r in ref_lens),
        "each sentence may have several references: take the one closest in length, not "
        "the first": sum(r[0] for r in ref_lens),
        "the length of one reference (the closest), not their mean": sum(
            np.mean(r) for r in ref_lens
        ),
    }
    for hint, r in rules.items():
        if np.isclose(mine, _bp(c, r)):
            return hint
    if np.isclose(mine, np.mean([_bp(h, _closest(h, lens)) for h, lens in pairs])):
        return "BP is one number for the corpus, from the totals c and r, not a mean over sentences"
    return "add the closest reference lengths up to r, the hypothesis lengths to c, then BP"


@_exercise("Exercise 2 (brevity penalty)")
def check_10_2(brevity_penalty: Callable) -> None:
    """BP(hyp_lens, ref_lens) against sacreBLEU's bp on corpora of hypotheses with one to
    three references each (the best match length: the closest reference length; a tie, which
    the exercise leaves to the learner, goes to the shorter)."""
    import sacrebleu

    corpora = [  # (hypotheses, references per sentence)
        (["a b c", "a b c d e"], [["a b c d"], ["a b c d e f"]]),
        (["a b c", "a b"], [["a b c d e", "a b", "a b c d"], ["a b c d", "a b c d e f g"]]),
        (["a b c d", "a b c"], [["a b c d e f", "a b", "a b c d e"], ["a", "a b c d e"]]),
        (["a b c d e", "a b"], [["a b c d e f", "a b c d"], ["a b c", "a"]]),
        (["a b c", "a b c"], [["a b c"], ["a b", "a b c d"]]),
        (["a b c d e", "a b c"], [["a b", "a b c d e f"], ["a b c d e"]]),
    ]
    for hyps, refs in corpora:
        width = max(len(r) for r in refs)
        streams = [[r[k] if k < len(r) else r[0] for r in refs] for k in range(width)]
        sb = sacrebleu.corpus_bleu(hyps, streams)
        hyp_lens = [len(h.split()) for h in hyps]
        ref_lens = [[len(x.split()) for x in r] for r in refs]
        where = f"brevity_penalty({hyp_lens}, {ref_lens})"
        mine = _without_library(
            brevity_penalty, hyp_lens, ref_lens, where=where,
            instead="the lengths are plain ints: min, sum and math.exp do it", also=_sacrebleu(),
        )  # fmt: skip
        mine = float(np.asarray(mine).reshape(()))
        assert np.isclose(mine, sb.bp), (
            f"{where} should be {sb.bp:.4f} (c = {sb.sys_len}, r = {sb.ref_len}), you give "
            f"{mine:.4f}; hint: {_bp_hint(mine, hyp_lens, ref_lens)}"
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
                answer = _without_library(
                    sequence_logprob, logits, out_ids, eos,
                    where="sequence_logprob",
                    instead="a log-softmax in NumPy: the row max, exp, sum, log",
                )  # fmt: skip
                mine = float(answer)
            except RuntimeWarning as w:
                raise AssertionError(f"NumPy warned: {w}; hint: stabilise the exponent") from None
        assert np.isclose(mine, expected, atol=1e-6), (
            f"T={T}, V={V}: you give {mine:.4f}, expected {expected:.4f}. Hint: one log-"
            "probability per row, at that row's target; and the output ends with EOS."
        )
