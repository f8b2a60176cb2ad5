// Kernel-level faults for the GPU adversarial tests (tests/adversarial/gpu): the only CUDA source here
// besides the shipped baseline's, inlined into the fault candidates by gpu_candidates.py.
#include <cuda_runtime.h>

// Never returns: spins on a flag that nothing ever sets (a volatile read each time, so the loop stays).
__global__ void adv_fault_spin(const volatile int* flag) {
  while (flag[0] == 0) {
    __nanosleep(1000);
  }
}

// Writes through an address the caller chose at run time (the compiler cannot prove it is bad).
__global__ void adv_fault_write(float* target) { target[threadIdx.x] = 1.f; }

extern "C" int adv_fault_spin_launch(const int* flag, cudaStream_t stream) {
  adv_fault_spin<<<1, 1, 0, stream>>>(flag);
  return (int)cudaGetLastError();
}

extern "C" int adv_fault_write_launch(long long address, cudaStream_t stream) {
  adv_fault_write<<<1, 32, 0, stream>>>(reinterpret_cast<float*>(address));
  return (int)cudaGetLastError();
}
