// LayerNorm over the last axis, forward and backward. Replaces the reference math of
// ops/layernorm.py (LayerNorm.forward / backward) for CuPy float32 and float64 arrays.
//
// Shapes: x (N, D) C-contiguous rows, gamma (D,), beta (D,).
// Forward, per row (the reference's scaled math, which never overflows for finite x):
//     a = max_j |x_j| (1 where it is not > 0),   xs = x / a   (in [-1, 1])
//     mu_s = sum(xs) / D,   var_s = sum((xs - mu_s)^2) / D          (biased variance / a^2)
//     sd = hypot(a sqrt(var_s), sqrt(eps)),   rstd = 1 / sd           (N, 1)
//     x_hat = (xs - mu_s) * (a / sd),   y = x_hat * gamma + beta        (N, D)
// Three reads of the row (max |x|, sum, sum of squares: an exact two-pass variance, so rows
// like 1e4 + noise keep float32's precision), then one write pass; the row is small (D of
// a model: 2-16 KB) and is re-read from the L1/L2 cache, not from DRAM.
// Backward dx, per row, with g = dL/dy and g_hat = g * gamma:
//     dx = rstd * (g_hat - sum(g_hat) / D - x_hat * sum(g_hat * x_hat) / D)
// Backward dgamma = sum over rows of g * x_hat, dbeta = sum over rows of g: a column sum,
// deterministic in two stages: layer_norm_param_partials writes one partial sum per chunk
// of rows (part (2, chunks, D)), then the chunks are summed in a fixed order. In one launch,
// layer_norm_param_sums: the last block of each column block to finish (an atomic counter
// of arrivals, reset by that block for the next launch) sums the chunks, in order.
//
// Launch layout: forward and dx: one block per row (grid N), blockDim a multiple of 32
// (128 / 256 / 1024, chosen in Python by D); thread k handles columns k, k + blockDim, ...;
// block reductions: warp shuffle (xor butterfly), then the 32 warp results in shared memory
// reduced by warp 0 (32 elements of static shared memory). Partials: grid (ceil(D / blockDim),
// chunks), one thread per column, looping over its chunk of rows (coalesced reads).
// Accumulation is in the input dtype (float for float32, double for float64).

#include "block_reduce.cuh"  // warp_sum, warp_max, block_reduce

template <typename T>
__device__ void layer_norm_forward(const T* x, const T* gamma, const T* beta, T eps, int D,
                                   T* y, T* x_hat, T* rstd) {
    __shared__ T red[32];
    const long long row = blockIdx.x;
    const T* xr = x + row * D;
    T a = T(0);  // max |x| (fmax ignores NaN; a NaN row stays NaN through the sums below)
    for (int j = threadIdx.x; j < D; j += blockDim.x) a = fmax(a, fabs(xr[j]));
    a = block_reduce(a, true, red);
    if (!(a > T(0))) a = T(1);  // an all-zero row: divide by 1
    T s = T(0);
    for (int j = threadIdx.x; j < D; j += blockDim.x) s += xr[j] / a;
    const T mu = block_reduce(s, false, red) / T(D);  // mean(x / a)
    T ss = T(0);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        const T c = xr[j] / a - mu;
        ss += c * c;
    }
    const T var = block_reduce(ss, false, red) / T(D);  // var(x) / a^2, in [0, 1]
    const T sd = hypot(a * sqrt(var), sqrt(eps));       // sqrt(var(x) + eps)
    const T f = a / sd;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        const T h = (xr[j] / a - mu) * f;
        x_hat[row * D + j] = h;
        y[row * D + j] = h * gamma[j] + beta[j];
    }
    if (threadIdx.x == 0) rstd[row] = T(1) / sd;
}

extern "C" __global__ void layer_norm_forward_f32(const float* x, const float* gamma,
                                                  const float* beta, float eps, int D, float* y,
                                                  float* x_hat, float* rstd) {
    layer_norm_forward<float>(x, gamma, beta, eps, D, y, x_hat, rstd);
}

extern "C" __global__ void layer_norm_forward_f64(const double* x, const double* gamma,
                                                  const double* beta, double eps, int D,
                                                  double* y, double* x_hat, double* rstd) {
    layer_norm_forward<double>(x, gamma, beta, eps, D, y, x_hat, rstd);
}

