"""Reference solutions, lesson 05 (attention)."""

import numpy as np


# Exercise 1: dS_i = P_i (dP_i - sum_j dP_j P_j), per row
def softmax_backward(P, dP):
    return P * (dP - (dP * P).sum(axis=-1, keepdims=True))


# Exercise 2
def padding_mask_from_lengths(lengths, S):
    lengths = np.asarray(lengths)
    return (np.arange(S)[None, :] < lengths[:, None]).reshape(len(lengths), 1, 1, S)


# Exercise 3: keys max(0, t - w + 1) .. t
def local_causal_mask(T, w):
    i = np.arange(T)[:, None]  # query positions
    j = np.arange(T)[None, :]  # key positions
    return ((j <= i) & (j > i - w)).reshape(1, 1, T, T)
