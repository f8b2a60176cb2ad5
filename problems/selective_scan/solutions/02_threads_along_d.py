"""Selective scan, step 02: threads along D, the 16 states in registers.

Same three library GEMMs as step 01. The scan kernel now gives each thread one (batch, channel) and
keeps that channel's 16 states in registers: per timestep a warp reads 32 consecutive delta/x values
(one 128-byte line each) and the same 16 B and 16 C values (a broadcast, 4 x float4 each), so no
shuffles and no redundant softplus. The loop is unrolled by 4 with `__restrict__` pointers so the
compiler can issue the next steps' loads before the current step's arithmetic finishes.
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

__global__ void __launch_bounds__(128) ss02_scan(
    const float* __restrict__ delta_raw, const float* __restrict__ bm, const float* __restrict__ cm,
    const float* __restrict__ x, const float* __restrict__ a_log, const float* __restrict__ dskip,
    float* __restrict__ y, int seqlen, int dmodel) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  const int b = blockIdx.y;
  if (d >= dmodel) return;
  float a[16], h[16], l[16];  // A, and the state as hi + lo
#pragma unroll
  for (int n = 0; n < 16; ++n) {
    a[n] = -expf(a_log[d * 16 + n]);
    h[n] = 0.f;
    l[n] = 0.f;
  }
  const float dsk = dskip[d];
  const size_t base = (size_t)b * seqlen;
  const float* dr = delta_raw + base * dmodel + d;
  const float* xr = x + base * dmodel + d;
  float* yr = y + base * dmodel + d;
  const float4* b4 = reinterpret_cast<const float4*>(bm + base * 16);
  const float4* c4 = reinterpret_cast<const float4*>(cm + base * 16);
#pragma unroll 4
  for (int t = 0; t < seqlen; ++t) {
    const float xv = xr[(size_t)t * dmodel];
    const float dl = softplus_f(dr[(size_t)t * dmodel]);
    const float dx = dl * xv;
    float acc = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 bq = __ldg(b4 + t * 4 + q);
      const float4 cq = __ldg(c4 + t * 4 + q);
      SS_STATE(4 * q + 0, bq.x, cq.x)
      SS_STATE(4 * q + 1, bq.y, cq.y)
      SS_STATE(4 * q + 2, bq.z, cq.z)
      SS_STATE(4 * q + 3, bq.w, cq.w)
    }
    yr[(size_t)t * dmodel] = acc + dsk * xv;
  }
}

extern "C" int ss02_launch(const float* delta_raw, const float* bm, const float* cm, const float* x,
                           const float* a_log, const float* dskip, float* y, int batch, int seqlen,
                           int dmodel, cudaStream_t stream) {
  const dim3 block(128);
  const dim3 grid((dmodel + 127) / 128, batch);
  ss02_scan<<<grid, block, 0, stream>>>(delta_raw, bm, cm, x, a_log, dskip, y, seqlen, dmodel);
  return (int)cudaGetLastError();
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int ss02_launch(const float* delta_raw, const float* bm, const float* cm, const float* x,
                           const float* a_log, const float* dskip, float* y, int batch, int seqlen,
                           int dmodel, cudaStream_t stream);

static void check_f32(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous(), name,
              ": expected a contiguous float32 CUDA tensor");
}

torch::Tensor scan(torch::Tensor delta_raw, torch::Tensor bm, torch::Tensor cm, torch::Tensor x,
                   torch::Tensor a_log, torch::Tensor dskip) {
  check_f32(delta_raw, "delta_raw"); check_f32(bm, "B"); check_f32(cm, "C"); check_f32(x, "x");
  check_f32(a_log, "A_log"); check_f32(dskip, "D");
  TORCH_CHECK(x.dim() == 3, "x: expected [B, L, D]");
  const int batch = x.size(0), seqlen = x.size(1), dmodel = x.size(2);
  TORCH_CHECK(a_log.size(0) == dmodel && a_log.size(1) == 16, "A_log: expected [D, 16]");
  TORCH_CHECK(delta_raw.sizes() == x.sizes(), "delta: expected [B, L, D]");
  TORCH_CHECK(bm.numel() == (int64_t)batch * seqlen * 16 && cm.numel() == bm.numel(), "B/C: expected [B, L, 16]");
  auto y = torch::empty_like(x);
  const int err = ss02_launch(delta_raw.data_ptr<float>(), bm.data_ptr<float>(), cm.data_ptr<float>(),
                              x.data_ptr<float>(), a_log.data_ptr<float>(), dskip.data_ptr<float>(),
                              y.data_ptr<float>(), batch, seqlen, dmodel,
                              c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "ss02 launch failed: ", cudaGetErrorString((cudaError_t)err));
  return y;
}
"""

_ext = load_inline(
    name="ss02_threads_along_d",
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        delta_raw = F.linear(x, self.proj_delta.weight, self.proj_delta.bias)  # library GEMM (+bias)
        bm = F.linear(x, self.proj_B.weight)
        cm = F.linear(x, self.proj_C.weight)
        return _ext.scan(delta_raw, bm, cm, x, self.A_log.contiguous(), self.D.contiguous())
