"""Reference solutions, lesson 20 (below n²)."""

import math

import numpy as np


# Exercise 1: query i sits at position p = i + (S - T); it reads key j when |p - j| <= window,
# and, causal, only when j <= p as well
def band_mask(T, S, window, causal):
    p = np.arange(T)[:, None] + (S - T)  # (T, 1): each query's position
    j = np.arange(S)[None, :]  # (1, S): each key's position
    mask = np.abs(p - j) <= window
    if causal:
        mask &= j <= p
    return mask


# Exercise 2: the running sums C_i = sum_{j<=i} fk_j v_j^T (T, d, d_v) and z_i = sum_{j<=i} fk_j
# (T, d) are prefix sums over the positions: O(T·d·d_v) memory, no (T, T) array
def causal_linear_attention(fq, fk, v):
    C = np.cumsum(fk[:, :, None] * v[:, None, :], axis=0)  # (T, d, d_v)
    z = np.cumsum(fk, axis=0)  # (T, d)
    numerator = np.einsum("td,tde->te", fq, C)  # fq_i^T C_i for every i
    denominator = np.einsum("td,td->t", fq, z)[:, None]  # fq_i . z_i
    return numerator / denominator


# Exercise 3: local is faster when overhead * 2T(2w + 1)d < 2T²d, i.e. T > overhead * (2w + 1)
# (d cancels); the smallest whole T above that bound is its floor plus one
def crossover_length(d, window, overhead):
    return math.floor(overhead * (2 * window + 1)) + 1
