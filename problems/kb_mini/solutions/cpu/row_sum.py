"""kb_mini/row_sum in C++: one row per OpenMP task, eight partial sums so the loop vectorises."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor row_sum(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "x: [B, N] float32");
  const int64_t rows = x.size(0), n = x.size(1);
  auto y = torch::empty({rows}, x.options());
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // threads only for large tensors: at the suite's sizes their start and barrier cost more than the work
  #pragma omp parallel for schedule(static) if (rows * n > (1 << 22))
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * n;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += row[i + j];
    float total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; ++i) total += row[i];
    yp[r] = total;
  }
  return y;
}
"""

_ext = load_inline(
    name="kbm_row_sum_cpu",
    cpp_sources=CPP_SOURCE,
    functions=["row_sum"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.row_sum(x.contiguous())
