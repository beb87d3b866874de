"""Reference solutions, lesson 12 (why attention replaced recurrence)."""

import numpy as np


# Exercise 1: S - 1 - j encoder steps after x_j reach h_S; then t + 1 decoder steps
# (h_S -> h_1 ... h_{t+1}, which emits output t)
def rnn_path(S, j, t):
    return (S - 1 - j) + (t + 1)


# Exercise 2: layer l has dilation k^(l-1), so L layers see k^L positions; in integers,
# since float logs of exact powers round either way (math.log(125, 5) > 3)
def dilated_layers(n, k):
    L, reach = 0, 1
    while reach < n:
        L, reach = L + 1, reach * k
    return L


# Exercise 3: score_s = v . tanh(q W_q + m_s W_k + b), for all s at once by broadcasting
def additive_scores(q, m, W_q, W_k, b, v):
    return np.tanh(q @ W_q + m @ W_k + b) @ v  # (A,) + (S, A) -> (S, A) -> (S,)
