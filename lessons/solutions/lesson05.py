"""Reference solutions, lesson 05 (attention)."""

import numpy as np


# Exercise 1: P = softmax(Z), Z = S / tau. The softmax backward gives
# dZ = P (dP - rowsum(dP P)); every score's Z depends on tau through dZ/dtau = -S / tau^2, and
# tau touches every score, so dL/dtau = sum over all scores of dZ (-S / tau^2)
def temperature_grad(S, tau, dP):
    Z = S / tau
    e = np.exp(Z - Z.max(axis=-1, keepdims=True))
    P = e / e.sum(axis=-1, keepdims=True)
    dZ = P * (dP - (dP * P).sum(axis=-1, keepdims=True))
    return float((dZ * -S / tau**2).sum())


# Exercise 2
def padding_mask_from_lengths(lengths, S):
    lengths = np.asarray(lengths)
    return (np.arange(S)[None, :] < lengths[:, None]).reshape(len(lengths), 1, 1, S)


# Exercise 3: keys max(0, t - w + 1) .. t
def local_causal_mask(T, w):
    i = np.arange(T)[:, None]  # query positions
    j = np.arange(T)[None, :]  # key positions
    return ((j <= i) & (j > i - w)).reshape(1, 1, T, T)
