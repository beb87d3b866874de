"""Reference solutions, lesson 07 (positional encoding)."""

import numpy as np


# Exercise 1: lambda_i = 2 pi / omega_i, omega_i = 10000^(-2i/D)
def wavelengths(d_model):
    i = np.arange(d_model // 2)
    return 2 * np.pi * 10000.0 ** (2 * i / d_model)


# Exercise 2: the slowest pair turns by k * omega without wrapping for |k| < 1000
def recover_offset(pe_a, pe_b, d_model):
    i = d_model // 2 - 1
    omega = 10000.0 ** (-2 * i / d_model)
    angle_a = np.arctan2(pe_a[2 * i], pe_a[2 * i + 1])  # (sin, cos) -> angle p * omega
    angle_b = np.arctan2(pe_b[2 * i], pe_b[2 * i + 1])
    return int(np.round((angle_b - angle_a) / omega))


# Exercise 3: compare element by element (a sum over positions is blind to their order)
def is_permutation_equivariant(f, x, perm):
    return bool(np.allclose(f(x[:, perm]), f(x)[:, perm], atol=1e-6))
