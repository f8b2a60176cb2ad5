"""On the H200: profile_kernel on the shipped best, the host's peaks, the floor on a real benchmark, and
the baselines. One call runs it all (about 5 minutes on a warm host, more where the builds are cold):

    python -m pytest tests/test_gpu_profile_floor.py -m gpu -s

Each test prints what it measured (`-s`), so the call's output holds the digest, the peaks and the
baselines. Skipped where no CUDA device is visible.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import benchmark, profile_kernel
from tools.cache.peaks import measure_peaks
from tools.envinfo import collect_env
from tools.judge import baselines
from tools.problem import load_problem
from tools.profile_kernel import text
from tools.results import BenchResult, ShapeTiming, TimingStats

REPO = Path(__file__).resolve().parent.parent
PROBLEM = REPO / "problems" / "selective_scan.yaml"
BEST = REPO / "problems" / "selective_scan" / "solutions" / "best.py"


@pytest.mark.gpu
def test_profile_kernel_digests_the_shipped_best() -> None:
    problem = load_problem(PROBLEM)
    result = profile_kernel(problem, BEST.read_text())
    print("\n" + text(result))
    assert result.status == "ok", f"{result.message}\n{result.output[-1500:]}"
    assert result.shape == "b16_l1024_d1024"
    own = [k for k in result.kernels if k.kind == "own"]
    assert own, [k.name for k in result.kernels]
    scan = max(own, key=lambda k: k.duration_us or 0.0)
    assert scan.duration_us is not None
    assert scan.duration_us > 1.0
    assert scan.sm_pct is not None
    assert scan.dram_pct is not None
    assert scan.achieved_occupancy_pct is not None
    assert scan.occupancy_limiter != ""
    assert scan.registers is not None
    assert scan.stalls, "the raw page gave no warp-stall reasons"
    assert result.own_share is not None
    assert 0 < result.own_share <= 1
    assert "gemm" in result.library_share  # the best's projections are cuBLAS GEMMs
    assert result.seconds < 300


@pytest.mark.gpu
def test_the_h200s_peaks_are_near_its_hardware() -> None:
    env = collect_env(load_problem(PROBLEM))
    peaks = measure_peaks("cuda", env)
    print(f"\npeaks: {peaks.model_dump_json()}")
    assert peaks.status == "ok", peaks.message
    assert peaks.matmul_tflops is not None
    assert peaks.fp32_tflops is not None
    assert peaks.fp32_tflops >= peaks.matmul_tflops
    assert 20 < peaks.fp32_tflops < 80  # H200: 66.9 TFLOP/s fp32 on paper (132 SMs x 128 FMA x 1.98 GHz)
    assert peaks.bandwidth_gbs is not None
    assert 2000 < peaks.bandwidth_gbs < 4800  # 4.8 TB/s on paper; a copy measured 4.26 TB/s
    assert peaks.fp16_tensor_tflops is not None
    assert 300 < peaks.fp16_tensor_tflops < 1000  # 989 TFLOP/s dense fp16 on paper


@pytest.mark.gpu
def test_a_benchmark_reports_each_shapes_floor() -> None:
    problem = load_problem(PROBLEM)
    result = benchmark(problem, BEST.read_text(), prefetch_next=False)
    assert result.correct, result.message
    for timing in result.timings:
        assert timing.floor is not None
        assert timing.floor.ms is not None
        assert timing.floor.fraction is not None
        assert timing.floor.tensor_split  # the projections counted on tensor cores, as the best runs them
        assert timing.floor.fraction < 1.0, "faster than the floor: the floor misses a faster path"
        print(
            f"\n{timing.name}: floor {timing.floor.ms:.3f} ms ({timing.floor.bound}), at {timing.floor.fraction:.0%}"
        )


def stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, rse=0.01, n=10, min_ms=ms, max_ms=ms, mean_ms=ms)


@pytest.mark.gpu
def test_the_baselines_of_the_scan() -> None:
    """The kernel's timing is the shipped best's as measured on the H200 (bench_best.json: 0.687 ms), so
    this times the baselines only; `agent bench --baselines` does both."""
    problem = load_problem(PROBLEM)
    shape = problem.primary
    timing = ShapeTiming(
        name=shape.name,
        primary=True,
        sizes=shape.sizes,
        candidate=stats(0.687),
        reference=stats(56.2),
        speedup=81.8,
    )
    result = BenchResult(status="ok", correct=True, speedup=81.8, message="ok", timings=[timing])
    report = baselines(problem, result, compile_limit_s=60.0).baselines
    assert report is not None
    for b in report.baselines:
        median = f"{b.stats.median_ms:.3f} ms" if b.stats else "-"
        print(
            f"\n{b.name}: {b.status} {median} speedup {b.speedup} rel_l2 {b.rel_l2_vs_reference} {b.message}"
        )
    by_name = {b.name: b for b in report.baselines}
    assert list(by_name) == ["eager", "cuda_graph", "torch_compile", "cublas_scan"]
    graph, compiled, library = by_name["cuda_graph"], by_name["torch_compile"], by_name["cublas_scan"]
    assert graph.status == "ok", graph.message
    assert graph.rel_l2_vs_reference is not None
    assert graph.rel_l2_vs_reference < 1e-6  # the same kernels replayed
    assert compiled.status in ("ok", "timeout"), compiled.message  # it did not compile in 560 s on the H200
    assert library.status == "ok", library.message
    assert library.stats is not None
    assert 0.3 < library.stats.median_ms < 20
    assert library.rel_l2_vs_reference is not None
    assert library.rel_l2_vs_reference < 1e-4
    assert library.speedup == pytest.approx(library.stats.median_ms / 0.687)
