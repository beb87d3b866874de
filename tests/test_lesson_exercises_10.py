"""Lesson 10 (decoding, BLEU), issue 28: section 3's ``clipped_matches`` and its brevity
penalty ``1 if c >= r else exp(1 - r/c)`` answered exercises 1 and 2 verbatim. They now ask
for BLEU against several references (Papineni et al.'s setting):

- 10.1: clip each n-gram by its largest count in any one reference. The best single
  reference's total, the sum over references, the first reference alone, no clipping, a wrong
  total and sacreBLEU itself fail, each with its hint; ``collections.Counter`` passes.
- 10.2: r sums Papineni's best match lengths (the closest reference length; a tie goes to
  the shorter, which the exercise leaves for the check's hint to teach, issue 46 row 34). The
  shortest, the longest, the first, the mean, a tie to the longer (also Python's min in list
  order), a mean of per-sentence penalties and sacreBLEU fail, each with its hint.
- 10.3 says "NumPy only": the library's ``cross_entropy`` and ``log_softmax`` now fail.
"""

from __future__ import annotations

import importlib
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from lesson_notebooks import checks
from lesson_notebooks import hint_of as _fails

import minitransformer as mt
import minitransformer.functional as F

s10 = importlib.import_module("solutions.lesson10")
NOTEBOOK = Path(__file__).resolve().parents[1] / "lessons" / "10_decoding_translation.ipynb"


# ------------------------------------------------------------------ 10.1
def _grams(words, n):
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _precision(clip):
    def answer(hyp, refs, n):
        h, per_ref = _grams(hyp, n), [_grams(r, n) for r in refs]
        return clip(h, per_ref), max(len(hyp) - n + 1, 0)

    return answer


def _counter(hyp, refs, n):  # the valid Counter form: the union of Counters is the max
    clip = Counter()
    for r in refs:
        clip |= _grams(r, n)
    return sum((_grams(hyp, n) & clip).values()), max(len(hyp) - n + 1, 0)


def _sacrebleu_counts(hyp, refs, n):
    b = sacrebleu.corpus_bleu([" ".join(hyp)], [[" ".join(r)] for r in refs])
    return b.counts[n - 1], b.totals[n - 1]


PRECISION_WRONG = {
    "best single reference": (
        _precision(lambda h, rs: max(sum((h & r).values()) for r in rs)),
        "kept the best total",
    ),
    "sum over references": (
        _precision(lambda h, rs: sum(min(k, sum(r[g] for r in rs)) for g, k in h.items())),
        "not the sum",
    ),
    "first reference": (_precision(lambda h, rs: sum((h & rs[0]).values())), "not only the first"),
    "unclipped": (
        _precision(lambda h, rs: sum(k for g, k in h.items() if any(g in r for r in rs))),
        "at most as often",
    ),
    "total of matches": (lambda hyp, refs, n: (_counter(hyp, refs, n)[0],) * 2, "matched or not"),
    "sacreBLEU": (_sacrebleu_counts, "calls the library"),
}


@pytest.mark.parametrize("name", PRECISION_WRONG)
def test_10_1_each_mistake_has_its_hint(name):
    answer, hint = PRECISION_WRONG[name]
    assert hint in _fails(checks.check_10_1, answer)


def test_10_1_accepts_counters():
    assert checks.check_10_1(_counter) == checks.CORRECT


# ------------------------------------------------------------------ 10.2
def _bp(c, r):
    return 1.0 if c >= r else math.exp(1 - r / c)


def _penalty(pick):
    return lambda hyp_lens, ref_lens: _bp(
        sum(hyp_lens), sum(pick(h, lens) for h, lens in zip(hyp_lens, ref_lens, strict=True))
    )


def _sacrebleu_bp(hyp_lens, ref_lens):
    hyps = [" ".join("w" * h) for h in hyp_lens]
    width = max(len(r) for r in ref_lens)
    streams = [
        [" ".join("w" * (r[k] if k < len(r) else r[0])) for r in ref_lens] for k in range(width)
    ]
    return sacrebleu.corpus_bleu(hyps, streams).bp


BP_WRONG = {
    "shortest": (_penalty(lambda h, lens: min(lens)), "not the shortest"),
    "longest": (_penalty(lambda h, lens: max(lens)), "not the longest"),
    "first": (_penalty(lambda h, lens: lens[0]), "not the first"),
    "mean": (_penalty(lambda h, lens: np.mean(lens)), "not their mean"),
    "tie to the longer": (
        _penalty(lambda h, lens: max(lens, key=lambda r: (-abs(r - h), r))),
        "takes the shorter one on a tie",
    ),
    "closest in list order": (
        _penalty(lambda h, lens: min(lens, key=lambda r: abs(r - h))),
        "takes the shorter one on a tie",
    ),
    "per sentence": (
        lambda hl, rl: float(
            np.mean(
                [_bp(h, min(x, key=lambda r: (abs(r - h), r))) for h, x in zip(hl, rl, strict=True)]
            )
        ),
        "one number for the corpus",
    ),
    "sacreBLEU": (_sacrebleu_bp, "calls the library"),
}


@pytest.mark.parametrize("name", BP_WRONG)
def test_10_2_each_mistake_has_its_hint(name):
    answer, hint = BP_WRONG[name]
    assert hint in _fails(checks.check_10_2, answer)


# ------------------------------------------------------------------ 10.3
def _library_logprob(logits, out_ids, eos):
    t = np.array([[*out_ids, eos]])
    return -F.cross_entropy(mt.tensor(logits[None]), t, reduction="sum").item()


def _log_softmax(logits, out_ids, eos):
    logp = F.log_softmax(mt.tensor(logits), axis=-1).numpy()
    return float(logp[np.arange(len(out_ids) + 1), [*out_ids, eos]].sum())


@pytest.mark.parametrize("answer", [_library_logprob, _log_softmax], ids=["ce", "log_softmax"])
def test_10_3_the_library_fails(answer):
    assert "calls the library" in _fails(checks.check_10_3, answer)


def test_10_3_the_solution_passes():
    assert checks.check_10_3(s10.sequence_logprob) == checks.CORRECT


def test_10_2_the_statement_names_the_goal_not_the_tie_rule():
    """Issue 46 row 34: the exercise states Papineni's goal (the best match length) and leaves
    the tie rule for the learner to find from the check's hint."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    text = next(
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "markdown" and "**2. The brevity penalty" in "".join(c["source"])
    )
    assert "best match length" in text
    assert "on a tie" not in text and "the shorter one" not in text and "(on a" not in text
