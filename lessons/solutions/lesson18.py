"""Reference solutions, lesson 18 (scaling laws)."""

import numpy as np


# Exercise 1: L = a·n^(−α) is the line ln L = ln a − α·ln n; the least-squares line through
# the points (ln n_i, ln L_i) has slope cov(u, v) / var(u) (here −α) and passes through the
# means, so ln a = mean(v) + α·mean(u)
def fit_power_law(n, loss):
    u, v = np.log(np.asarray(n, dtype=float)), np.log(np.asarray(loss, dtype=float))
    du = u - u.mean()
    alpha = -(du @ (v - v.mean())) / (du @ du)
    return float(np.exp(v.mean() + alpha * u.mean())), float(alpha)


# Exercise 2: leave the largest size out, fit the rest in log–log space (exercise 1), and
# evaluate the fitted law at the size left out
def predict_largest(n, loss):
    n, loss = np.asarray(n, dtype=float), np.asarray(loss, dtype=float)
    largest = np.argmax(n)
    keep = np.arange(len(n)) != largest
    a, alpha = fit_power_law(n[keep], loss[keep])
    return float(a * n[largest] ** -alpha)


# Exercise 3: one post-LN layer holds four d×d projections with their biases (4d² + 4d), the
# feed-forward network's two matrices with their biases (2·d·d_ff + d_ff + d) and two
# LayerNorms (a gain and a shift each: 4d); the embedding is not counted. Training costs
# 6 FLOPs per parameter and token: 2 forward (a multiply and an add), 4 backward
def training_compute(d_model, layers, d_ff, tokens):
    d = d_model
    per_layer = 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d
    return 6 * layers * per_layer * tokens
