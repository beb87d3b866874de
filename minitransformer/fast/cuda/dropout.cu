// Dropout with the random bits made inside the kernel, and dropout fused with the residual add.
//
// Replaces: ops/dropout.py  Dropout (forward and backward) and DropoutAdd.
//
// The mask. Element i (the flat C-order index, as a 32-bit unsigned integer) is kept when
//
//     bits(i) = h(h(i ^ k1) ^ k2) >= threshold        h = lowbias32 (C. Wellons)
//
// where k1, k2 (the two 32-bit keys of this draw) and threshold = min(round(p 2^32), 2^32 - 1)
// come from the host: Generator.dropout_keys(p) in backend/random.py. That is exactly
// backend.random.counter_bits, so the kernel's mask is bit for bit the mask
// Generator.keep_mask makes on the device, and backward REGENERATES it from (k1, k2): no mask
// is stored between forward and backward.
//
// The math (T = float or double, scale = 1 / (1 - p) rounded to T on the host):
//     dropout_apply:  y[i] = keep(i) ? x[i] * scale : 0     forward (x) and backward (the
//                                                           gradient g in place of x)
//     dropout_add:    y[i] = r[i] + (keep(i) ? x[i] * scale : 0)   forward of DropoutAdd
//                     (its backward is dr = g and dx = dropout_apply(g))
// Products and sums use __fmul_rn / __fadd_rn (and the double versions): a plain `r + x * s`
// may be contracted into one fused multiply-add, which rounds once where the reference
// (two array operations) rounds twice; the intrinsics keep the results bit-exact for
// normal numbers (float32 subnormals are flushed: CuPy compiles with -ftz=true).
//
// Launch: a 1-D grid-stride loop, 256 threads per block, grid = min(ceil(n / 256), 65536)
// (chosen in fast/cupy/dropout.py). n is 64-bit; past 2^32 elements the index i wraps
// (i mod 2^32 is hashed), as the reference's uint32 arange does, so the bits still match.
//
// In a captured CUDA graph (fast/gpu/cuda_graph.py) a value passed to a kernel is frozen into
// the graph (the same mask at every replay), so the *_graph_* kernels read the draw's two keys
// from device memory, keys[0] = k1 and keys[1] = k2, written there before each replay.
//
// kernels: dropout_apply_f32 dropout_apply_f64 dropout_add_f32 dropout_add_f64
// kernels: dropout_apply_graph_f32 dropout_apply_graph_f64
// kernels: dropout_add_graph_f32 dropout_add_graph_f64

__device__ __forceinline__ unsigned int lowbias32(unsigned int x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

__device__ __forceinline__ bool keep(unsigned long long i, unsigned int k1, unsigned int k2,
                                     unsigned int threshold) {
    unsigned int index = (unsigned int)i;  // the flat index mod 2^32, as the reference
    return lowbias32(lowbias32(index ^ k1) ^ k2) >= threshold;
}

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// y = keep ? x * scale : 0 (x and y may be the same array)
template <typename T>
__device__ void dropout_apply(const T* x, T* y, unsigned long long n, unsigned int k1,
                              unsigned int k2, unsigned int threshold, T scale) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        y[i] = keep(i, k1, k2, threshold) ? mul_rn(x[i], scale) : (T)0;
    }
}

// y = r + (keep ? x * scale : 0)
template <typename T>
__device__ void dropout_add(const T* x, const T* r, T* y, unsigned long long n,
                            unsigned int k1, unsigned int k2, unsigned int threshold, T scale) {
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        T dropped = keep(i, k1, k2, threshold) ? mul_rn(x[i], scale) : (T)0;
        y[i] = add_rn(r[i], dropped);
    }
}

extern "C" __global__ void dropout_apply_f32(const float* x, float* y, unsigned long long n,
                                             unsigned int k1, unsigned int k2,
                                             unsigned int threshold, float scale) {
    dropout_apply<float>(x, y, n, k1, k2, threshold, scale);
}

extern "C" __global__ void dropout_apply_f64(const double* x, double* y, unsigned long long n,
                                             unsigned int k1, unsigned int k2,
                                             unsigned int threshold, double scale) {
    dropout_apply<double>(x, y, n, k1, k2, threshold, scale);
}

extern "C" __global__ void dropout_add_f32(const float* x, const float* r, float* y,
                                           unsigned long long n, unsigned int k1,
                                           unsigned int k2, unsigned int threshold,
                                           float scale) {
    dropout_add<float>(x, r, y, n, k1, k2, threshold, scale);
}

extern "C" __global__ void dropout_add_f64(const double* x, const double* r, double* y,
                                           unsigned long long n, unsigned int k1,
                                           unsigned int k2, unsigned int threshold,
                                           double scale) {
    dropout_add<double>(x, r, y, n, k1, k2, threshold, scale);
}

extern "C" __global__ void dropout_apply_graph_f32(const float* x, float* y,
                                                   unsigned long long n,
                                                   const unsigned int* keys,
                                                   unsigned int threshold, float scale) {
    dropout_apply<float>(x, y, n, keys[0], keys[1], threshold, scale);
}

extern "C" __global__ void dropout_apply_graph_f64(const double* x, double* y,
                                                   unsigned long long n,
                                                   const unsigned int* keys,
                                                   unsigned int threshold, double scale) {
    dropout_apply<double>(x, y, n, keys[0], keys[1], threshold, scale);
}

extern "C" __global__ void dropout_add_graph_f32(const float* x, const float* r, float* y,
                                                 unsigned long long n,
                                                 const unsigned int* keys,
                                                 unsigned int threshold, float scale) {
    dropout_add<float>(x, r, y, n, keys[0], keys[1], threshold, scale);
}

extern "C" __global__ void dropout_add_graph_f64(const double* x, const double* r, double* y,
                                                 unsigned long long n,
                                                 const unsigned int* keys,
                                                 unsigned int threshold, double scale) {
    dropout_add<double>(x, r, y, n, keys[0], keys[1], threshold, scale);
}
