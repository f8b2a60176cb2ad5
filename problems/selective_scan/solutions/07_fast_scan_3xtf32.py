"""Selective scan, step 07: alt/05_fast_arith's plain-fp32 scan + step 06's 3xTF32 projection.

The evaluator now widens atol/rel-L2 to 10x the fp32 reference's own error on each case (the fp32
reference drifts on long_memory), so the compensated recurrence of steps 01-06 (expm1 + Fast2Sum,
~60 % of 06's 718 us scan) buys nothing: plain fp32 (dA = ex2.approx, h rounded each step) passes
every case. This step is the two measured halves put together, nothing new:
- projection (06): x = hi + lo, W = hi + lo (cvt.rna tf32); P = [x_hi|x_lo] @ [W_hi|W_hi]^T, then
  P += x_hi @ W_lo^T, two cuBLAS GEMMs with the explicit compute type CUBLAS_COMPUTE_32F_FAST_TF32
  on our own handle (no torch flag is touched);
- scan (alt/05_fast_arith): one thread per (batch, channel), 16 states in registers, 16-step tiles
  staged by cp.async, L split into nc chunks (chunk_state, then chunk_output with the carry folded).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn
from torch.utils.cpp_extension import CUDA_HOME, load_inline

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
__global__ void __launch_bounds__(kThreads) ss07_chunk(
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

extern "C" int ss07_launch(const float* p, const float* x, const float* a_log, const float* bias,
                           const float* dskip, float* y, float* hend, float* sdelta, int batch,
                           int seqlen, int dmodel, int dpad, int chunk_len, int nchunks,
                           cudaStream_t stream) {
  const dim3 block(kThreads);
  const dim3 grid((dmodel + kThreads - 1) / kThreads, batch, nchunks);
  if (nchunks > 1) {
    ss07_chunk<false><<<grid, block, 0, stream>>>(p, x, a_log, bias, dskip, y, hend, sdelta, seqlen,
                                                  dmodel, dpad, chunk_len, nchunks);
  }
  ss07_chunk<true><<<grid, block, 0, stream>>>(p, x, a_log, bias, dskip, y, hend, sdelta, seqlen,
                                               dmodel, dpad, chunk_len, nchunks);
  return (int)cudaGetLastError();
}

// ---- 3xTF32 operand split: v ~ hi + lo, both rounded to tf32 (round-to-nearest, so the tensor
// cores' own conversion, which truncates, changes nothing; call 1 without rounding lo: rel-L2 2.3e-5) ----
__device__ __forceinline__ float tf32_hi(float v) {
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(v));
  return __uint_as_float(u);
}

// x [M, D] -> xs [M, 2D] = [x_hi | x_lo] per row.
__global__ void ss07_split_x(const float* __restrict__ x, float* __restrict__ xs, long long m, int dmodel) {
  const long long total = m * dmodel;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / dmodel;
    const int k = (int)(i - r * dmodel);
    const float v = x[i];
    const float hi = tf32_hi(v);
    xs[r * 2 * dmodel + k] = hi;
    xs[r * 2 * dmodel + dmodel + k] = tf32_hi(v - hi);
  }
}

// Same for D % 4 == 0, 16 bytes per access.
__global__ void ss07_split_x4(const float4* __restrict__ x, float4* __restrict__ xs, long long m, int d4) {
  const long long total = m * d4;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / d4;
    const int k = (int)(i - r * d4);
    const float4 v = x[i];
    const float4 hi = make_float4(tf32_hi(v.x), tf32_hi(v.y), tf32_hi(v.z), tf32_hi(v.w));
    xs[r * 2 * d4 + k] = hi;
    xs[r * 2 * d4 + d4 + k] = make_float4(tf32_hi(v.x - hi.x), tf32_hi(v.y - hi.y), tf32_hi(v.z - hi.z),
                                          tf32_hi(v.w - hi.w));
  }
}

// Packed weight W = [W_delta; 0 (dpad - D rows); W_B; W_C], [S, D]; writes whi2 = [W_hi | W_hi]
// ([S, 2D]) and wlo = W - W_hi ([S, D]).
__global__ void ss07_split_w(const float* __restrict__ wd, const float* __restrict__ wb,
                             const float* __restrict__ wc, float* __restrict__ whi2,
                             float* __restrict__ wlo, int dmodel, int dpad) {
  const int S = dpad + 32;
  const long long total = (long long)S * dmodel;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const int r = (int)(i / dmodel), k = (int)(i - (long long)r * dmodel);
    float v = 0.f;
    if (r < dmodel) v = wd[(size_t)r * dmodel + k];
    else if (r >= dpad && r < dpad + 16) v = wb[(size_t)(r - dpad) * dmodel + k];
    else if (r >= dpad + 16) v = wc[(size_t)(r - dpad - 16) * dmodel + k];
    const float hi = tf32_hi(v);
    whi2[(size_t)r * 2 * dmodel + k] = hi;
    whi2[(size_t)r * 2 * dmodel + dmodel + k] = hi;
    wlo[(size_t)r * dmodel + k] = tf32_hi(v - hi);
  }
}

extern "C" int ss07_split_launch(const float* x, float* xs, const float* wd, const float* wb,
                                 const float* wc, float* whi2, float* wlo, long long m, int dmodel,
                                 int dpad, cudaStream_t stream) {
  const int block = 256;
  const int grid = 132 * 8;  // grid-stride: a few waves of resident blocks on the H200's 132 SMs
  if (dmodel % 4 == 0) {
    ss07_split_x4<<<grid, block, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                              reinterpret_cast<float4*>(xs), m, dmodel / 4);
  } else {
    ss07_split_x<<<grid, block, 0, stream>>>(x, xs, m, dmodel);
  }
  ss07_split_w<<<grid, block, 0, stream>>>(wd, wb, wc, whi2, wlo, dmodel, dpad);
  return (int)cudaGetLastError();
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cublas_v2.h>

extern "C" int ss07_launch(const float* p, const float* x, const float* a_log, const float* bias,
                           const float* dskip, float* y, float* hend, float* sdelta, int batch,
                           int seqlen, int dmodel, int dpad, int chunk_len, int nchunks,
                           cudaStream_t stream);
extern "C" int ss07_split_launch(const float* x, float* xs, const float* wd, const float* wb,
                                 const float* wc, float* whi2, float* wlo, long long m, int dmodel,
                                 int dpad, cudaStream_t stream);

static void check_f32(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous(), name,
              ": expected a contiguous float32 CUDA tensor");
}

// Our own handle (one per device): its math mode is never touched by torch's global flags; the
// TF32 use is the explicit compute type of each call below, on operands already split for it.
static cublasHandle_t blas_handle(int device) {
  static cublasHandle_t handles[64] = {nullptr};
  TORCH_CHECK(device >= 0 && device < 64, "device index out of range");
  if (handles[device] == nullptr) {
    TORCH_CHECK(cublasCreate(&handles[device]) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
  }
  return handles[device];
}

// Row-major P[M, S] = A[M, K] (row stride lda) @ W[S, K]^T (row stride ldw), fp32 in and out.
static void gemm_tf32(cublasHandle_t h, const float* w, int ldw, const float* a, int lda, float* p,
                      int m, int s, int k, float beta) {
  const float alpha = 1.f;
  const cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s, m, k, &alpha, w, CUDA_R_32F, ldw,
                                         a, CUDA_R_32F, lda, &beta, p, CUDA_R_32F, s,
                                         CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
  TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasGemmEx failed with status ", (int)st);
}

torch::Tensor forward(torch::Tensor x, torch::Tensor w_delta, torch::Tensor bias, torch::Tensor w_b,
                      torch::Tensor w_c, torch::Tensor a_log, torch::Tensor dskip, int64_t nchunks) {
  check_f32(x, "x"); check_f32(w_delta, "W_delta"); check_f32(bias, "bias"); check_f32(w_b, "W_B");
  check_f32(w_c, "W_C"); check_f32(a_log, "A_log"); check_f32(dskip, "D");
  TORCH_CHECK(x.dim() == 3, "x: expected [B, L, D]");
  const int batch = x.size(0), seqlen = x.size(1), dmodel = x.size(2);
  const int dpad = (dmodel + 3) / 4 * 4, S = dpad + 32;
  const long long m = (long long)batch * seqlen;
  TORCH_CHECK(m <= INT32_MAX, "B*L too large for one GEMM call");
  TORCH_CHECK(a_log.size(0) == dmodel && a_log.size(1) == 16, "A_log: expected [D, 16]");
  TORCH_CHECK(w_delta.size(0) == dmodel && w_delta.size(1) == dmodel, "W_delta: expected [D, D]");
  TORCH_CHECK(w_b.size(0) == 16 && w_b.size(1) == dmodel && w_c.sizes() == w_b.sizes(), "W_B/W_C: expected [16, D]");
  TORCH_CHECK(bias.numel() == dmodel && dskip.numel() == dmodel, "bias/D: expected [D]");
  TORCH_CHECK(nchunks >= 1, "nchunks must be >= 1");
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();

  auto xs = torch::empty({m, 2 * (int64_t)dmodel}, x.options());
  auto whi2 = torch::empty({S, 2 * (int64_t)dmodel}, x.options());
  auto wlo = torch::empty({S, (int64_t)dmodel}, x.options());
  int err = ss07_split_launch(x.data_ptr<float>(), xs.data_ptr<float>(), w_delta.data_ptr<float>(),
                              w_b.data_ptr<float>(), w_c.data_ptr<float>(), whi2.data_ptr<float>(),
                              wlo.data_ptr<float>(), m, dmodel, dpad, stream);
  TORCH_CHECK(err == 0, "ss07 split launch failed: ", cudaGetErrorString((cudaError_t)err));

  auto p = torch::empty({m, (int64_t)S}, x.options());
  cublasHandle_t h = blas_handle(x.get_device());
  TORCH_CHECK(cublasSetStream(h, stream) == CUBLAS_STATUS_SUCCESS, "cublasSetStream failed");
  // P = x_hi W_hi^T + x_lo W_hi^T, then P += x_hi W_lo^T; x_lo W_lo^T (~2^-22 relative) is dropped.
  gemm_tf32(h, whi2.data_ptr<float>(), 2 * dmodel, xs.data_ptr<float>(), 2 * dmodel, p.data_ptr<float>(),
            (int)m, S, 2 * dmodel, 0.f);
  gemm_tf32(h, wlo.data_ptr<float>(), dmodel, xs.data_ptr<float>(), 2 * dmodel, p.data_ptr<float>(),
            (int)m, S, dmodel, 1.f);

  const int chunk_len = (int)((seqlen + nchunks - 1) / nchunks);
  const int nc = (seqlen + chunk_len - 1) / chunk_len;
  auto y = torch::empty_like(x);
  auto hend = torch::empty({batch, nc, dmodel, 16}, x.options());
  auto sdelta = torch::empty({batch, nc, dmodel}, x.options());
  err = ss07_launch(p.data_ptr<float>(), x.data_ptr<float>(), a_log.data_ptr<float>(),
                    bias.data_ptr<float>(), dskip.data_ptr<float>(), y.data_ptr<float>(),
                    hend.data_ptr<float>(), sdelta.data_ptr<float>(), batch, seqlen, dmodel, dpad,
                    chunk_len, nc, stream);
  TORCH_CHECK(err == 0, "ss07 launch failed: ", cudaGetErrorString((cudaError_t)err));
  return y;
}
"""


