"""Reference solutions, lesson 14 (data parallelism)."""

import numpy as np


# Exercise 1: longest rows first, each to the rank holding the fewest tokens so far ("LPT").
# Any "least-loaded rank next" rule keeps the heaviest shard within n/N + the longest row.
def balanced_split(row_tokens, N):
    shards, loads = [[] for _ in range(N)], [0] * N
    for i in np.argsort(row_tokens, kind="stable")[::-1]:
        r = loads.index(min(loads))
        shards[r].append(int(i))
        loads[r] += int(row_tokens[i])
    return [np.array(s, dtype=np.int64) for s in shards]


# Exercise 2: after the reduce-scatter rank r holds chunk (r + 1) mod N complete. At step k
# of the all-gather rank r passes chunk (r + 1 - k) mod N to the right: the complete chunk it
# started with, then each step the one it has just received; the receiver overwrites its copy.
def all_gather_with_send(buffers, send):
    N = len(buffers)
    chunks = [np.array_split(b, N) for b in buffers]  # views into each rank's buffer
    for k in range(N - 1):
        for r in range(N):
            c = (r + 1 - k) % N
            chunks[(r + 1) % N][c][...] = send(r, (r + 1) % N, c)


# Exercise 3: 2(N-1) alpha = 2(N-1)/N * B / BW  <=>  B = N alpha BW
def equal_terms_size(N, alpha, BW):
    return N * alpha * BW
