"""Reference solutions, lesson 04 (LayerNorm and residuals)."""

import numpy as np

from minitransformer.function import Function


# Exercise 1: r = (mean(x^2) + eps)^(-1/2), x_hat = x r, y = gamma x_hat
class RMSNorm(Function):
    @staticmethod
    def forward(ctx, x, gamma, eps=1e-6):
        r = 1 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
        x_hat = x * r
        ctx.save_for_backward(x_hat, r, gamma)
        return x_hat * gamma

    @staticmethod
    def backward(ctx, grad):
        x_hat, r, gamma = ctx.saved
        g_hat = grad * gamma
        dx = r * (g_hat - x_hat * (g_hat * x_hat).mean(axis=-1, keepdims=True))
        dgamma = (grad * x_hat).reshape(-1, x_hat.shape[-1]).sum(axis=0)
        return dx, dgamma


# Exercise 2: x_hat ~ 0 and r ~ 1/sqrt(eps), so dx ~ r (g - mean g) = g / sqrt(eps)
def max_gain(eps):
    return 1 / np.sqrt(eps)


# Exercise 3: y = LN(z), z = x + x W. Backwards: dz is LayerNorm's backward of g (γ = 1), then
# z = x + x W gives x two paths, dx = dz + dz W^T, and W, shared by every row, dW = x^T dz
# summed over the rows (one 2-D product on the flattened rows, lesson 02)
def add_norm_backward(x, W, g, eps=1e-5):
    z = x + x @ W
    mu = z.mean(-1, keepdims=True)
    r = 1 / np.sqrt(((z - mu) ** 2).mean(-1, keepdims=True) + eps)
    z_hat = (z - mu) * r
    dz = r * (g - g.mean(-1, keepdims=True) - z_hat * (g * z_hat).mean(-1, keepdims=True))
    D = x.shape[-1]
    dW = x.reshape(-1, D).T @ dz.reshape(-1, D)
    return dz + dz @ W.T, dW
