// PIPER_HOST_DEVICE marks the inline functions of engine/cpu headers that the CUDA kernels
// call too (__host__ __device__ under nvcc), so that both backends compute alike.
#pragma once

#ifdef __CUDACC__
#define PIPER_HOST_DEVICE __host__ __device__
#else
#define PIPER_HOST_DEVICE
#endif
