"""Reference solutions, lesson 07 (positional encoding)."""

import numpy as np


# Exercise 1: over offsets up to length - 1 pair i turns by at most (length - 1)·omega_i; the
# turn can be read back (offsets may be negative: arctan2 gives angles in (-pi, pi]) when that is
# less than half a turn, pi. Pairs slow down with i: the first safe one is the fastest
def fastest_safe_pair(d_model, length):
    for i in range(d_model // 2):
        omega = 10000.0 ** (-2 * i / d_model)
        if (length - 1) * omega < np.pi:
            return i
    return None


# Exercise 2: the slowest pair turns by k * omega without wrapping for |k| < 1000 (any pair from
# exercise 1 with length 1000 does too: pair 21 at d_model = 64)
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
