"""Reference solutions, lesson 16 (a real translator: opus-mt in this library)."""

import numpy as np

import minitransformer as mt
import minitransformer.functional as F


# Exercise 1: per layer, each attention has four (D, D) projections with D biases each, the
# feed-forward two linear maps (D -> d_ff -> D, with biases), each LayerNorm a γ and a β of D;
# the decoder adds a cross-attention and a third LayerNorm. One shared (V, D) embedding
# (tied: it is also the output projection), plus Marian's final logits bias (V). The
# positions are sinusoids (no parameters), and the heads only split D (no extra weights).
def count_parameters(config):
    D, V = config["d_model"], config["vocab_size"]
    attention = 4 * (D * D + D)
    layer_norm = 2 * D

    def ffn(d_ff):
        return D * d_ff + d_ff + d_ff * D + D

    encoder = config["encoder_layers"] * (
        attention + ffn(config["encoder_ffn_dim"]) + 2 * layer_norm
    )
    decoder = config["decoder_layers"] * (
        2 * attention + ffn(config["decoder_ffn_dim"]) + 3 * layer_norm
    )
    return encoder + decoder + V * D + V


# Exercise 2: the paper's angles pos / 10000^(2i / d_model), i = 0 .. d_model/2 - 1; every
# sine first, then every cosine (the interleaved table's columns in the order P).
def halves_table(max_len, d_model):
    pos = np.arange(max_len)[:, None]  # (L, 1)
    angle = pos / 10000.0 ** (np.arange(0, d_model, 2) / d_model)  # (L, D/2)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)  # (L, D)


# Exercise 3: Marian's nn.Linear computes x Wᵀ + b with W stored as (d_out, d_in); this
# library's F.linear computes x W + b with W as (d_in, d_out): transpose each weight.
def marian_ffn(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    x = mt.tensor(x)
    hidden = F.silu(F.linear(x, mt.tensor(fc1_weight.T), mt.tensor(fc1_bias)))
    return F.linear(hidden, mt.tensor(fc2_weight.T), mt.tensor(fc2_bias)).numpy()
