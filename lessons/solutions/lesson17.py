"""Reference solutions, lesson 17 (the substrate: the decoder-only language model)."""

import numpy as np


# Exercise 1: divide the logits by τ; with top_k, every logit below the k-th largest of its
# row becomes -inf (exp gives it probability 0); then a softmax over the last axis that
# subtracts each row's maximum first, so exp never overflows (lesson 03) — logits of ±1000 or
# a τ of 0.01 are ordinary inputs here. The -inf of removed tokens stays -inf: exp(-inf) = 0.
def sampling_probs(logits, temperature, top_k=None):
    z = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None:
        kth = np.sort(z, axis=-1)[..., -top_k, None]  # (..., 1): the k-th largest per row
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# Exercise 2: what goes is N encoder layers and, in each of the N decoder layers, the
# cross-attention sublayer; the one (tied) embedding and the sinusoidal positions stay.
# An attention: four (D, D) projections, each with a bias of D. The feed-forward: D -> d_ff
# -> D, with biases of d_ff and D. A LayerNorm: γ and β of D, one per sublayer (post-LN).
#   encoder layer: attention + feed-forward + two LayerNorms
#   cross-attention sublayer: attention + its LayerNorm
def params_saved(d_model, d_ff, N):
    D = d_model
    attention = 4 * (D * D + D)
    feed_forward = D * d_ff + d_ff + d_ff * D + D
    layer_norm = 2 * D
    encoder_layer = attention + feed_forward + 2 * layer_norm
    cross_attention = attention + layer_norm
    return N * (encoder_layer + cross_attention)


# Exercise 3: the T new queries are the tokens at positions offset .. offset + T - 1; the
# keys are every position so far, 0 .. offset + T - 1 (the cached ones, then the new ones).
# Query i may attend to key j exactly when j <= offset + i: all the cached keys, and the new
# ones up to itself.
def cached_causal_mask(T, offset):
    keys = np.arange(offset + T)[None, :]  # (1, offset + T)
    queries = offset + np.arange(T)[:, None]  # (T, 1)
    return keys <= queries  # (T, offset + T) bool