template <typename T>
__device__ void layer_norm_backward_dx(const T* g, const T* x_hat, const T* rstd,
                                       const T* gamma, int D, T* dx) {
    __shared__ T red[32];
    const long long row = blockIdx.x;
    const T* gr = g + row * D;
    const T* hr = x_hat + row * D;
    T s_g = T(0), s_gx = T(0);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        const T gh = gr[j] * gamma[j];
        s_g += gh;
        s_gx += gh * hr[j];
    }
    const T mean_g = block_reduce(s_g, false, red) / T(D);    // mean(g_hat)
    const T mean_gx = block_reduce(s_gx, false, red) / T(D);  // mean(g_hat * x_hat)
    const T r = rstd[row];
    for (int j = threadIdx.x; j < D; j += blockDim.x)
        dx[row * D + j] = r * (gr[j] * gamma[j] - mean_g - hr[j] * mean_gx);
}

extern "C" __global__ void layer_norm_backward_dx_f32(const float* g, const float* x_hat,
                                                      const float* rstd, const float* gamma,
                                                      int D, float* dx) {
    layer_norm_backward_dx<float>(g, x_hat, rstd, gamma, D, dx);
}

extern "C" __global__ void layer_norm_backward_dx_f64(const double* g, const double* x_hat,
                                                      const double* rstd, const double* gamma,
                                                      int D, double* dx) {
    layer_norm_backward_dx<double>(g, x_hat, rstd, gamma, D, dx);
}

// part[0, c, j] = sum of g * x_hat, part[1, c, j] = sum of g over rows [c * rows, (c+1) * rows)
// of column j (grid (ceil(D / blockDim), chunks)). With one chunk these are dgamma, dbeta.
template <typename T>
__device__ void chunk_sums(const T* g, const T* x_hat, int N, int D, int rows, int j, T* part) {
    const int c = blockIdx.y;
    const int end = min(N, (c + 1) * rows);
    T s_gx = T(0), s_g = T(0);
    for (long long i = (long long)c * rows; i < end; ++i) {
        const T gi = g[i * D + j];
        s_gx += gi * x_hat[i * D + j];
        s_g += gi;
    }
    part[(long long)c * D + j] = s_gx;
    part[((long long)gridDim.y + c) * D + j] = s_g;
}

template <typename T>
__device__ void layer_norm_param_partials(const T* g, const T* x_hat, int N, int D, int rows,
                                          T* part) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < D) chunk_sums(g, x_hat, N, D, rows, j, part);
}

extern "C" __global__ void layer_norm_param_partials_f32(const float* g, const float* x_hat,
                                                         int N, int D, int rows, float* part) {
    layer_norm_param_partials<float>(g, x_hat, N, D, rows, part);
}

extern "C" __global__ void layer_norm_param_partials_f64(const double* g, const double* x_hat,
                                                         int N, int D, int rows, double* part) {
    layer_norm_param_partials<double>(g, x_hat, N, D, rows, part);
}

// One launch for dgamma and dbeta with several chunks: each block writes its chunk's partial
// sums as layer_norm_param_partials does, then counts itself in arrived[blockIdx.x]; the last
// block of its column block to arrive adds the chunks' partials, chunk 0 first (the same
// order every time: deterministic), into out[0, j] (dgamma) and out[1, j] (dbeta), and sets
// the counter back to 0. arrived (one uint per column block) starts at 0; the launches that
// share it must not overlap (one stream).
template <typename T>
__device__ void layer_norm_param_sums(const T* g, const T* x_hat, int N, int D, int rows,
                                      T* part, unsigned int* arrived, T* out) {
    __shared__ bool last;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int chunks = gridDim.y;
    if (j < D) chunk_sums(g, x_hat, N, D, rows, j, part);  // as layer_norm_param_partials
    __threadfence();  // this block's partials are visible to every block before it counts
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&arrived[blockIdx.x], 1u) == (unsigned)(chunks - 1);
    __syncthreads();
    if (!last) return;
    if (j < D) {
        const volatile T* p = part;  // written by other blocks: read from memory, not a cache
        T a = T(0), b = T(0);
        for (int k = 0; k < chunks; ++k) {
            a += p[(long long)k * D + j];
            b += p[((long long)chunks + k) * D + j];
        }
        out[j] = a;
        out[D + j] = b;
    }
    if (threadIdx.x == 0) arrived[blockIdx.x] = 0u;  // ready for the next launch
}

extern "C" __global__ void layer_norm_param_sums_f32(const float* g, const float* x_hat, int N,
                                                     int D, int rows, float* part,
                                                     unsigned int* arrived, float* out) {
    layer_norm_param_sums<float>(g, x_hat, N, D, rows, part, arrived, out);
}

extern "C" __global__ void layer_norm_param_sums_f64(const double* g, const double* x_hat,
                                                     int N, int D, int rows, double* part,
                                                     unsigned int* arrived, double* out) {
    layer_norm_param_sums<double>(g, x_hat, N, D, rows, part, arrived, out);
}
