// Memory and synchronisation faults for the sanitizer's GPU tests (test_gpu_sanitize.py): each leaves the
// candidate's output correct (its results go to a scratch tensor nobody reads), so only the sanitizer sees it.
#include <cuda_runtime.h>

// The float `past` floats past the end of `x` (n floats; past 1: x[n]): memcheck's invalid __global__ read.
// Harmless without the tool (the caching allocator's block goes on past a small tensor, or the next tensor
// does); under it every tensor is its own cudaMalloc with a padding buffer behind it.
__global__ void adv_oob_read(const float* x, long long n, long long past, float* sink) {
  if (threadIdx.x == 0 && blockIdx.x == 0) sink[0] = x[n + past - 1];
}

// Each thread writes its slot, then reads a slot another warp wrote, with no barrier in between: a
// read-after-write hazard on shared memory (racecheck).
__global__ void adv_smem_race(float* sink) {
  __shared__ float slots[256];
  slots[threadIdx.x] = (float)threadIdx.x;
  sink[threadIdx.x] = slots[(threadIdx.x + 32) % 256];
}

// Only thread 0 writes shared memory; every thread reads its own slot (initcheck, shared address space).
__global__ void adv_uninit_shared(float* sink) {
  __shared__ float slots[64];
  if (threadIdx.x == 0) slots[0] = 1.f;
  __syncthreads();
  sink[threadIdx.x] = slots[threadIdx.x];
}

// Reads global memory nothing wrote (a fresh cudaMalloc: torch.empty without the caching allocator).
__global__ void adv_uninit_global(const float* fresh, float* sink) { sink[threadIdx.x] = fresh[threadIdx.x]; }

extern "C" int adv_san_launch(int which, const float* x, long long n, long long past, float* sink,
                              cudaStream_t stream) {
  switch (which) {
    case 0: adv_oob_read<<<1, 32, 0, stream>>>(x, n, past, sink); break;
    case 1: adv_smem_race<<<1, 256, 0, stream>>>(sink); break;
    case 2: adv_uninit_shared<<<1, 64, 0, stream>>>(sink); break;
    default: adv_uninit_global<<<1, 64, 0, stream>>>(x, sink); break;
  }
  return (int)cudaGetLastError();
}
