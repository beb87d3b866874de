"""Reference solutions, lesson 09 (training)."""

import math

import numpy as np


# Exercise 1: after the peak lrate(s) / peak = (d^-0.5 s^-0.5) / (d^-0.5 warmup^-0.5)
# = sqrt(warmup / s) = frac, so s = warmup / frac^2 (d_model cancels)
def decay_step(frac, d_model, warmup):
    return warmup / frac**2


# Exercise 2: H(q) = -a log a - (V - 1) b log b with a = 1 - eps + eps/V, b = eps/V.
# As V -> oo, a -> 1 - eps, and (V - 1) b log b = (V - 1)/V * eps * (log eps - log V)
# -> eps log eps - eps log V. So H(q) - eps log V -> -(1 - eps) log(1 - eps) - eps log eps:
# the binary entropy of eps (0 log 0 = 0 makes it 0 at eps = 0 and eps = 1).
def floor_offset(eps):
    def xlogx(x):
        return 0.0 if x == 0 else x * math.log(x)

    return -xlogx(1 - eps) - xlogx(eps)


# Exercise 3: after t - 1 zero gradients m = v = 0; then m_t = (1 - b1) g, v_t = (1 - b2) g^2,
# m_hat = (1 - b1) g / (1 - b1^t), v_hat = (1 - b2) g^2 / (1 - b2^t). For t = 1 the betas
# cancel (the first step: -lr g / (|g| + eps)); as t grows the step tends to
# lr (1 - b1) / sqrt(1 - b2) per weight, the bound of section 5.
def first_gradient_update(g, t, lr, betas=(0.9, 0.98), eps=1e-9):
    b1, b2 = betas
    m_hat = (1 - b1) * g / (1 - b1**t)
    v_hat = (1 - b2) * g * g / (1 - b2**t)
    return -lr * m_hat / (np.sqrt(v_hat) + eps)
