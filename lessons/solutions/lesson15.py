"""Reference solutions, lesson 15 (attention at length)."""

import numpy as np


# Exercise 1: shift both states to the larger max; a state with no key (m = -inf) shifts
# by 0 instead, so exp(-inf - 0) = 0 and no -inf - (-inf) = NaN appears.
def merge(a, b):
    m_a, l_a, acc_a = a
    m_b, l_b, acc_b = b
    m = np.maximum(m_a, m_b)
    shift = np.where(np.isneginf(m), 0.0, m)
    w_a, w_b = np.exp(m_a - shift), np.exp(m_b - shift)  # both <= 1
    return m, w_a * l_a + w_b * l_b, w_a * acc_a + w_b * acc_b


# Exercise 2: P_j = exp(S_j - L), S_j = q K_j^T / sqrt(d_k), L the whole row's log-sum-exp
def block_probs(q, k_block, lse):
    s = q @ k_block.T / np.sqrt(q.shape[-1])
    return np.exp(s - lse)
