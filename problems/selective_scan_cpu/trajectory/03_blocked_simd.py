"""Step 3: eight neighbouring channels per task, vectorised across channels, softplus fused.

Step 2 makes 67M scalar double `exp` calls at the timed shape and loads single floats with a stride.
Channels are contiguous in x and delta ([B, L, D]), so a task now owns 8 adjacent channels: each
timestep loads 8 floats at once, the B/C rows are shared by the 8 lanes, and the decay comes from a
float polynomial the compiler vectorises. It computes expm1(z) = dA - 1, not dA: where the decay is
close to 1 (long memory, the case that needs precision) expm1 keeps full relative precision, and the
float64 state update h += expm1(z)*h + dt*B*x loses nothing. softplus runs in the same loop, so delta
never takes a separate pass through memory.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>
#include <cstdint>
#include <cstring>

constexpr int kLanes = 8;
constexpr int kMaxState = 32;

// exp(v) for v <= 0: v*log2(e) = k + f with f in [-0.5, 0.5]; 2^f by a degree-6 polynomial.
static inline float exp_nonpos(float v) {
  v = v < -87.f ? -87.f : v;
  const float t = v * 1.44269504f;
  const float k = std::nearbyint(t);
  const float f = t - k;
  float p = 1.535336188e-4f;
  p = p * f + 1.339887440e-3f;
  p = p * f + 9.618437357e-3f;
  p = p * f + 5.550332471e-2f;
  p = p * f + 2.402264791e-1f;
  p = p * f + 6.931472028e-1f;
  p = p * f + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// expm1(v) for v <= 0: Taylor near 0 (relative error ~2e-8), exp(v) - 1 further out, where the decay
// is fast and an absolute error of 1e-7 cannot accumulate.
static inline float expm1_nonpos(float v) {
  const float near0 =
      v * (1.f + v * (0.5f + v * (1.f / 6 + v * (1.f / 24 + v * (1.f / 120 + v * (1.f / 720 + v * (1.f / 5040)))))));
  return v > -0.3466f ? near0 : exp_nonpos(v) - 1.f;
}

static inline float softplus(float v) {  // torch's threshold: identity above 20
  return v > 20.f ? v : std::log1p(std::exp(v));
}

torch::Tensor scan(torch::Tensor x, torch::Tensor delta_pre, torch::Tensor A,
                   torch::Tensor Bm, torch::Tensor Cm, torch::Tensor Dskip) {
  const int64_t batch = x.size(0), len = x.size(1), dm = x.size(2), ns = A.size(1);
  TORCH_CHECK(ns <= kMaxState, "d_state must be <= ", kMaxState);
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* dp = delta_pre.data_ptr<float>();
  const float* Ap = A.data_ptr<float>();
  const float* Bp = Bm.data_ptr<float>();
  const float* Cp = Cm.data_ptr<float>();
  const float* Dp = Dskip.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t blocks = (dm + kLanes - 1) / kLanes;

  #pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < batch * blocks; ++task) {
    const int64_t b = task / blocks, d0 = (task % blocks) * kLanes;
    const int lanes = static_cast<int>(std::min<int64_t>(kLanes, dm - d0));
    alignas(32) float a[kMaxState][kLanes] = {};
    alignas(64) double h[kMaxState][kLanes] = {};
    alignas(32) float skip[kLanes] = {};
    for (int k = 0; k < lanes; ++k) {
      skip[k] = Dp[d0 + k];
      for (int64_t n = 0; n < ns; ++n) a[n][k] = Ap[(d0 + k) * ns + n];
    }
    for (int64_t t = 0; t < len; ++t) {
      const int64_t row = b * len + t;
      alignas(32) float dt[kLanes] = {}, xt[kLanes] = {};
      alignas(64) double acc[kLanes] = {};
      for (int k = 0; k < lanes; ++k) {
        dt[k] = softplus(dp[row * dm + d0 + k]);
        xt[k] = xp[row * dm + d0 + k];
      }
      const float* b_row = Bp + row * ns;
      const float* c_row = Cp + row * ns;
      for (int64_t n = 0; n < ns; ++n) {
        const float bn = b_row[n], cn = c_row[n];
        #pragma omp simd
        for (int k = 0; k < kLanes; ++k) {
          const double decay_m1 = expm1_nonpos(dt[k] * a[n][k]);
          h[n][k] += decay_m1 * h[n][k] + static_cast<double>(dt[k] * bn) * xt[k];
          acc[k] += h[n][k] * cn;
        }
      }
      for (int k = 0; k < lanes; ++k) yp[row * dm + d0 + k] = static_cast<float>(acc[k] + static_cast<double>(xt[k]) * skip[k]);
    }
  }
  return y;
}
"""

_ext = load_inline(
    name="scan_blocked_simd",
    cpp_sources=CPP_SOURCE,
    functions=["scan"],
    extra_cflags=["-O3", "-fopenmp", "-march=native"],
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        A = -torch.exp(self.A_log)
        delta_pre = self.proj_delta(x).contiguous()  # softplus is fused into the scan
        B = self.proj_B(x).contiguous()
        C = self.proj_C(x).contiguous()
        return _ext.scan(x, delta_pre, A.contiguous(), B, C, self.D.contiguous())
