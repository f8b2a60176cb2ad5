"""kb_mini/swish in C++: one pass, OpenMP over the elements of a large tensor."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor swish(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32");
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t n = x.numel();
  // threads only for large tensors: at the suite's sizes their start and barrier cost more than the work
  #pragma omp parallel for schedule(static) if (n > (1 << 22))
  for (int64_t i = 0; i < n; ++i) {
    const float v = xp[i];
    yp[i] = v / (1.f + std::exp(-v));
  }
  return y;
}
"""

_ext = load_inline(
    name="kbm_swish_cpu",
    cpp_sources=CPP_SOURCE,
    functions=["swish"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.swish(x.contiguous())
