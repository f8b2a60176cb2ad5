"""The speed-of-light floor: per timed shape, the time the problem's work (its spec's `floor`: FLOPs and
bytes per call) takes at this machine's measured peaks (tools/cache/peaks.py), and a kernel's distance to
it. `fraction` = floor / the kernel's median: 1.0 is at the floor.

The compute term counts the FLOPs outside matrix products at the fp32 rate. The matrix products (the spec's
`gemm_flops`) are counted at the tensor cores' fp16 rate over SPLIT_PRODUCTS, where that rate was measured.
An fp32-accurate GEMM on tensor cores is known to cost that much: each operand split into a hi and a lo
half-precision part (scaled), and three products, hi·hi + lo·hi + hi·lo, accumulated in fp32
(solutions/09_fp16x3.py; 3xTF32 is the same count at half the rate). Without this, a kernel that ran its
GEMM that way came out at 159 % of an fp32-units floor. Without a measured fp16 rate (a CPU), every FLOP is
counted at the fp32 rate."""

from __future__ import annotations

from collections.abc import Mapping

from tools.kbfile import SizeValue
from tools.problem import Floor, Problem
from tools.results import BenchResult, HostPeaks, ShapeFloor, ShapeTiming, TimingStats

# Half-precision products per fp32-accurate GEMM on tensor cores (hi·hi + lo·hi + hi·lo).
SPLIT_PRODUCTS = 3


def shape_floor(
    floor: Floor, sizes: Mapping[str, SizeValue], peaks: HostPeaks, kernel: TimingStats | None
) -> ShapeFloor:
    """One shape's floor at `peaks`, and the kernel's fraction of it where it was timed."""
    flops, moved = floor.work(sizes)
    gemm = floor.gemm(sizes)
    if peaks.status != "ok" or not peaks.fp32_tflops or not peaks.bandwidth_gbs:
        return ShapeFloor(
            flops=flops, bytes=moved, gemm_flops=gemm, message=peaks.message or "no peaks for this host"
        )
    fp16 = peaks.fp16_tensor_tflops if gemm else None
    if fp16:
        compute_s = (flops - gemm) / (peaks.fp32_tflops * 1e12) + SPLIT_PRODUCTS * gemm / (fp16 * 1e12)
    else:
        compute_s = flops / (peaks.fp32_tflops * 1e12)
    compute_ms = compute_s * 1e3
    memory_ms = moved / (peaks.bandwidth_gbs * 1e9) * 1e3
    ms = max(compute_ms, memory_ms)
    fraction = ms / kernel.median_ms if kernel is not None and kernel.median_ms > 0 else None
    bound = "compute" if compute_ms >= memory_ms else "memory"
    return ShapeFloor(
        flops=flops,
        bytes=moved,
        compute_ms=compute_ms,
        memory_ms=memory_ms,
        ms=ms,
        bound=bound,
        fraction=fraction,
        gemm_flops=gemm,
        tensor_split=bool(fp16),
    )


def with_floors(problem: Problem, result: BenchResult, peaks: HostPeaks) -> BenchResult:
    """`result` with every timed shape's floor (a problem without `floor`: unchanged)."""
    floor = problem.spec.floor
    if floor is None:
        return result
    timings = [
        t.model_copy(update={"floor": derived_floor(floor, t, peaks, result.correct)}) for t in result.timings
    ]
    return result.model_copy(update={"timings": timings, "peaks": peaks})


def derived_floor(floor: Floor, timing: ShapeTiming, peaks: HostPeaks, correct: bool) -> ShapeFloor:
    """`shape_floor`, or why it cannot be derived at this shape (the spec is checked at load: this is a
    floor that still fails, said in the result, never a crash)."""
    try:
        return shape_floor(floor, timing.sizes, peaks, timing.candidate if correct else None)
    except (ValueError, ZeroDivisionError, OverflowError) as exc:
        return ShapeFloor(
            flops=0.0, bytes=0.0, message=f"the floor cannot be derived at {timing.name}: {exc}"
        )


def floor_fraction(result: BenchResult) -> float | None:
    """The primary shape's fraction of its floor (None: no floor, no peaks, or not correct)."""
    primary = result.primary_timing
    return primary.floor.fraction if primary is not None and primary.floor is not None else None


def floor_text(timing: ShapeTiming) -> str:
    """`floor 0.557 ms (compute-bound), yours at 74% of it` ("" without a floor)."""
    f = timing.floor
    if f is None or f.ms is None:
        return ""
    at = f" — yours at {f.fraction * 100:.0f}% of it" if f.fraction is not None else ""
    return f"floor {f.ms:.3f} ms ({f.bound}-bound){at}"


def peaks_text(peaks: HostPeaks) -> str:
    if peaks.status != "ok" or peaks.fp32_tflops is None or peaks.bandwidth_gbs is None:
        return f"peaks unavailable: {peaks.message}"
    tensor = (
        f", {peaks.fp16_tensor_tflops:.0f} TFLOP/s fp16 on tensor cores (a GEMM's floor: {SPLIT_PRODUCTS} "
        "products of a hi/lo split at that rate, for fp32 accuracy)"
        if peaks.fp16_tensor_tflops
        else ""
    )
    return (
        f"{peaks.fp32_tflops:.1f} TFLOP/s fp32{tensor}, {peaks.bandwidth_gbs:.0f} GB/s memory (measured on "
        "this host)"
    )


def floor_lines(problem: Problem, peaks: HostPeaks | None) -> list[str]:
    """Per timed shape, its work and (with peaks) its floor: what the system prompt states."""
    floor = problem.spec.floor
    if floor is None:
        return []
    lines = []
    for shape in problem.spec.timing:
        sizes = problem.sizes_of(shape)
        flops, moved = floor.work(sizes)
        work = f"{flops / 1e9:.2f} GFLOP, {moved / 1e6:.1f} MB"
        if peaks is not None and peaks.status == "ok":
            f = shape_floor(floor, sizes, peaks, None)
            lines.append(f"- {shape.name}: {work} -> floor {f.ms:.3f} ms ({f.bound}-bound)")
        else:
            lines.append(f"- {shape.name}: {work}")
    return lines
