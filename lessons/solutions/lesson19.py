"""Reference solutions, lesson 19 (what the heads do)."""

import numpy as np


# Exercise 1: the share of real rows whose largest weight is at key t - 1 (and t + 1)
def positional_offset(weights, lengths):
    w = np.asarray(weights, dtype=np.float64)
    B, T, S = w.shape
    t = np.arange(T)
    real = t[None, :] < np.asarray(lengths)[:, None]  # (B, T): rows of real tokens
    peak = w.argmax(axis=-1)  # (B, T): the key each row gives its largest weight
    for offset in (-1, 1):
        share = (peak == t + offset)[real].mean()
        if share >= 0.9:
            return offset
    return None


# Exercise 2: |L(1 + eps e_h) - L(1 - eps e_h)| / (2 eps) for each head h
def importance_by_differences(loss_at, n_heads, eps):
    scores = np.zeros(n_heads)
    for h in range(n_heads):
        up, down = np.ones(n_heads), np.ones(n_heads)
        up[h] += eps
        down[h] -= eps
        scores[h] = abs(loss_at(up) - loss_at(down)) / (2 * eps)
    return scores
