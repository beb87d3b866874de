"""Reference solutions, lesson 16 (a real translator: opus-mt in this library)."""

import numpy as np

import minitransformer as mt
import minitransformer.functional as F


# Exercise 1: the paper's angles pos / 10000^(2i / d_model), i = 0 .. d_model/2 - 1; every
# sine first, then every cosine (the interleaved table's columns in the order P).
def halves_table(max_len, d_model):
    pos = np.arange(max_len)[:, None]  # (L, 1)
    angle = pos / 10000.0 ** (np.arange(0, d_model, 2) / d_model)  # (L, D/2)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)  # (L, D)


# Exercise 2: reorder by `order` the axes that run over the residual stream: the columns of
# the embeddings (the features they write), the rows of every weight that reads the stream
# (x W: W_q, W_k, W_v, W_1, an untied output projection), the columns of W_o and W_2 and
# their biases (they write into it), each LayerNorm's γ and β. The head axis of an attention
# and the feed-forward's d_ff axis stay as they are; a[order] makes new arrays.
def halves_twin(state, order):
    twin = {}
    for name, a in state.items():
        if name.endswith("embed.weight"):
            twin[name] = a[:, order]
        elif name.endswith(("w_q.weight", "w_k.weight", "w_v.weight", "w_1.weight")):
            twin[name] = a[order]
        elif name.endswith(("out_proj.weight", "norm.gamma", "norm.beta")):
            twin[name] = a[order]
        elif name.endswith(("w_o.bias", "w_2.bias")):
            twin[name] = a[order]
        elif name.endswith(("w_o.weight", "w_2.weight")):
            twin[name] = a[:, order]
        else:  # the q, k, v biases (head axis), W_1's bias (d_ff), the logits bias (V)
            twin[name] = a.copy()
    return twin


# Exercise 3: Marian's nn.Linear computes x Wᵀ + b with W stored as (d_out, d_in); this
# library's F.linear computes x W + b with W as (d_in, d_out): transpose each weight.
def marian_ffn(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    x = mt.tensor(x)
    hidden = F.silu(F.linear(x, mt.tensor(fc1_weight.T), mt.tensor(fc1_bias)))
    return F.linear(hidden, mt.tensor(fc2_weight.T), mt.tensor(fc2_bias)).numpy()