def _cublas_paths() -> tuple[str, str, str]:
    """(include dir, lib dir, lib file) of cuBLAS: the pip wheel torch runs on, else CUDA_HOME."""
    candidates: list[Path] = []
    spec = importlib.util.find_spec("nvidia")  # NVIDIA's pip wheels: the cuBLAS torch itself loads
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        candidates += [Path(root) / "cu13", Path(root) / "cublas"]
    if CUDA_HOME:
        candidates.append(Path(CUDA_HOME))
    for root in candidates:
        inc = root / "include"
        if not (inc / "cublas_v2.h").is_file():
            continue
        for libdir in (root / "lib", root / "lib64"):
            libs = sorted(libdir.glob("libcublas.so*")) if libdir.is_dir() else []
            if libs:
                return str(inc), str(libdir), libs[0].name
    raise RuntimeError(f"cuBLAS headers/library not found (looked in {[str(c) for c in candidates]})")


_CUBLAS_INC, _CUBLAS_LIBDIR, _CUBLAS_LIB = _cublas_paths()

_ext = load_inline(
    name="ss07_fast_scan_3xtf32",
    cpp_sources=_CPP_SRC,
    cuda_sources=_CUDA_SRC,
    functions=["forward"],
    extra_cuda_cflags=["-O3"],
    extra_include_paths=[_CUBLAS_INC],
    extra_ldflags=[f"-L{_CUBLAS_LIBDIR}", f"-l:{_CUBLAS_LIB}", f"-Wl,-rpath,{_CUBLAS_LIBDIR}"],
    no_implicit_headers=True,
)


def num_chunks(batch: int, seqlen: int, d_model: int) -> int:
    """alt/05_fast_arith's rule: batch * d_model * nc reaches ~32k threads, chunks >= 128 steps."""
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        batch, seqlen, _ = x.shape
        nc = num_chunks(batch, seqlen, self.d_model)
        return _ext.forward(
            x,
            self.proj_delta.weight.contiguous(),
            self.proj_delta.bias,
            self.proj_B.weight.contiguous(),
            self.proj_C.weight.contiguous(),
            self.A_log.contiguous(),
            self.D.contiguous(),
            nc,
        )
