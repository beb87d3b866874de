"""Reference solutions, lesson 12 (why attention replaced recurrence)."""

import numpy as np


# Exercise 1: attention with projections 2 n^2 d + 4 n d^2, a recurrent layer with g gates
# 2 g n d^2. Attention costs at least as much when 2 n^2 d + 4 n d^2 >= 2 g n d^2, i.e.
# n + 2d >= g d, i.e. n >= (g - 2) d; n is at least 1 (for g <= 2 attention is never cheaper).
# At d = 512: never cheaper than Table 1's RNN (g = 1), n < 512 against a GRU, n < 1024 an LSTM.
def attention_stops_cheaper(d, g):
    return max(1, (g - 2) * d)


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
