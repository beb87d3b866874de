"""Reference solutions, lesson 02 (broadcasting and matmul)."""

import numpy as np


# Exercise 1: Y = u v^T; u is copied along the columns, v along the rows
def outer_backward(u, v, G):
    du = G @ v  # (n,)
    dv = G.T @ u  # (m,)
    return du, dv


# Exercise 2: y = x W^T with W (D_out, D)
def linear_t_backward(x, W, G):
    D, Dout = x.shape[-1], W.shape[0]
    dx = G @ W  # (B, T, D)
    dW = G.reshape(-1, Dout).T @ x.reshape(-1, D)  # (D_out, D), one 2-D product
    return dx, dW


# Exercise 3: y = x * s[idx]. The gather copies row s[v] to every position whose id is v, so
# row v of the gradient sums G * x over those positions; np.add.at adds every copy (a
# fancy-indexed ds[idx] += ... would keep one position per repeated id)
def gather_scale_grad(x, s, idx, G):
    ds = np.zeros_like(s, dtype=np.float64)
    np.add.at(ds, idx, G * x)
    return ds
