"""Reference solutions, lesson 21 (the block since 2017)."""

import numpy as np


# Exercise 1: r = 1/sqrt(mean(x²) + eps), x̂ = x·r, y = x̂·γ. The gradient reaching x̂ is
# ĝ = grad·γ; r depends on every x_k of the row (dr/dx_j = -r³ x_j / D), so
# dx = r·(ĝ - x̂·mean(ĝ·x̂)) over the last axis; γ_j scales feature j of every row, so
# dγ = Σ over the rows of grad·x̂
def rms_norm_backward(x, gamma, grad, eps):
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)  # (..., 1)
    x_hat = x * r
    g_hat = grad * gamma
    dx = r * (g_hat - x_hat * np.mean(g_hat * x_hat, axis=-1, keepdims=True))
    dgamma = (grad * x_hat).reshape(-1, x.shape[-1]).sum(axis=0)
    return dx, dgamma


# Exercise 2: the angle of pair i at row t is (offset + t)·base^(-2i/d); the halves layout
# pairs x[..., i] with x[..., i + d/2], and each pair (a, b) turns to
# (a cos - b sin, a sin + b cos)
def rope_halves(x, offset, base):
    T, d = x.shape[-2], x.shape[-1]
    theta = base ** (-2.0 * np.arange(d // 2) / d)  # (d/2,)
    angle = (offset + np.arange(T))[:, None] * theta[None, :]  # (T, d/2)
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


# Exercise 3: each layer keeps, for every token, kv_heads keys and kv_heads values, each
# d_model/h numbers wide; the query heads share them, so h itself does not appear
def kv_cache_bytes(N, d_model, h, kv_heads, positions, itemsize):
    return 2 * N * kv_heads * (d_model // h) * positions * itemsize
