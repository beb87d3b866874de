"""Reference solutions, lesson 11 (speed)."""


# Exercise 1: 2mkn FLOPs; A, B read once and C written once, 4 bytes a float32 number. The
# time is the slower of the two limits (compute and memory traffic overlap); a product whose
# FLOPs take longer than its bytes is compute-bound (its intensity is above peak / bandwidth).
def gemm_roofline(m, k, n, peak_flops, bandwidth):
    flops = 2 * m * k * n
    moved = 4 * (m * k + k * n + m * n)
    compute_s, memory_s = flops / peak_flops, moved / bandwidth
    bound = "compute" if compute_s > memory_s else "memory"
    return flops / moved, max(compute_s, memory_s), bound


# Exercise 2: every attention keeps its weights P, one number per (batch, head, query, key):
# per layer, the encoder's self-attention (S, S), the decoder's self-attention (T, T) and its
# cross-attention (T queries from the target, S keys from the source)
def score_bytes(B, H, S, T, N, itemsize):
    return N * B * H * (S * S + T * T + T * S) * itemsize


# Exercise 3 (Amdahl's law): the new time is the untouched rest, 1 - sum(fractions), plus each
# part's fraction over its speedup; the speedup is old time (1) over new time
def step_speedup(fractions, speedups):
    new_time = 1 - sum(fractions) + sum(f / s for f, s in zip(fractions, speedups, strict=True))
    return 1 / new_time
