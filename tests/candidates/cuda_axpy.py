"""A minimal CUDA candidate in the split form: a pure-CUDA .cu (kernel + launcher), the binding in C++.

Used to show that CUDA candidates compile on a machine without a GPU and that the ptxas report of that
compile reaches the result. Its ModelNew is not a selective scan: compile-only tests use it.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>

__global__ void axpy_kernel(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

void launch_axpy(const float* x, float* y, float a, int n, cudaStream_t stream) {
  axpy_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, a, n);
}
"""

CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void launch_axpy(const float* x, float* y, float a, int n, cudaStream_t stream);

torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && y.is_contiguous(), "contiguous CUDA tensors");
  auto out = y.clone();
  launch_axpy(x.data_ptr<float>(), out.data_ptr<float>(), static_cast<float>(a), static_cast<int>(x.numel()),
              c10::cuda::getCurrentCUDAStream());
  return out;
}
"""

_ext = load_inline(
    name="test_cuda_axpy",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["axpy"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self, d_model: int, d_state: int):
        super().__init__()
        self.D = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.axpy(x, x, 1.0)
