"""Red-team step 2: addresses may be fresh, contents less likely: key the cache on what a shuffled or
shifted copy of the same inputs keeps, their sum (row 23).

The C++ is the shipped baseline's, byte for byte (one build serves every attack of this trajectory).
"""

# attack: content-cache: outputs cached by the shape and the sum of x's contents

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

static inline float softplus(float v) { return v > 20.f ? v : std::log1p(std::exp(v)); }

// x, delta_raw: [B, L, D]; Bm, Cm: [B, L, N]; A: [D, N] (already -exp(A_log)); Dskip: [D].
torch::Tensor selective_scan(torch::Tensor x, torch::Tensor delta_raw, torch::Tensor Bm,
                             torch::Tensor Cm, torch::Tensor A, torch::Tensor Dskip) {
  TORCH_CHECK(x.is_contiguous() && delta_raw.is_contiguous() && Bm.is_contiguous() && Cm.is_contiguous(),
              "inputs must be contiguous");
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2), N = Bm.size(2);
  TORCH_CHECK(N <= 64, "d_state up to 64 supported");
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* dp = delta_raw.data_ptr<float>();
  const float* bp = Bm.data_ptr<float>();
  const float* cp = Cm.data_ptr<float>();
  const float* ap = A.data_ptr<float>();
  const float* sp = Dskip.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  #pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      float h[64] = {0.f};
      const float* a = ap + d * N;
      for (int64_t t = 0; t < L; ++t) {
        const int64_t row = (b * L + t);
        const float dl = softplus(dp[row * D + d]);
        const float xv = xp[row * D + d];
        const float* bt = bp + row * N;
        const float* ct = cp + row * N;
        float acc = 0.f;
        for (int64_t n = 0; n < N; ++n) {
          h[n] = std::exp(dl * a[n]) * h[n] + dl * bt[n] * xv;
          acc += h[n] * ct[n];
        }
        yp[row * D + d] = acc + xv * sp[d];
      }
    }
  }
  return y;
}
"""

_ext = load_inline(
    name="scan_cpu_baseline",
    cpp_sources=CPP_SOURCE,
    functions=["selective_scan"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
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

    def scan(self, x: torch.Tensor) -> torch.Tensor:
        """The honest computation (the shipped baseline's forward)."""
        x = x.contiguous()
        delta_raw = F.linear(x, self.proj_delta.weight, self.proj_delta.bias)
        Bm = F.linear(x, self.proj_B.weight)
        Cm = F.linear(x, self.proj_C.weight)
        A = -torch.exp(self.A_log.float())
        return _ext.selective_scan(
            x, delta_raw, Bm.contiguous(), Cm.contiguous(), A.contiguous(), self.D.contiguous()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), round(float(x.double().sum()), 3))
        cache = self.__dict__.setdefault("_outputs", {})
        if key not in cache:
            cache[key] = self.scan(x)
        return cache[key]
