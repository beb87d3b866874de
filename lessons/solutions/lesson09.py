"""Reference solutions, lesson 09 (training)."""

import numpy as np


# Exercise 1
def noam_lr(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


# Exercise 2: the entropy of q = (1 - eps) onehot + eps / V
def smoothing_floor(V, eps):
    if eps == 0:
        return 0.0
    q_hit = 1 - eps + eps / V
    q_miss = eps / V
    return float(-(q_hit * np.log(q_hit) + (V - 1) * q_miss * np.log(q_miss)))


# Exercise 3: t = 1 gives m_hat = g, v_hat = g^2
def adam_first_update(g, lr, eps=1e-9):
    return -lr * g / (np.abs(g) + eps)
