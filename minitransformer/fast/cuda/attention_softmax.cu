// Attention's scaled, masked softmax over the keys, forward and backward. Replaces the
// softmax part of ops/attention.py (ScaledDotProductAttention); the products q k^T, P v and
// those of backward stay cuBLAS matmuls. With scale 1 and no mask it is also the plain
// softmax / log-softmax over the last axis (ops/softmax.py).
//
// Shapes: scores (L0, L1, Tq, S) C-contiguous = q k^T, raw (unscaled); rows r = (i0, i1, i)
// of all leading positions; the bool mask (True = may attend) is read in place through its
// element strides (m0, m1, m2, m3), 0 on a broadcast axis: (B,1,1,S) padding, (1,1,T,T)
// causal, (B,1,T,S) all work without materialising the broadcast (mask = nullptr: none).
// Forward, per row:
//     v_c = scale * scores_c, or -inf where the mask is False
//     m = max_c v_c (0 when it is not finite: an all-masked row),  s = sum_c e^(v_c - m)
//     (0 -> 1),  P_c = e^(v_c - m) / s     (an all-masked row gives P = 0, not NaN)
//     log_out = 1 writes log P_c = (v_c - m) - log s instead (log-softmax).
// Backward, per row, with dP = dL/dP:
//     dS_c = scale * P_c * (dP_c - sum_k dP_k P_k)   (the gradient of the raw scores)
//
// Launch layout: one block per row (grid L0 * L1 * Tq), blockDim a multiple of 32
// (128 / 256 / 1024, chosen in Python by S); thread k handles columns k, k + blockDim, ...;
// block reductions: warp shuffle (xor butterfly), then the warp results in shared memory
// reduced by warp 0. Forward reads the row three times (max, sum, write), backward twice.
// Accumulation is in the input dtype (float for float32, double for float64).

#include "block_reduce.cuh"  // warp_sum, warp_max, block_reduce

template <typename T>
__device__ void attention_softmax_forward(const T* scores, const bool* mask, long long m0,
                                          long long m1, long long m2, long long m3, int L1,
                                          int Tq, int S, T scale, int log_out, T* out) {
    __shared__ T red[32];
    const T neg_inf = T(-__int_as_float(0x7f800000));
    const long long row = blockIdx.x;
    const long long i = row % Tq, rest = row / Tq;  // (i0, i1, i) of the row
    const long long mrow = (rest / L1) * m0 + (rest % L1) * m1 + i * m2;
    const T* sr = scores + row * S;
    T m = neg_inf;
    for (int c = threadIdx.x; c < S; c += blockDim.x)
        if (mask == nullptr || mask[mrow + c * m3]) m = fmax(m, scale * sr[c]);
    m = block_reduce(m, true, red);
    if (!isfinite(m)) m = T(0);  // an all-masked row: e^(-inf - 0) = 0
    T s = T(0);
    for (int c = threadIdx.x; c < S; c += blockDim.x)
        if (mask == nullptr || mask[mrow + c * m3]) s += exp(scale * sr[c] - m);
    s = block_reduce(s, false, red);
    if (s == T(0)) s = T(1);  // 0 / 0 -> 0 / 1 = 0
    const T log_s = log_out ? log(s) : T(0);
    for (int c = threadIdx.x; c < S; c += blockDim.x) {
        const T z = (mask == nullptr || mask[mrow + c * m3]) ? scale * sr[c] - m : neg_inf;
        out[row * S + c] = log_out ? z - log_s : exp(z) / s;
    }
}

extern "C" __global__ void attention_softmax_forward_f32(const float* scores, const bool* mask,
                                                         long long m0, long long m1,
                                                         long long m2, long long m3, int L1,
                                                         int Tq, int S, float scale,
                                                         int log_out, float* out) {
    attention_softmax_forward<float>(scores, mask, m0, m1, m2, m3, L1, Tq, S, scale, log_out,
                                     out);
}

extern "C" __global__ void attention_softmax_forward_f64(const double* scores, const bool* mask,
                                                         long long m0, long long m1,
                                                         long long m2, long long m3, int L1,
                                                         int Tq, int S, double scale,
                                                         int log_out, double* out) {
    attention_softmax_forward<double>(scores, mask, m0, m1, m2, m3, L1, Tq, S, scale, log_out,
                                      out);
}

template <typename T>
__device__ void attention_softmax_backward(const T* dp, const T* p, int S, T scale, T* ds) {
    __shared__ T red[32];
    const long long row = blockIdx.x;
    const T* dr = dp + row * S;
    const T* pr = p + row * S;
    T a = T(0);
    for (int c = threadIdx.x; c < S; c += blockDim.x) a += dr[c] * pr[c];
    a = block_reduce(a, false, red);  // rowsum(dP * P)
    for (int c = threadIdx.x; c < S; c += blockDim.x)
        ds[row * S + c] = scale * pr[c] * (dr[c] - a);
}

extern "C" __global__ void attention_softmax_backward_f32(const float* dp, const float* p,
                                                          int S, float scale, float* ds) {
    attention_softmax_backward<float>(dp, p, S, scale, ds);
}

extern "C" __global__ void attention_softmax_backward_f64(const double* dp, const double* p,
                                                          int S, double scale, double* ds) {
    attention_softmax_backward<double>(dp, p, S, scale, ds);
}
