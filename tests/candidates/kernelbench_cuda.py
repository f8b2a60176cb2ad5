"""CUDA candidates for tests/problems/kb/relu.py on a GPU: one extension (split form), an honest ReLU and
`torch.relu` beside a dummy launch of the extension's kernel on one element."""

from __future__ import annotations

_MODULE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
void launch_relu(const float* x, float* y, long n, cudaStream_t stream) {
  relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
"""
CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
void launch_relu(const float* x, float* y, long n, cudaStream_t stream);
torch::Tensor relu(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32);
  auto y = torch::empty_like(x);
  launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), c10::cuda::getCurrentCUDAStream());
  return y;
}
"""
_ext = load_inline(name="kb_relu_cuda", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["relu"],
                   extra_cuda_cflags=["-O3"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
'''

BODIES = {
    "honest": "        return _ext.relu(x.contiguous())\n",
    "library": "        _ext.relu(x[:1, :1].contiguous())\n        return torch.relu(x)\n",
}


def relu(kind: str) -> str:
    return _MODULE + BODIES[kind]
