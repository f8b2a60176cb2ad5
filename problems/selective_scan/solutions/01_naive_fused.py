"""Selective scan, step 01: a naive fused scan.

Projections are three library GEMMs (`F.linear`, delta with its bias). One CUDA kernel does the rest:
one thread per (batch, channel, state), like the reference's `h[B, D, N]`; each thread walks the
sequence, recomputes softplus/exp for its own state, and the 16 states of a channel are summed with
half-warp shuffles every step. Simple and obviously right; every step re-reads x/delta and pays
four shuffles, and the loop has no prefetching.
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

// One thread per (b, d, n); 16 consecutive lanes hold one channel's 16 states.
__global__ void ss01_scan(const float* __restrict__ delta_raw, const float* __restrict__ bm,
                          const float* __restrict__ cm, const float* __restrict__ x,
                          const float* __restrict__ a_log, const float* __restrict__ dskip,
                          float* __restrict__ y, int batch, int seqlen, int dmodel) {
  const long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long ch = gid >> 4;
  if (ch >= (long long)batch * dmodel) return;  // a 16-lane group leaves together
  const int n = threadIdx.x & 15;
  const unsigned mask = 0xFFFFu << (threadIdx.x & 16);
  const int b = (int)(ch / dmodel), d = (int)(ch % dmodel);
  const float a = -expf(a_log[d * 16 + n]);
  const float dsk = dskip[d];
  float h = 0.f, l = 0.f;  // state as hi + lo
  for (int t = 0; t < seqlen; ++t) {
    const long long row = (long long)b * seqlen + t;
    const float xv = x[row * dmodel + d];
    const float dl = softplus_f(delta_raw[row * dmodel + d]);
    SS_UPDATE(h, l, ss_expm1(dl * a), dl * bm[row * 16 + n] * xv)
    const float cn = cm[row * 16 + n];
    float p = fmaf(cn, h, cn * l);
    p += __shfl_xor_sync(mask, p, 8, 16);
    p += __shfl_xor_sync(mask, p, 4, 16);
    p += __shfl_xor_sync(mask, p, 2, 16);
    p += __shfl_xor_sync(mask, p, 1, 16);
    if (n == 0) y[row * dmodel + d] = p + dsk * xv;
  }
}

extern "C" int ss01_launch(const float* delta_raw, const float* bm, const float* cm, const float* x,
                           const float* a_log, const float* dskip, float* y, int batch, int seqlen,
                           int dmodel, cudaStream_t stream) {
  const long long threads = (long long)batch * dmodel * 16;
  const int block = 128;
  const unsigned grid = (unsigned)((threads + block - 1) / block);
  ss01_scan<<<grid, block, 0, stream>>>(delta_raw, bm, cm, x, a_log, dskip, y, batch, seqlen, dmodel);
  return (int)cudaGetLastError();
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int ss01_launch(const float* delta_raw, const float* bm, const float* cm, const float* x,
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
  const int err = ss01_launch(delta_raw.data_ptr<float>(), bm.data_ptr<float>(), cm.data_ptr<float>(),
                              x.data_ptr<float>(), a_log.data_ptr<float>(), dskip.data_ptr<float>(),
                              y.data_ptr<float>(), batch, seqlen, dmodel,
                              c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "ss01 launch failed: ", cudaGetErrorString((cudaError_t)err));
  return y;
}
"""

_ext = load_inline(
    name="ss01_naive_fused",
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
