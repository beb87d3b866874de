"""Reference solutions, lesson 11 (speed)."""

import numpy as np


# Exercise 1: tied embeddings (V D once), biases everywhere, 2 D per LayerNorm
def count_parameters(V, d_model, d_ff, N):
    D = d_model
    attn = 4 * (D * D + D)
    ffn = D * d_ff + d_ff + d_ff * D + D
    encoder_layer = attn + ffn + 2 * 2 * D
    decoder_layer = 2 * attn + ffn + 3 * 2 * D
    return V * D + N * (encoder_layer + decoder_layer)


# Exercise 2: one number per (batch, head, query, key)
def score_bytes(B, H, T, S, itemsize):
    return B * H * T * S * itemsize


# Exercise 3
def loglog_slope(x, y):
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])
