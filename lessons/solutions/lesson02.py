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


# Exercise 3: s (1, H, 1, 1) was broadcast over axes 0, 2, 3
def head_scale_grad(x, s, G):
    return np.sum(G * x, axis=(0, 2, 3), keepdims=True)
