"""Reference solutions, lesson 18 (scaling laws)."""

import numpy as np


# Exercise 1: L = a·n^(−α) is the line ln L = ln a − α·ln n. The normal equations of the
# least-squares line v = c + s·u through the points (u_i, v_i) = (ln n_i, ln L_i) give the
# slope s = cov(u, v) / var(u) (both divided by the same count) and put the line through the
# means: c = mean(v) − s·mean(u). Here s = −α and c = ln a
def fit_power_law(n, loss):
    u, v = np.log(np.asarray(n, dtype=float)), np.log(np.asarray(loss, dtype=float))
    du = u - u.mean()
    alpha = -(du @ (v - v.mean())) / (du @ du)
    return float(np.exp(v.mean() + alpha * u.mean())), float(alpha)


# Exercise 2: in x = ln N, the parabola L = c0 + c1·x + c2·x² through the lowest point and its
# two neighbours. Subtracting the middle equation from the other two leaves two equations in
# c1 and c2 (c0 drops out); their solution puts the vertex −c1/(2·c2) at the formula below
def optimal_size(sizes, losses):
    x, y = np.log(np.asarray(sizes, dtype=float)), np.asarray(losses, dtype=float)
    i = int(np.argmin(y))
    (x1, x2, x3), (y1, y2, y3) = x[i - 1 : i + 2], y[i - 1 : i + 2]
    num = (x2 - x1) ** 2 * (y2 - y3) - (x2 - x3) ** 2 * (y2 - y1)
    den = (x2 - x1) * (y2 - y3) - (x2 - x3) * (y2 - y1)
    return float(np.exp(x2 - num / (2 * den)))


# Exercise 3: per layer, a query that reads k keys costs 2·k·d FLOPs for its scores (k dot
# products of length d, a multiply and an add each) and 2·k·d for the weighted sum of k value
# vectors: 4·k·d forward, 12·k·d with the backward. Causal: the query at position t of its
# sequence reads t keys; the padding is read by no one. A sequence of length L reads
# 1 + 2 + … + L = L(L+1)/2 keys in all
def attention_flops(lengths, layers, d_model):
    keys_read = sum(int(n) * (int(n) + 1) // 2 for n in lengths)
    return 12 * layers * d_model * keys_read
