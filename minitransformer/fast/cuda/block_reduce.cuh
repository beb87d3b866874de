// Block-wide reductions shared by the row kernels (layer_norm.cu, cross_entropy.cu,
// attention_softmax.cu): included by them with #include "block_reduce.cuh", which nvcc
// resolves next to the file and fast/gpu/cuda_source.py inlines for NVRTC (CuPy's
// compiler).
//
// warp_sum / warp_max: the 32 lanes of a warp combine their values by the xor butterfly
// (__shfl_xor_sync with offsets 16, 8, 4, 2, 1); every lane ends with the warp's result.
// block_reduce: each warp reduces its lanes, lane 0 of each warp writes its result to
// shared memory red[warp], warp 0 reduces those (at most 32: blockDim <= 1024), and every
// thread reads the block's result from red[0]. blockDim must be a multiple of 32.

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T> __device__ __forceinline__ T warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The sum (is_max = false) or max (true) of v over the block, returned to every thread.
template <typename T> __device__ T block_reduce(T v, bool is_max, T* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();  // red[] may still be read by the previous reduction
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T w = lane < warps ? red[lane] : (is_max ? T(-__int_as_float(0x7f800000)) : T(0));
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) red[0] = w;
    }
    __syncthreads();
    return red[0];
}
