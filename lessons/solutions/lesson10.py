"""Reference solutions, lesson 10 (decoding and BLEU)."""

import math

import numpy as np


# Exercise 1: clipped n-gram counts against several references: each hypothesis n-gram is
# matched at most as often as it occurs in the reference that has it most often
def modified_precision(hyp, refs, n):
    def counts(words):
        c = {}
        for i in range(len(words) - n + 1):
            g = tuple(words[i : i + n])
            c[g] = c.get(g, 0) + 1
        return c

    ref_counts = [counts(r) for r in refs]
    clip = {g: max(c.get(g, 0) for c in ref_counts) for g in counts(hyp)}
    matched = sum(min(k, clip[g]) for g, k in counts(hyp).items())
    return matched, max(len(hyp) - n + 1, 0)


# Exercise 2: r sums, per sentence, the reference length closest to the hypothesis's (a tie
# goes to the shorter); c sums the hypotheses' lengths; BP = 1 if c >= r else exp(1 - r/c)
def brevity_penalty(hyp_lens, ref_lens):
    c = sum(hyp_lens)
    pairs = zip(hyp_lens, ref_lens, strict=True)
    r = sum(min(lens, key=lambda x, h=h: (abs(x - h), x)) for h, lens in pairs)
    if c == 0:
        return 0.0
    return 1.0 if c >= r else math.exp(1 - r / c)


# Exercise 3
def sequence_logprob(logits, out_ids, eos_id):
    targets = [*out_ids, eos_id]
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(logp[np.arange(len(targets)), targets].sum())
