"""Reference solutions, lesson 03 (softmax and cross-entropy)."""

import numpy as np


# Exercise 1: shift by the max of each line, but by 0 where the whole line is -inf (its max
# would give -inf - (-inf) = nan); log 0 = -inf is then the value, and the gradient,
# the softmax exp(x - value), is set to 0 on those lines
def logsumexp_with_grad(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    total = np.sum(np.exp(x - m), axis=axis, keepdims=True)  # 0 on a fully masked line
    with np.errstate(divide="ignore"):  # log 0 = -inf there: the answer, not a mistake
        value = np.log(total) + m
    masked = total == 0
    grad = np.where(masked, 0.0, np.exp(x - np.where(masked, 0.0, value)))
    return np.squeeze(value, axis=axis), grad


# Exercise 2: the loss is smallest at p = q, and p_t / p_other = e^m
def best_margin(eps, V):
    return np.log((1 - eps + eps / V) / (eps / V))


# Exercise 3: q = 1 - eps on the target and eps / (V - 1) on each other class;
# d(mean loss)/dx = (p - q) / (number of kept rows), 0 on ignored rows
def ce_grad(x, t, eps, ignore_index):
    N, V = x.shape
    keep = t != ignore_index
    q = np.full((N, V), eps / (V - 1))
    q[np.arange(N), np.where(keep, t, 0)] = 1 - eps
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    p = z / z.sum(axis=-1, keepdims=True)
    return (p - q) * keep[:, None] / max(keep.sum(), 1)
