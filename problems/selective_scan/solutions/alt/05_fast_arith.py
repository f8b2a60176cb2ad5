"""Selective scan, alt of step 05 with plain fp32 arithmetic (dA = ex2.approx, h rounded each step).

Kept to price the compensated recurrence of the numbered steps: it fails the long_memory case.

Same algorithm as step 04 (one concatenated fp32 library GEMM, then chunk_state + chunk_output).
What changed, each for a reason seen in step 04's design:
- Loads: a block (128 channels of one batch, one chunk) stages 16 timesteps of delta_raw, x and the
  B|C row into shared memory with cp.async, double-buffered, so the next tile is in flight while the
  current one is scanned; the inner loop only reads shared memory (B/C as broadcast float4).
- exp: dA = ex2.approx(delta * A * log2(e)) with A * log2(e) computed once per thread; softplus as
  max(z, 0) + log1p(exp(-|z|)) with the fast exp (its argument is <= 0).
- Launch shape: nc chosen so batch * D * nc gives ~2 warps per scheduler (tuned on the H200).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.cpp_extension import load_inline

# Set by a tuning script to override the heuristic; None in normal use.
FORCE_CHUNKS: int | None = None

_CUDA_SRC = r"""
#include <cuda_runtime.h>

namespace {
constexpr int kThreads = 128;  // channels per block
constexpr int kTile = 16;      // timesteps per shared-memory stage
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float ex2(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float softplus_f(float z) {
  return z > 20.f ? z : fmaxf(z, 0.f) + log1pf(__expf(-fabsf(z)));
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait1() { asm volatile("cp.async.wait_group 1;\n" ::); }

struct __align__(16) Stage {
  float delta[kTile][kThreads];
  float x[kTile][kThreads];
  float bc[kTile][32];
};

// Issue the copies of timesteps [tb, min(tb + kTile, t1)) into stage st.
__device__ __forceinline__ void load_tile(Stage& st, const float* __restrict__ p,
                                          const float* __restrict__ x, size_t row0, int S, int dpad,
                                          int dmodel, int dcl, int tb, int t1) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kTile; ++i) {
    if (tb + i < t1) {
      const size_t row = row0 + tb + i;
      cp_async4(&st.delta[i][tid], p + row * S + dcl);
      cp_async4(&st.x[i][tid], x + row * dmodel + dcl);
    }
  }
  // B|C rows: kTile x 32 floats = kTile * 8 float4, one per thread for kTile = 16.
  for (int j = tid; j < kTile * 8; j += kThreads) {
    const int i = j >> 3, q = j & 7;
    if (tb + i < t1) cp_async16(&st.bc[i][q * 4], p + (row0 + tb + i) * S + dpad + q * 4);
  }
}
}  // namespace

// p: [B*L, S] rows of [delta_raw (dpad) | B (16) | C (16)], S = dpad + 32.
// kOut = false: chunk_state (writes hend [B, nc, D, 16], sdelta [B, nc, D]); true: chunk_output.
template <bool kOut>
__global__ void __launch_bounds__(kThreads) ss05_chunk(
    const float* __restrict__ p, const float* __restrict__ x, const float* __restrict__ a_log,
    const float* __restrict__ bias, const float* __restrict__ dskip, float* __restrict__ y,
    float* __restrict__ hend, float* __restrict__ sdelta, int seqlen, int dmodel, int dpad,
    int chunk_len, int nchunks) {
  __shared__ Stage stage[2];
  const int tid = threadIdx.x;
  const int d = blockIdx.x * kThreads + tid;
  const int b = blockIdx.y, c = blockIdx.z;
  if (!kOut && c == nchunks - 1) return;  // whole block: the last chunk's end state is never read
  const bool active = d < dmodel;
  const int dcl = active ? d : dmodel - 1;  // idle lanes load a valid column and store nothing
  const int S = dpad + 32;
  const int t0 = c * chunk_len, t1 = min(seqlen, t0 + chunk_len);
  const size_t row0 = (size_t)b * seqlen;

  load_tile(stage[0], p, x, row0, S, dpad, dmodel, dcl, t0, t1);
  cp_commit();

  float a2[16], h[16];
  const float4* al4 = reinterpret_cast<const float4*>(a_log + (size_t)dcl * 16);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 v = __ldg(al4 + q);
    a2[4 * q + 0] = -expf(v.x) * kLog2e;
    a2[4 * q + 1] = -expf(v.y) * kLog2e;
    a2[4 * q + 2] = -expf(v.z) * kLog2e;
    a2[4 * q + 3] = -expf(v.w) * kLog2e;
  }
