"""The machine's peaks, measured in a process of their own (trusted code, no candidate): fp32 FLOP/s by a
large fp32 matmul with TF32 off (and on a GPU a loop of FMAs), the tensor cores' fp16 rate by a large fp16
matmul (GPU only), memory bandwidth by a large tensor copy (read + write), each the best of
a few runs. `python -m tools.worker.peaks cuda|cpu [THREADS]` prints one JSON object; tools/cache/peaks.py runs it
once per host and caches what it prints."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import torch

REPEATS = 5
# Sizes: large enough to leave the caches behind (the H200's L2 is 50 MB) and keep the matmul on its peak
# path; small enough to take a few seconds on a 2-core machine.
SIZES = {"cuda": {"matmul": 8192, "copy_floats": 1 << 28}, "cpu": {"matmul": 1536, "copy_floats": 1 << 25}}


def best_seconds(work: Callable[[], object], device: str) -> float:
    """The fastest of REPEATS runs of `work`, after one warm-up."""
    work()
    times = []
    for _ in range(REPEATS):
        if device == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            work()
            end.record()
            end.synchronize()
            times.append(float(begin.elapsed_time(end)) / 1e3)
        else:
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
    return min(times)


# fp32 FMA peak on CUDA: an elementwise kernel of dependent FMAs compiled at run time by torch's jiterator
# (NVRTC, no nvcc): 2 FMAs (4 FLOPs) an iteration, enough threads in flight to hide their latency.
FMA_ITERATIONS = 256
FMA_CODE = f"""template <typename T> T fma_peak(T x, T y) {{
  T a = x, b = y;
  for (int i = 0; i < {FMA_ITERATIONS}; ++i) {{ a = a * b + x; b = b * a + y; }}
  return a + b;
}}"""


def fma_tflops() -> float | None:
    """The fp32 FMA rate of the GPU (None where the jiterator cannot build here)."""
    try:
        from torch.cuda import jiterator

        kernel = jiterator._create_jit_fn(FMA_CODE)
        x = torch.rand(1 << 26, device="cuda") * 1e-3
        y = torch.rand(1 << 26, device="cuda") * 1e-3
        seconds = best_seconds(lambda: kernel(x, y), "cuda")
    except Exception:  # a build of trusted code that fails says only that this path is not here
        return None
    return 4 * FMA_ITERATIONS * x.numel() / seconds / 1e12


def matmul_seconds(n: int, device: str) -> float:
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    out = torch.empty(n, n, device=device)
    return best_seconds(lambda: torch.matmul(a, b, out=out), device)


def fp16_matmul_seconds(n: int) -> float:
    """A large fp16 matmul on the GPU's tensor cores, accumulated in fp32 (reduced-precision reductions off)."""
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    out = torch.empty(n, n, device="cuda", dtype=torch.float16)
    return best_seconds(lambda: torch.matmul(a, b, out=out), "cuda")


def copy_seconds(floats: int, device: str) -> tuple[float, int]:
    """The best time of one copy of `floats` fp32 values, and the bytes it moved (read + written)."""
    src = torch.ones(floats, device=device)
    dst = torch.empty_like(src)
    return best_seconds(lambda: dst.copy_(src), device), 2 * src.numel() * src.element_size()


def measure(device: str) -> dict[str, object]:
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 FLOP/s: the precision the problems are judged in
    torch.backends.cudnn.allow_tf32 = False
    sizes = SIZES[device]
    n = sizes["matmul"]
    matmul_s = matmul_seconds(n, device)
    copy_s, moved = copy_seconds(sizes["copy_floats"], device)
    matmul = 2 * n**3 / matmul_s / 1e12
    fma = fma_tflops() if device == "cuda" else None
    fp16 = 2 * n**3 / fp16_matmul_seconds(n) / 1e12 if device == "cuda" else None
    flops_by = f"fp32 FMA loop {fma:.1f} TFLOP/s, " if fma else ""
    tensor_by = f", fp16 matmul {n}x{n} (fp32 accumulate) {fp16:.0f} TFLOP/s" if fp16 else ""
    return {
        "fp32_tflops": max(matmul, fma or 0.0),
        "matmul_tflops": matmul,
        "fp16_tensor_tflops": fp16,
        "bandwidth_gbs": moved / copy_s / 1e9,
        "method": f"{flops_by}fp32 matmul {n}x{n} (TF32 off) {matmul:.1f} TFLOP/s{tensor_by}, copy of "
        f"{moved / 2**20:.0f} MiB read+written; best of {REPEATS}",
    }


def main(argv: list[str]) -> int:
    device = argv[0] if argv else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible to torch"}))
        return 1
    if len(argv) > 1:  # a CPU problem's thread budget: the peaks its evaluations can reach
        torch.set_num_threads(int(argv[1]))
    print(json.dumps(measure(device)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
