"""Reference solutions, lesson 17 (the substrate: the decoder-only language model)."""

import numpy as np


# Exercise 1: divide the logits by τ; with top_k, every logit below the k-th largest of its
# row becomes -inf (exp gives it probability 0); then a softmax over the last axis that
# subtracts each row's maximum first, so exp never overflows (lesson 03) — logits of ±1000 or
# a τ of 0.01 are ordinary inputs here. The -inf of removed tokens stays -inf: exp(-inf) = 0.
# The logits are only read: the answer builds new arrays and never writes into its argument.
def sampling_probs(logits, temperature, top_k=None):
    z = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None:
        kth = np.sort(z, axis=-1)[..., -top_k, None]  # (..., 1): the k-th largest per row
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# Exercise 2: window i starts at token i·stride and reads block_size + 1 tokens of the
# stream: its inputs are the first block_size, its targets the last block_size (the inputs
# shifted by one: the target at each position is the token after it). A window fits while
# its last target exists, start + block_size + 1 <= len(tokens), so the starts are
# range(0, len(tokens) - block_size, stride) — rasbt's GPTDatasetV1 loop.
def sliding_windows(tokens, block_size, stride):
    tokens = np.asarray(tokens)
    starts = range(0, len(tokens) - block_size, stride)
    inputs = np.array([tokens[s : s + block_size] for s in starts]).reshape(-1, block_size)
    targets = np.array([tokens[s + 1 : s + block_size + 1] for s in starts])
    return inputs, targets.reshape(-1, block_size)


# Exercise 3: the T new queries are the tokens at positions p = offset .. offset + T - 1;
# the keys are every position so far, 0 .. offset + T - 1. The query at p reads the last
# `window` positions up to itself, its own included: p - window < j <= p.
def sliding_window_mask(T, offset, window):
    keys = np.arange(offset + T)[None, :]  # (1, offset + T)
    queries = offset + np.arange(T)[:, None]  # (T, 1)
    return (keys <= queries) & (keys > queries - window)  # (T, offset + T) bool
