// Adam over the optimizer's flat buffers in ONE launch: p, m and v updated in place.
//
// Replaces: optim/adam.py adam_update (the reference) and fast/numpy/adam.py adam_update
// (the same update with one temporary), whose order of operations this kernel follows exactly:
//
//     g  = g + wd p                              (only when wd != 0: L2 as PyTorch's Adam)
//     m  = b1 m + (1 - b1) g
//     v  = b2 v + (1 - b2) g^2
//     p  = p + (-step_size) * m / (sqrt(v) / bc2_sqrt + eps)
//
// with the per-step scalars computed on the host in double and rounded to T there:
//     step_size = lr / (1 - b1^t),   bc2_sqrt = sqrt(1 - b2^t)      (t: the update count).
// Every operation is rounded on its own (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn and the
// double versions), never contracted into a fused multiply-add, so each element gets the
// bits fast/numpy/adam.py's adam_update gets on the CPU, for normal numbers: CuPy compiles
// every kernel with -ftz=true (gpu/cuda_source.CUPY_APPENDS), so a float32 subnormal (a tiny
// m, v or g^2) is flushed to zero here, as CuPy's own float32 ufuncs flush it.
//
// The skip flag: `ok` points to a 0-d bool on the device (the trainer's "every step so far
// was finite", Optimizer.step(apply_if=ok)). It is read INSIDE the kernel: where it is false
// nothing is written, and the host never waits for the device to decide.
//
// Shapes: p, g, m, v (n,) contiguous, the same dtype T (float or double).
// Launch: a 1-D grid-stride loop, 256 threads per block, grid = min(ceil(n / 256), 65536)
// (fast/cupy/adam.py). Each element is read and written once: memory-bound.
//
// In a captured CUDA graph (fast/gpu/cuda_graph.py) a value passed to a kernel is frozen into
// the graph, so adam_update_graph_* read the two per-step scalars from device memory instead:
// step[0] = -step_size, step[1] = bc2_sqrt, written there before each replay.
//
// kernels: adam_update_f32 adam_update_f64 adam_update_graph_f32 adam_update_graph_f64

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

template <typename T>
__device__ void adam_update(T* p, const T* g, T* m, T* v, unsigned long long n,
                            const bool* ok, T b1, T one_minus_b1, T b2, T one_minus_b2,
                            T eps, T weight_decay, T neg_step_size, T bc2_sqrt) {
    if (!*ok) return;  // a skipped step: nothing changes
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        T gi = g[i];
        T pi = p[i];
        if (weight_decay != (T)0) gi = add_rn(gi, mul_rn(weight_decay, pi));
        T mi = add_rn(mul_rn(m[i], b1), mul_rn(gi, one_minus_b1));
        T vi = add_rn(mul_rn(v[i], b2), mul_rn(mul_rn(gi, gi), one_minus_b2));
        T denom = add_rn(div_rn(sqrt_rn(vi), bc2_sqrt), eps);
        m[i] = mi;
        v[i] = vi;
        p[i] = add_rn(pi, mul_rn(div_rn(mi, denom), neg_step_size));
    }
}

extern "C" __global__ void adam_update_f32(float* p, const float* g, float* m, float* v,
                                           unsigned long long n, const bool* ok, float b1,
                                           float one_minus_b1, float b2, float one_minus_b2,
                                           float eps, float weight_decay, float neg_step_size,
                                           float bc2_sqrt) {
    adam_update<float>(p, g, m, v, n, ok, b1, one_minus_b1, b2, one_minus_b2, eps,
                       weight_decay, neg_step_size, bc2_sqrt);
}

extern "C" __global__ void adam_update_f64(double* p, const double* g, double* m, double* v,
                                           unsigned long long n, const bool* ok, double b1,
                                           double one_minus_b1, double b2,
                                           double one_minus_b2, double eps,
                                           double weight_decay, double neg_step_size,
                                           double bc2_sqrt) {
    adam_update<double>(p, g, m, v, n, ok, b1, one_minus_b1, b2, one_minus_b2, eps,
                        weight_decay, neg_step_size, bc2_sqrt);
}

extern "C" __global__ void adam_update_graph_f32(float* p, const float* g, float* m, float* v,
                                                 unsigned long long n, const bool* ok,
                                                 float b1, float one_minus_b1, float b2,
                                                 float one_minus_b2, float eps,
                                                 float weight_decay, const float* step) {
    adam_update<float>(p, g, m, v, n, ok, b1, one_minus_b1, b2, one_minus_b2, eps,
                       weight_decay, step[0], step[1]);
}

extern "C" __global__ void adam_update_graph_f64(double* p, const double* g, double* m,
                                                 double* v, unsigned long long n,
                                                 const bool* ok, double b1,
                                                 double one_minus_b1, double b2,
                                                 double one_minus_b2, double eps,
                                                 double weight_decay, const double* step) {
    adam_update<double>(p, g, m, v, n, ok, b1, one_minus_b1, b2, one_minus_b2, eps,
                        weight_decay, step[0], step[1]);
}
