"""Reference solutions, lesson 06 (multi-head attention)."""

import numpy as np


def _attention(q, k, v):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


# Exercise 1: W_q and W_k map D -> h d_k (weights D h d_k, biases h d_k each); W_v and W_o
# map D -> D (d_v = D / h). At d_k = D / h that is 4 D^2 + 4 D: h does not matter
def mha_num_parameters(D, h, d_k):
    return 2 * (D * h * d_k + h * d_k) + 2 * (D * D + D)


# Exercise 2: head i owns columns i*d_k .. (i+1)*d_k of W_q, W_k, W_v AND of their biases
def head_output(x_q, x_kv, W, h, i):
    d_k = W["wq"].shape[0] // h
    cols = slice(i * d_k, (i + 1) * d_k)
    q = x_q @ W["wq"][:, cols] + W["bq"][cols]  # (B, T, d_k)
    k = x_kv @ W["wk"][:, cols] + W["bk"][cols]  # (B, S, d_k)
    v = x_kv @ W["wv"][:, cols] + W["bv"][cols]  # (B, S, d_k)
    return _attention(q, k, v)  # (B, T, d_k)


# Exercise 3: mean over queries of -sum_s w log w, with 0 log 0 = 0
def attention_entropy(w):
    w = np.asarray(w)
    terms = np.where(w > 0, -w * np.log(np.where(w > 0, w, 1.0)), 0.0)
    return terms.sum(-1).mean(-1)