#pragma unroll
  for (int n = 0; n < 16; ++n) h[n] = 0.f;
  if (kOut) {
    for (int cc = 0; cc < c; ++cc) {
      const size_t s = ((size_t)b * nchunks + cc) * dmodel + dcl;
      const float sd = sdelta[s];
      const float4* he = reinterpret_cast<const float4*>(hend + s * 16);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 v = he[q];
        h[4 * q + 0] = ex2(a2[4 * q + 0] * sd) * h[4 * q + 0] + v.x;
        h[4 * q + 1] = ex2(a2[4 * q + 1] * sd) * h[4 * q + 1] + v.y;
        h[4 * q + 2] = ex2(a2[4 * q + 2] * sd) * h[4 * q + 2] + v.z;
        h[4 * q + 3] = ex2(a2[4 * q + 3] * sd) * h[4 * q + 3] + v.w;
      }
    }
  }
  const float bd = bias[dcl], dsk = dskip[dcl];
  float* yr = y + row0 * dmodel + dcl;
  float sd = 0.f;

  auto step = [&](const Stage& st, int i, int t) {
    const float dl = softplus_f(st.delta[i][tid] + bd);
    const float xv = st.x[i][tid];
    const float dx = dl * xv;
    if (!kOut) sd += dl;
    const float4* bc4 = reinterpret_cast<const float4*>(st.bc[i]);
    float acc = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 bq = bc4[q];
      h[4 * q + 0] = ex2(dl * a2[4 * q + 0]) * h[4 * q + 0] + dx * bq.x;
      h[4 * q + 1] = ex2(dl * a2[4 * q + 1]) * h[4 * q + 1] + dx * bq.y;
      h[4 * q + 2] = ex2(dl * a2[4 * q + 2]) * h[4 * q + 2] + dx * bq.z;
      h[4 * q + 3] = ex2(dl * a2[4 * q + 3]) * h[4 * q + 3] + dx * bq.w;
      if (kOut) {
        const float4 cq = bc4[4 + q];
        acc += h[4 * q + 0] * cq.x + h[4 * q + 1] * cq.y + h[4 * q + 2] * cq.z + h[4 * q + 3] * cq.w;
      }
    }
    if (kOut && active) yr[(size_t)t * dmodel] = acc + dsk * xv;
  };

  const int ntiles = (t1 - t0 + kTile - 1) / kTile;
  for (int k = 0; k < ntiles; ++k) {
    const int tb = t0 + k * kTile;
    if (k + 1 < ntiles) load_tile(stage[(k + 1) & 1], p, x, row0, S, dpad, dmodel, dcl, tb + kTile, t1);
    cp_commit();  // possibly empty: keeps "all but the newest group done" == tile k ready
    cp_wait1();
    __syncthreads();
    const Stage& st = stage[k & 1];
    if (tb + kTile <= t1) {
#pragma unroll
      for (int i = 0; i < kTile; ++i) step(st, i, tb + i);
    } else {
#pragma unroll 1
      for (int i = 0; i < t1 - tb; ++i) step(st, i, tb + i);
    }
    __syncthreads();  // stage k & 1 is refilled next iteration
  }
  if (!kOut && active) {
    const size_t s = ((size_t)b * nchunks + c) * dmodel + d;
    sdelta[s] = sd;
    float4* he = reinterpret_cast<float4*>(hend + s * 16);
#pragma unroll
    for (int q = 0; q < 4; ++q) he[q] = make_float4(h[4 * q], h[4 * q + 1], h[4 * q + 2], h[4 * q + 3]);
  }
}

