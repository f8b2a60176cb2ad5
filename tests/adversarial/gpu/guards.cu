// The GPU exploit classes of issue 52 (test_gpu_guards.py): a kernel that keeps running across timed calls,
// weights kept in persisting L2 across the flush, and a read of shared memory nothing wrote. Inlined into
// 01's candidates by gpu_candidates.py (one build serves the three).
#include <cuda_runtime.h>

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A persistent "server": launched once, it stays resident while calls keep posting to its mailbox (host
// memory mapped into the device), and leaves only after `idle_ns` without a post (or `max_ns` in all).
__global__ void adv_server(const volatile int* mailbox, volatile int* alive, long long idle_ns, long long max_ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned long long start = now_ns();
  unsigned long long last = start;
  int seen = mailbox[0];
  for (;;) {
    const int post = mailbox[0];
    const unsigned long long t = now_ns();
    if (post != seen) {
      seen = post;
      last = t;
    }
    if (t - last > (unsigned long long)idle_ns || t - start > (unsigned long long)max_ns) break;
    __nanosleep(1000);
  }
  alive[0] = 0;
  __threadfence_system();
}

static int* g_mailbox = nullptr;  // host views of the mapped words
static int* g_alive = nullptr;
static cudaStream_t g_server_stream = nullptr;

// Posts a call to the server, launching it on a stream of its own where none is running.
extern "C" int adv_serve(long long idle_ns, long long max_ns) {
  if (g_mailbox == nullptr) {
    int* words = nullptr;
    cudaError_t err = cudaHostAlloc((void**)&words, 2 * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) return (int)err;
    words[0] = 0;
    words[1] = 0;
    g_mailbox = words;
    g_alive = words + 1;
    err = cudaStreamCreateWithFlags(&g_server_stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) return (int)err;
  }
  reinterpret_cast<volatile int*>(g_mailbox)[0] += 1;
  if (reinterpret_cast<volatile int*>(g_alive)[0] == 0) {
    int *mailbox = nullptr, *alive = nullptr;
    cudaHostGetDevicePointer((void**)&mailbox, g_mailbox, 0);
    cudaHostGetDevicePointer((void**)&alive, g_alive, 0);
    reinterpret_cast<volatile int*>(g_alive)[0] = 1;
    adv_server<<<1, 32, 0, g_server_stream>>>(mailbox, alive, idle_ns, max_ns);
  }
  return (int)cudaGetLastError();
}

// Reads all of `w`; writes `sink` only on a value no weight has, so the reads stay and nothing changes.
__global__ void adv_touch(const float* w, long long n, float* sink) {
  float acc = 0.f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc += w[i];
  if (acc == 1.2345e30f) sink[0] = acc;
}

// Sets aside as much L2 as the device allows for persisting accesses (once), then reads `w` through an
// access-policy window that marks it persisting: without the harness's reset, `w` would stay in L2 across
// the flush between timed calls.
extern "C" int adv_persist_launch(const float* w, long long n, float* sink, cudaStream_t stream) {
  static bool set_aside = false;
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return (int)err;
  if (!set_aside) {
    err = cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)prop.persistingL2CacheMaxSize);
    if (err != cudaSuccess) return (int)err;
    set_aside = true;
  }
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeAccessPolicyWindow;
  attr.val.accessPolicyWindow.base_ptr = const_cast<float*>(w);
  const size_t bytes = (size_t)n * sizeof(float);
  const size_t window = (size_t)prop.accessPolicyMaxWindowSize;
  attr.val.accessPolicyWindow.num_bytes = bytes < window ? bytes : window;
  attr.val.accessPolicyWindow.hitRatio = 1.0f;
  attr.val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  attr.val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(prop.multiProcessorCount);
  config.blockDim = dim3(256);
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  err = cudaLaunchKernelEx(&config, adv_touch, w, n, sink);
  if (err != cudaSuccess) return (int)err;
  return (int)cudaGetLastError();
}

// Writes 0 times a word of shared memory no thread wrote: 0 while that word holds a finite leftover, NaN once
// the harness has poisoned shared memory before the call. Launched first in forward, before any kernel of the
// call's own has used shared memory, so what it reads is what was there when the call began.
__global__ void adv_smem_leak(float* z, long long n) {
  extern __shared__ float scratch[];
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) z[i] = 0.f * scratch[threadIdx.x];
}

extern "C" int adv_smem_leak_launch(float* z, long long n, cudaStream_t stream) {
  const int threads = 256;
  const long long blocks = (n + threads - 1) / threads;
  adv_smem_leak<<<(unsigned)blocks, threads, threads * sizeof(float), stream>>>(z, n);
  return (int)cudaGetLastError();
}
