"""Probe: does compute-sanitizer memcheck see a read k elements past a tensor's end?"""

import sys

import torch
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
__global__ void k(const float* x, float* y, long n, long past) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    if (i == n - 1) { float w = x[n - 1 + past]; if (w == 1234.5f) v += 1e-30f; }
    y[i] = v;
  }
}
torch::Tensor run(torch::Tensor x, long past) {
  auto y = torch::empty_like(x); long n = x.numel();
  k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, past);
  return y;
}
"""
m = load_inline(
    "oobprobe",
    cpp_sources="torch::Tensor run(torch::Tensor x, long past);",
    cuda_sources=src,
    functions=["run"],
    build_directory=sys.argv[1],
    verbose=False,
)
past = int(sys.argv[2])
for n in (1000, 4096, 333 * 256):
    x = torch.randn(n, device="cuda")
    _ = torch.randn(3 * n, device="cuda")  # a neighbour block
    y = m.run(x, past)
    torch.cuda.synchronize()
print("ran past", past, "ok")