extern "C" int ss05_launch(const float* p, const float* x, const float* a_log, const float* bias,
                           const float* dskip, float* y, float* hend, float* sdelta, int batch,
                           int seqlen, int dmodel, int dpad, int chunk_len, int nchunks,
                           cudaStream_t stream) {
  const dim3 block(kThreads);
  const dim3 grid((dmodel + kThreads - 1) / kThreads, batch, nchunks);
  if (nchunks > 1) {
    ss05_chunk<false><<<grid, block, 0, stream>>>(p, x, a_log, bias, dskip, y, hend, sdelta, seqlen,
                                                  dmodel, dpad, chunk_len, nchunks);
  }
  ss05_chunk<true><<<grid, block, 0, stream>>>(p, x, a_log, bias, dskip, y, hend, sdelta, seqlen,
                                               dmodel, dpad, chunk_len, nchunks);
  return (int)cudaGetLastError();
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int ss05_launch(const float* p, const float* x, const float* a_log, const float* bias,
                           const float* dskip, float* y, float* hend, float* sdelta, int batch,
                           int seqlen, int dmodel, int dpad, int chunk_len, int nchunks,
                           cudaStream_t stream);

static void check_f32(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous(), name,
              ": expected a contiguous float32 CUDA tensor");
}

torch::Tensor scan(torch::Tensor p, torch::Tensor x, torch::Tensor a_log, torch::Tensor bias,
                   torch::Tensor dskip, int64_t nchunks) {
  check_f32(p, "P"); check_f32(x, "x"); check_f32(a_log, "A_log"); check_f32(bias, "bias");
  check_f32(dskip, "D");
  TORCH_CHECK(x.dim() == 3, "x: expected [B, L, D]");
  const int batch = x.size(0), seqlen = x.size(1), dmodel = x.size(2);
  const int dpad = (dmodel + 3) / 4 * 4;
  TORCH_CHECK(a_log.size(0) == dmodel && a_log.size(1) == 16, "A_log: expected [D, 16]");
  TORCH_CHECK(p.dim() == 2 && p.size(0) == (int64_t)batch * seqlen && p.size(1) == dpad + 32,
              "P: expected [B*L, ceil4(D) + 32]");
  TORCH_CHECK(bias.numel() == dmodel && dskip.numel() == dmodel, "bias/D: expected [D]");
  TORCH_CHECK(nchunks >= 1, "nchunks must be >= 1");
  const int chunk_len = (int)((seqlen + nchunks - 1) / nchunks);
  const int nc = (seqlen + chunk_len - 1) / chunk_len;
  auto y = torch::empty_like(x);
  auto hend = torch::empty({batch, nc, dmodel, 16}, x.options());
  auto sdelta = torch::empty({batch, nc, dmodel}, x.options());
  const int err = ss05_launch(p.data_ptr<float>(), x.data_ptr<float>(), a_log.data_ptr<float>(),
                              bias.data_ptr<float>(), dskip.data_ptr<float>(), y.data_ptr<float>(),
                              hend.data_ptr<float>(), sdelta.data_ptr<float>(), batch, seqlen, dmodel,
                              dpad, chunk_len, nc, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "ss05 launch failed: ", cudaGetErrorString((cudaError_t)err));
  return y;
}
"""

_ext = load_inline(
    name="ss05_fast_arith",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["scan"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
)


def num_chunks(batch: int, seqlen: int, d_model: int) -> int:
    """Chunks so that batch * d_model * nc reaches ~32k threads (2 warps per scheduler), >= 128 steps each."""
    if FORCE_CHUNKS is not None:
        return max(1, min(FORCE_CHUNKS, seqlen))
    want = -(-32768 // (batch * d_model))
    return max(1, min(want, seqlen // 128))


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
        batch, seqlen, _ = x.shape
        p = F.linear(x.view(-1, self.d_model), self._packed_weight())  # one library GEMM
        nc = num_chunks(batch, seqlen, self.d_model)
        return _ext.scan(p, x, self.A_log.contiguous(), self.proj_delta.bias, self.D.contiguous(), nc)
