"""Reference solutions, lesson 20 (below n²)."""

import math

import numpy as np


# Exercise 1: the band |p - j| < stride is the range p - stride + 1 ... p + stride - 1, the
# columns ((p - j) a multiple of stride) the range from p % stride in steps of stride, both cut
# to the sequence 0 ... S - 1; their union sorted (p is in both), causal: only j <= p
def strided_keys(p, S, stride, causal):
    band = range(max(0, p - stride + 1), min(S, p + stride))
    columns = range(p % stride, S, stride)
    keys = sorted(set(band) | set(columns))
    if causal:
        keys = [j for j in keys if j <= p]
    return keys


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
