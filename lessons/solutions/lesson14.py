"""Reference solutions, lesson 14 (data parallelism)."""

import numpy as np


# Exercise 1: the whole batch's mean loss is sum_r (n_r / n) L_r, and the gradient is linear;
# no condition on the shard sizes, so one row per rank works too
def combine_shard_grads(grads, n_tokens):
    n = sum(n_tokens)
    return sum(g * (n_r / n) for g, n_r in zip(grads, n_tokens, strict=True))


# Exercise 2: the ring of section 2, counting one message per chunk a rank sends
def ring_allreduce_counted(buffers):
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]  # views into each rank's buffer
    messages = [0] * N
    for k in range(N - 1):  # reduce-scatter
        msgs = [(r, (r - k) % N, chunks[r][(r - k) % N].copy()) for r in range(N)]
        for r, c, data in msgs:
            chunks[(r + 1) % N][c] += data
            messages[r] += 1
    for k in range(N - 1):  # all-gather
        msgs = [(r, (r + 1 - k) % N, chunks[r][(r + 1 - k) % N].copy()) for r in range(N)]
        for r, c, data in msgs:
            chunks[(r + 1) % N][c][...] = data
            messages[r] += 1
    return messages


# Exercise 3: 2(N-1) alpha = 2(N-1)/N * B / BW  <=>  B = N alpha BW
def equal_terms_size(N, alpha, BW):
    return N * alpha * BW
