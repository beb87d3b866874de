// The global gradient norm, the clip factor, the clip, and the finite check: no host read.
//
// Replaces: optim/clip.py total_norm and clip_coefficient as Optimizer.clip_grad_norm and
// Optimizer.grad_norm apply them to the flat gradient buffer g (n,), and the trainer's
// isfinite(loss) & isfinite(norm) & healthy.
//
//     norm = sqrt(sum_i g_i^2)                                       (accumulated in double)
//     coef = min(1, max_norm / (norm + 1e-6)),  1 where norm is NaN or Inf
//     g    = g * coef                                                (skipped where coef == 1)
//     ok   = isfinite(loss) && isfinite(norm) && prev
//
// Every result stays on the device as a 0-d array (norm, coef, ok): the host never waits.
//
// Launches (T = float or double; 256 threads per block everywhere):
//   1. grad_sumsq_partial: grid B = min(ceil(n / 256), 1024) blocks. Thread j of the grid
//      (j = block * 256 + thread) sums g_i^2 for i = j, j + 256 B, j + 2 (256 B), ... in that
//      order, in double (a float's square is exact in double); the block adds its 256 sums
//      (block_sum below) into partial[block].
//   2. grad_norm_finish: one block. Thread t sums partial[t], partial[t + 256], ... in order;
//      block_sum; thread 0 writes norm (rounded to T) and coef (in T, as the reference).
//   3. grad_scale: the grid of launch 1; g_i = g_i * coef, read from the device.
//   (step_ok: one thread, the finite check.)
// The order of every addition is fixed (no atomics), so the norm is deterministic, and a
// NumPy transcription (tests/fast/test_cuda_step.py) reproduces it bit for bit.
// Products and sums use __dmul_rn / __dadd_rn so no fused multiply-add changes the rounding.
//
// block_sum: within each warp a butterfly of __shfl_xor_sync (offsets 16, 8, 4, 2, 1: after
// it every lane holds the same value, the pairwise tree sum of the 32 lanes), the 8 warp sums
// go through shared memory, and warp 0 sums them the same way (lanes 8..31 holding 0).
//
// kernels: grad_sumsq_partial_f32 grad_sumsq_partial_f64 grad_norm_finish_f32
// kernels: grad_norm_finish_f64 grad_scale_f32 grad_scale_f64 step_ok_f32 step_ok_f64

#define BLOCK 256

__device__ __forceinline__ bool finite_value(float x) {
    return fabsf(x) < __int_as_float(0x7f800000);  // false for +-inf and NaN
}
__device__ __forceinline__ bool finite_value(double x) {
    return fabs(x) < __longlong_as_double(0x7ff0000000000000LL);
}

// the sum of v over the block's 256 threads (the order above); valid in thread 0
__device__ double block_sum(double v) {
    __shared__ double warp_sums[BLOCK / 32];
    for (int offset = 16; offset > 0; offset >>= 1)
        v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < BLOCK / 32 ? warp_sums[lane] : 0.0;
        for (int offset = 16; offset > 0; offset >>= 1)
            v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

template <typename T>
__device__ void grad_sumsq_partial(const T* g, unsigned long long n, double* partial) {
    double acc = 0.0;
    unsigned long long stride = (unsigned long long)BLOCK * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += stride) {
        double x = (double)g[i];
        acc = __dadd_rn(acc, __dmul_rn(x, x));
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <typename T>
__device__ void grad_norm_finish(const double* partial, unsigned int parts, T max_norm,
                                 T* norm_out, T* coef_out) {
    double acc = 0.0;
    for (unsigned int i = threadIdx.x; i < parts; i += BLOCK) acc = __dadd_rn(acc, partial[i]);
    acc = block_sum(acc);
    if (threadIdx.x == 0) {
        T norm = (T)sqrt(acc);
        T coef = (T)1;
        if (finite_value(norm)) {
            T c = max_norm / (norm + (T)1e-6);  // as the reference: in T, then min(1, c)
            coef = c < (T)1 ? c : (T)1;
        }
        *norm_out = norm;
        *coef_out = coef;
    }
}

template <typename T>
__device__ void grad_scale(T* g, unsigned long long n, const T* coef) {
    T c = *coef;
    if (c == (T)1) return;  // g * 1 == g: nothing to write
    unsigned long long stride = (unsigned long long)BLOCK * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += stride)
        g[i] = g[i] * c;
}

template <typename T>
__device__ void step_ok(const T* loss, const T* norm, const bool* prev, bool* ok) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *ok = finite_value(*loss) && finite_value(*norm) && *prev;
}

extern "C" __global__ void grad_sumsq_partial_f32(const float* g, unsigned long long n,
                                                  double* partial) {
    grad_sumsq_partial<float>(g, n, partial);
}
extern "C" __global__ void grad_sumsq_partial_f64(const double* g, unsigned long long n,
                                                  double* partial) {
    grad_sumsq_partial<double>(g, n, partial);
}
extern "C" __global__ void grad_norm_finish_f32(const double* partial, unsigned int parts,
                                                float max_norm, float* norm, float* coef) {
    grad_norm_finish<float>(partial, parts, max_norm, norm, coef);
}
extern "C" __global__ void grad_norm_finish_f64(const double* partial, unsigned int parts,
                                                double max_norm, double* norm, double* coef) {
    grad_norm_finish<double>(partial, parts, max_norm, norm, coef);
}
extern "C" __global__ void grad_scale_f32(float* g, unsigned long long n, const float* coef) {
    grad_scale<float>(g, n, coef);
}
extern "C" __global__ void grad_scale_f64(double* g, unsigned long long n, const double* coef) {
    grad_scale<double>(g, n, coef);
}
extern "C" __global__ void step_ok_f32(const float* loss, const float* norm, const bool* prev,
                                       bool* ok) {
    step_ok<float>(loss, norm, prev, ok);
}
extern "C" __global__ void step_ok_f64(const double* loss, const double* norm,
                                       const bool* prev, bool* ok) {
    step_ok<double>(loss, norm, prev, ok);
}
