"""Selective scan, step 03: one concatenated projection GEMM, bias + softplus fused into the scan.

The three projections become one library GEMM, P = x @ [W_delta; 0-pad; W_B; W_C]^T, so x is read
once and there is one launch instead of three. P's row is [delta_raw (D, padded to a multiple of 4)
| B (16) | C (16)], which keeps every row 16-byte aligned for the float4 broadcasts of B and C even
when D is odd. The delta bias and softplus move into the scan kernel (thread per (batch, channel),
16 states in registers, as in step 02), so the GEMM writes P and nothing else touches it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <cuda_runtime.h>

__device__ __forceinline__ float softplus_f(float z) { return z > 20.f ? z : log1pf(expf(z)); }

__device__ __forceinline__ float ex2(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
// m = dA - 1 = expm1(z) for z = delta * A <= 0. Near 0 (dA within 6% of 1, where long memories
// live) a degree-5 Taylor polynomial; elsewhere exp2 - 1. Carrying dA as 1 + m keeps its relative
// precision near 1e-11 at decay 0.999, where a rounded fp32 dA (6e-8) compounds over ~1000 steps.
__device__ __forceinline__ float ss_expm1(float z) {
  float p = fmaf(z, 1.f / 120.f, 1.f / 24.f);
  p = fmaf(p, z, 1.f / 6.f);
  p = fmaf(p, z, 0.5f);
  const float small = fmaf(p, z * z, z);
  return z > -0.0625f ? small : ex2(z * 1.4426950408889634f) - 1.f;
}
// h <- (1 + m) h + u with h carried as hi + lo (Fast2Sum): rounding h to fp32 at every step would
// otherwise accumulate to ~1e-6 of |h| over a long memory (the fp32 reference's own error there).
#define SS_UPDATE(hh, ll, m, u)                                   \
  {                                                               \
    const float v_ = fmaf((m), (hh), fmaf((m), (ll), (ll)) + (u)); \
    const float s_ = (hh) + v_;                                   \
    (ll) = v_ - (s_ - (hh));                                      \
    (hh) = s_;                                                    \
  }

#define SS_STATE(n, bv, cv)                      \
  SS_UPDATE(h[n], l[n], ss_expm1(dl * a[n]), dx * (bv)) \
  acc = fmaf((cv), h[n], fmaf((cv), l[n], acc));

// p: [B*L, S] rows of [delta_raw (dpad) | B (16) | C (16)], S = dpad + 32.
__global__ void __launch_bounds__(128) ss03_scan(
    const float* __restrict__ p, const float* __restrict__ x, const float* __restrict__ a_log,
    const float* __restrict__ bias, const float* __restrict__ dskip, float* __restrict__ y, int seqlen,
    int dmodel, int dpad) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  const int b = blockIdx.y;
  if (d >= dmodel) return;
  const int S = dpad + 32;
  float a[16], h[16], l[16];  // A, and the state as hi + lo
#pragma unroll
  for (int n = 0; n < 16; ++n) {
    a[n] = -expf(a_log[d * 16 + n]);
    h[n] = 0.f;
    l[n] = 0.f;
  }
  const float dsk = dskip[d], bd = bias[d];
  const size_t base = (size_t)b * seqlen;
  const float* pr = p + base * S;
  const float* xr = x + base * dmodel + d;
  float* yr = y + base * dmodel + d;
#pragma unroll 4
  for (int t = 0; t < seqlen; ++t) {
    const float* row = pr + (size_t)t * S;
    const float xv = xr[(size_t)t * dmodel];
    const float dl = softplus_f(row[d] + bd);
    const float dx = dl * xv;
    const float4* b4 = reinterpret_cast<const float4*>(row + dpad);
    float acc = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 bq = __ldg(b4 + q);
      const float4 cq = __ldg(b4 + 4 + q);
      SS_STATE(4 * q + 0, bq.x, cq.x)
      SS_STATE(4 * q + 1, bq.y, cq.y)
      SS_STATE(4 * q + 2, bq.z, cq.z)
      SS_STATE(4 * q + 3, bq.w, cq.w)
    }
    yr[(size_t)t * dmodel] = acc + dsk * xv;
  }
}

extern "C" int ss03_launch(const float* p, const float* x, const float* a_log, const float* bias,
                           const float* dskip, float* y, int batch, int seqlen, int dmodel, int dpad,
                           cudaStream_t stream) {
  const dim3 block(128);
  const dim3 grid((dmodel + 127) / 128, batch);
  ss03_scan<<<grid, block, 0, stream>>>(p, x, a_log, bias, dskip, y, seqlen, dmodel, dpad);
  return (int)cudaGetLastError();
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int ss03_launch(const float* p, const float* x, const float* a_log, const float* bias,
                           const float* dskip, float* y, int batch, int seqlen, int dmodel, int dpad,
                           cudaStream_t stream);

static void check_f32(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous(), name,
              ": expected a contiguous float32 CUDA tensor");
}

torch::Tensor scan(torch::Tensor p, torch::Tensor x, torch::Tensor a_log, torch::Tensor bias,
                   torch::Tensor dskip) {
  check_f32(p, "P"); check_f32(x, "x"); check_f32(a_log, "A_log"); check_f32(bias, "bias");
  check_f32(dskip, "D");
  TORCH_CHECK(x.dim() == 3, "x: expected [B, L, D]");
  const int batch = x.size(0), seqlen = x.size(1), dmodel = x.size(2);
  const int dpad = (dmodel + 3) / 4 * 4;
  TORCH_CHECK(a_log.size(0) == dmodel && a_log.size(1) == 16, "A_log: expected [D, 16]");
  TORCH_CHECK(p.dim() == 2 && p.size(0) == (int64_t)batch * seqlen && p.size(1) == dpad + 32,
              "P: expected [B*L, ceil4(D) + 32]");
  TORCH_CHECK(bias.numel() == dmodel && dskip.numel() == dmodel, "bias/D: expected [D]");
  auto y = torch::empty_like(x);
  const int err = ss03_launch(p.data_ptr<float>(), x.data_ptr<float>(), a_log.data_ptr<float>(),
                              bias.data_ptr<float>(), dskip.data_ptr<float>(), y.data_ptr<float>(),
                              batch, seqlen, dmodel, dpad, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "ss03 launch failed: ", cudaGetErrorString((cudaError_t)err));
  return y;
}
"""

_ext = load_inline(
    name="ss03_fused_projection",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["scan"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self, d_model: int, d_state: int) -> None:
        super().__init__()
        if d_state != 16:
            raise ValueError(f"this kernel is specialised for d_state=16, got d_state={d_state}")
        self.d_model, self.d_state = d_model, d_state
        self.A_log = nn.Parameter(torch.randn(d_model, d_state))
        self.proj_B = nn.Linear(d_model, d_state, bias=False)
        self.proj_C = nn.Linear(d_model, d_state, bias=False)
        self.proj_delta = nn.Linear(d_model, d_model, bias=True)
        self.D = nn.Parameter(torch.ones(d_model))

    def _packed_weight(self) -> torch.Tensor:
        # Rebuilt every call (4 MB at D=1024, a few us): the weights may change between calls.
        w_delta = self.proj_delta.weight
        pad = (-self.d_model) % 4
        parts = [w_delta, w_delta.new_zeros(pad, self.d_model)] if pad else [w_delta]
        return torch.cat([*parts, self.proj_B.weight, self.proj_C.weight])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        p = F.linear(x.view(-1, self.d_model), self._packed_weight())  # one library GEMM
        return _ext.scan(p, x, self.A_log.contiguous(), self.proj_delta.bias, self.D.contiguous())
