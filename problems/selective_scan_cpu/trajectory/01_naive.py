"""Step 1: the recurrence in plain C++, one thread, projections and softplus left to torch.

The hidden state lives in a [B, D, N] float64 tensor and every element goes through an accessor: a
direct transcription of the reference loop, to get a correct baseline first. The state is float64
because the long_memory case (decay ~0.999 over 2100 steps) sums ~1000 terms per state: an fp32
state drifts by ~1e-3 there, past the tolerance against float64 truth.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor scan(torch::Tensor x, torch::Tensor delta, torch::Tensor A,
                   torch::Tensor Bm, torch::Tensor Cm, torch::Tensor Dskip) {
  const int64_t batch = x.size(0), len = x.size(1), dm = x.size(2), ns = A.size(1);
  auto y = torch::empty_like(x);
  auto h = torch::zeros({batch, dm, ns}, x.options().dtype(torch::kFloat64));
  auto xa = x.accessor<float, 3>();
  auto da = delta.accessor<float, 3>();
  auto Aa = A.accessor<float, 2>();
  auto Ba = Bm.accessor<float, 3>();
  auto Ca = Cm.accessor<float, 3>();
  auto Da = Dskip.accessor<float, 1>();
  auto ya = y.accessor<float, 3>();
  auto ha = h.accessor<double, 3>();
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t d = 0; d < dm; ++d) {
        double acc = 0.0;
        for (int64_t n = 0; n < ns; ++n) {
          const double dt = da[b][t][d];
          const double dA = std::exp(dt * Aa[d][n]);
          ha[b][d][n] = dA * ha[b][d][n] + dt * Ba[b][t][n] * xa[b][t][d];
          acc += ha[b][d][n] * Ca[b][t][n];
        }
        ya[b][t][d] = static_cast<float>(acc + static_cast<double>(xa[b][t][d]) * Da[d]);
      }
    }
  }
  return y;
}
"""

_ext = load_inline(
    name="scan_naive",
    cpp_sources=CPP_SOURCE,
    functions=["scan"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, d_model: int, d_state: int):
        super().__init__()
        self.d_model, self.d_state = d_model, d_state
        self.A_log = nn.Parameter(torch.randn(d_model, d_state))
        self.proj_B = nn.Linear(d_model, d_state, bias=False)
        self.proj_C = nn.Linear(d_model, d_state, bias=False)
        self.proj_delta = nn.Linear(d_model, d_model, bias=True)
        self.D = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        A = -torch.exp(self.A_log)
        delta = F.softplus(self.proj_delta(x)).contiguous()
        B = self.proj_B(x).contiguous()
        C = self.proj_C(x).contiguous()
        return _ext.scan(x, delta, A.contiguous(), B, C, self.D.contiguous())
