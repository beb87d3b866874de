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


# Exercise 3: compare element by element (a sum over positions is blind to their order), with
# a tolerance a little above the rounding of the outputs' dtype (float32 ~1e-7, float64 ~1e-16)
def is_permutation_equivariant(f, x, perm):
    a, b = np.asarray(f(x[:, perm])), np.asarray(f(x)[:, perm])
    tol = 1e3 * np.finfo(np.result_type(a, b)).eps * max(1.0, float(np.abs(b).max()))
    return bool(np.abs(a - b).max() <= tol)
