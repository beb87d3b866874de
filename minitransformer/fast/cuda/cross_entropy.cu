// Label-smoothed cross-entropy of logits against class ids, forward and backward. Replaces
// the per-row math of ops/loss.py (CrossEntropy.forward / backward) for CuPy float32 and
// float64 logits (fast.numpy.cross_entropy_forward / _backward are the NumPy twins).
//
// Shapes: x (N, V) C-contiguous logits, t (N,) int64 ids in [0, V), eps = label smoothing.
// Forward, per row (m = max_c x_c, taken as 0 when it is not finite, as ops/softmax.shifted):
//     z = x - m,   e = exp(z) (N, V),   s = sum_c e_c (N, 1) (0 -> 1),   log_s = lse - m
//     loss = (1 - eps) (log_s - z_t) + eps (log_s - sum_c z_c / V)           (N,)
// (the eps term is skipped when eps = 0, so a -inf logit gives a finite loss there).
// Two reads of the row: one for the max, one writing e and summing e (and z / V).
// Backward, with w the upstream weight per row ((N, 1), or one value for every row:
// w_stride 1 or 0):
//     dx = e * (w / s) - w eps / V - w (1 - eps) [c == t]                     (N, V)
//
// Launch layout: one block per row (grid N), blockDim a multiple of 32 (128 / 256 / 1024,
// chosen in Python by V); thread k handles columns k, k + blockDim, ...; block reductions:
// warp shuffle (xor butterfly), then the warp results in shared memory reduced by warp 0.
// Accumulation is in the input dtype (float for float32, double for float64).

#include "block_reduce.cuh"  // warp_sum, warp_max, block_reduce

template <typename T>
__device__ void cross_entropy_forward(const T* x, const long long* t, T eps, int V, T* loss,
                                      T* e, T* s) {
    __shared__ T red[32];
    const long long row = blockIdx.x;
    const T* xr = x + row * V;
    T m = T(-__int_as_float(0x7f800000));
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmax(m, xr[j]);
    m = block_reduce(m, true, red);
    if (!isfinite(m)) m = T(0);  // an all -inf row stays -inf instead of NaN
    T se = T(0), sz = T(0);
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const T z = xr[j] - m;
        const T ez = exp(z);
        e[row * V + j] = ez;
        se += ez;
        sz += z / T(V);  // mean of z as a sum of z / V: no overflow where sum(z) would
    }
    se = block_reduce(se, false, red);
    if (eps != T(0)) sz = block_reduce(sz, false, red);
    if (threadIdx.x == 0) {
        if (se == T(0)) se = T(1);
        s[row] = se;
        const T log_s = log(se);  // lse - m
        T l = (T(1) - eps) * (log_s - (xr[t[row]] - m));
        if (eps != T(0)) l += eps * (log_s - sz);
        loss[row] = l;
    }
}

extern "C" __global__ void cross_entropy_forward_f32(const float* x, const long long* t,
                                                     float eps, int V, float* loss, float* e,
                                                     float* s) {
    cross_entropy_forward<float>(x, t, eps, V, loss, e, s);
}

extern "C" __global__ void cross_entropy_forward_f64(const double* x, const long long* t,
                                                     double eps, int V, double* loss,
                                                     double* e, double* s) {
    cross_entropy_forward<double>(x, t, eps, V, loss, e, s);
}

template <typename T>
__device__ void cross_entropy_backward(const T* e, const T* s, const long long* t, const T* w,
                                       int w_stride, T eps, int V, T* dx) {
    const long long row = blockIdx.x;
    const T wr = w[row * w_stride];
    const T ws = wr / s[row];
    const T off = wr * (eps / T(V));  // w eps / V off every class
    const T hit = wr * (T(1) - eps);  // w (1 - eps) more off the target
    const long long tr = t[row];
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        T d = e[row * V + j] * ws;
        if (eps != T(0)) d -= off;
        if (j == tr) d -= hit;
        dx[row * V + j] = d;
    }
}

extern "C" __global__ void cross_entropy_backward_f32(const float* e, const float* s,
                                                      const long long* t, const float* w,
                                                      int w_stride, float eps, int V,
                                                      float* dx) {
    cross_entropy_backward<float>(e, s, t, w, w_stride, eps, V, dx);
}

extern "C" __global__ void cross_entropy_backward_f64(const double* e, const double* s,
                                                      const long long* t, const double* w,
                                                      int w_stride, double eps, int V,
                                                      double* dx) {
    cross_entropy_backward<double>(e, s, t, w, w_stride, eps, V, dx);
}

// The "mean" / "sum" of the per-row losses over the rows kept (t != ignore), as ops/loss.py
// reduces them: count = the rows kept, divisor = max(count, 1) for "mean" (all ignored:
// 0 / 1), 1 for "sum"; total = sum / divisor. One block (blockDim a multiple of 32):
// thread k sums rows k, k + blockDim, ..., then block_reduce (a fixed order: deterministic).
template <typename T>
__device__ void cross_entropy_total(const T* loss, const long long* t, long long ignore, int N,
                                    int mean, T* total, T* divisor) {
    __shared__ T red[32];
    T sum = T(0), kept = T(0);
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        if (t[i] != ignore) {
            sum += loss[i];
            kept += T(1);
        }
    }
    sum = block_reduce(sum, false, red);
    kept = block_reduce(kept, false, red);
    if (threadIdx.x == 0) {
        const T d = mean ? (kept > T(0) ? kept : T(1)) : T(1);
        divisor[0] = d;
        total[0] = sum / d;
    }
}

extern "C" __global__ void cross_entropy_total_f32(const float* loss, const long long* t,
                                                   long long ignore, int N, int mean,
                                                   float* total, float* divisor) {
    cross_entropy_total<float>(loss, t, ignore, N, mean, total, divisor);
}

extern "C" __global__ void cross_entropy_total_f64(const double* loss, const long long* t,
                                                   long long ignore, int N, int mean,
                                                   double* total, double* divisor) {
    cross_entropy_total<double>(loss, t, ignore, N, mean, total, divisor);
}
