"""Reference solutions, lesson 10 (decoding and BLEU)."""

import math

import numpy as np


# Exercise 1: clipped n-gram counts
def modified_precision(hyp, ref, n):
    def counts(words):
        c = {}
        for i in range(len(words) - n + 1):
            g = tuple(words[i : i + n])
            c[g] = c.get(g, 0) + 1
        return c

    ref_c = counts(ref)
    matched = sum(min(k, ref_c.get(g, 0)) for g, k in counts(hyp).items())
    return matched, max(len(hyp) - n + 1, 0)


# Exercise 2
def brevity_penalty(c, r):
    if c == 0:
        return 0.0
    return 1.0 if c >= r else math.exp(1 - r / c)


# Exercise 3
def sequence_logprob(logits, out_ids, eos_id):
    targets = [*out_ids, eos_id]
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(logp[np.arange(len(targets)), targets].sum())
