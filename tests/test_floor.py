"""The speed-of-light floor: the spec's work expressions, the arithmetic against the host's peaks, the
peaks measured once per host and then read from the cache, and where the model and a person see it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from agent.runlog.events import TimedKernel
from agent.views.result import bench_view
from tools.benchmark import text as bench_text
from tools.cache.peaks import cached_peaks, host_peaks
from tools.figures import finish
from tools.floor import floor_lines, peaks_text, shape_floor, with_floors
from tools.kbfile import size_expression
from tools.problem import Floor, ProblemError, load_problem
from tools.results import BenchResult, EnvInfo, HostPeaks, LaunchFreeReference, ShapeTiming, TimingStats

REPO = Path(__file__).resolve().parent.parent
PEAKS = HostPeaks(status="ok", device="cuda", fp32_tflops=50.0, bandwidth_gbs=4000.0)


def stats(median_ms: float) -> TimingStats:
    return TimingStats(
        median_ms=median_ms, rse=0.01, n=10, min_ms=median_ms, max_ms=median_ms, mean_ms=median_ms
    )


def test_size_expressions_are_arithmetic_of_the_sizes_and_nothing_else() -> None:
    assert size_expression("2*b*(d + 2*n) - 1", {"b": 3, "d": 4, "n": 1}) == 35.0
    assert size_expression("b**2 / 4 + b // 2", {"b": 4}) == 6.0
    with pytest.raises(ValueError, match="unknown size 'q'"):
        size_expression("q * 2", {"b": 1})
    with pytest.raises(ValueError, match="not allowed"):
        size_expression("__import__('os').getpid()", {})


def test_the_scan_floor_reads_its_operands_once_and_writes_y_once_in_fp32() -> None:
    """At (16, 1024, 1024, 16): x, delta and y are [B, L, D]; B and C [B, L, N]; A [D, N]; D [D]."""
    problem = load_problem(REPO / "problems" / "selective_scan.yaml")
    assert problem.spec.floor is not None
    flops, moved = problem.spec.floor.work({**problem.size_constants, **problem.primary.sizes})
    bld, bln = 16 * 1024 * 1024, 16 * 1024 * 16
    assert moved == 4 * (3 * bld + 2 * bln + 1024 * 16 + 1024)
    assert flops == 2 * bld * (1024 + 32) + 7 * bld * 16
    cpu = load_problem(REPO / "problems" / "selective_scan_cpu.yaml")
    assert cpu.spec.floor == problem.spec.floor


def test_the_floor_is_the_slower_of_compute_and_memory_at_the_peaks() -> None:
    floor = Floor(flops="f", bytes="m")
    compute = shape_floor(floor, {"f": 10**12, "m": 4 * 10**9}, PEAKS, stats(40.0))
    assert compute.compute_ms == pytest.approx(20.0)
    assert compute.memory_ms == pytest.approx(1.0)
    assert (compute.ms, compute.bound) == (pytest.approx(20.0), "compute")
    assert compute.fraction == pytest.approx(0.5)
    memory = shape_floor(floor, {"f": 10**9, "m": 8 * 10**9}, PEAKS, None)
    assert (memory.ms, memory.bound, memory.fraction) == (pytest.approx(2.0), "memory", None)
    missing = shape_floor(floor, {"f": 1, "m": 1}, HostPeaks(status="unavailable", message="no GPU"), None)
    assert (missing.ms, missing.message) == (None, "no GPU")


TENSOR_PEAKS = PEAKS.model_copy(update={"fp16_tensor_tflops": 600.0})


def test_gemm_flops_count_as_three_fp16_products_where_the_host_has_tensor_cores() -> None:
    """10^12 FLOPs, 9 * 10^11 of them in GEMMs: 10^11 at 50 TFLOP/s (2 ms) + 3 * 9 * 10^11 at 600 (4.5 ms)."""
    floor = Floor(flops="f", bytes="m", gemm_flops="g")
    sizes = {"f": 10**12, "g": 9 * 10**11, "m": 4 * 10**9}
    tensor = shape_floor(floor, sizes, TENSOR_PEAKS, stats(13.0))
    assert (tensor.compute_ms, tensor.ms, tensor.bound) == (pytest.approx(6.5), pytest.approx(6.5), "compute")
    assert (tensor.gemm_flops, tensor.tensor_split, tensor.fraction) == (9e11, True, pytest.approx(0.5))
    fp32_only = shape_floor(floor, sizes, PEAKS, None)  # no tensor rate measured (a CPU): all at fp32
    assert (fp32_only.compute_ms, fp32_only.tensor_split) == (pytest.approx(20.0), False)
    no_gemms = shape_floor(Floor(flops="f", bytes="m"), sizes, TENSOR_PEAKS, None)
    assert (no_gemms.compute_ms, no_gemms.tensor_split) == (pytest.approx(20.0), False)


def test_the_scan_floor_on_an_h200_counts_its_projections_on_tensor_cores() -> None:
    """The H200's measured rates: the fp16 split makes the primary shape's floor ~0.2 ms, not 0.73 (fp32
    units), so a kernel that ran its projections that way (0.46 ms) reads ~40 %, not 159 %."""
    problem = load_problem(REPO / "problems" / "selective_scan.yaml")
    assert problem.spec.floor is not None
    h200 = HostPeaks(
        status="ok", device="cuda", fp32_tflops=51.1, fp16_tensor_tflops=700.0, bandwidth_gbs=4188.0
    )
    f = shape_floor(problem.spec.floor, problem.sizes_of(problem.primary), h200, stats(0.46))
    gemm = 2 * 16 * 1024 * 1024 * 1056
    assert f.gemm_flops == gemm
    assert f.compute_ms == pytest.approx(((f.flops - gemm) / 51.1e12 + 3 * gemm / 700e12) * 1e3)
    assert f.ms == pytest.approx(0.189, abs=0.002)
    assert f.fraction == pytest.approx(0.41, abs=0.01)


def test_gemm_flops_beyond_the_flops_are_refused_at_load(tmp_path: Path) -> None:
    spec = (REPO / "problems" / "selective_scan_cpu.yaml").read_text()
    spec = spec.replace('gemm_flops: "2*batch_size', 'gemm_flops: "4*batch_size')
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.replace("reference: selective_scan/", f"reference: {REPO}/problems/selective_scan/"))
    with pytest.raises(ProblemError, match=r"gemm_flops \(.*\) is not part of flops"):
        load_problem(bad)


def test_the_peaks_line_names_the_tensor_rate_where_there_is_one() -> None:
    assert peaks_text(TENSOR_PEAKS) == (
        "50.0 TFLOP/s fp32, 600 TFLOP/s fp16 on tensor cores (a GEMM's floor: 3 products of a hi/lo split at "
        "that rate, for fp32 accuracy), 4000 GB/s memory (measured on this host)"
    )


def test_a_floor_naming_an_unknown_size_is_refused_at_load(tmp_path: Path) -> None:
    spec = (REPO / "problems" / "selective_scan_cpu.yaml").read_text().replace("d_state)", "d_stat)")
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.replace("reference: selective_scan/", f"reference: {REPO}/problems/selective_scan/"))
    with pytest.raises(ProblemError, match="floor at timing.b8_l1024_d512: unknown size 'd_stat'"):
        load_problem(bad)


def correct_result(problem_path: Path, median_ms: float) -> BenchResult:
    problem = load_problem(problem_path)
    timing = ShapeTiming(
        name=problem.primary.name, primary=True, sizes={**problem.size_constants, **problem.primary.sizes},
        candidate=stats(median_ms), reference=stats(50.0), eager_speedup=50.0 / median_ms,
        launch_free=LaunchFreeReference(mode="eager", note="a test: the eager reference"),
    )  # fmt: skip
    result = BenchResult(status="ok", correct=True, speedup=50.0 / median_ms, message="ok", timings=[timing])
    return finish(problem, with_floors(problem, result, PEAKS))


def test_the_model_reads_its_share_of_the_floor_after_a_benchmark() -> None:
    result = correct_result(REPO / "problems" / "selective_scan.yaml", 1.5)
    floor = result.timings[0].floor
    assert floor is not None
    assert floor.ms == pytest.approx(37.31e9 / 50e12 * 1e3, rel=1e-3)  # compute-bound: 0.746 ms
    best = TimedKernel(turn=1, kernel_path="kernels/001.py", speedup=33.3, median_ms=1.5, rse=0.01)
    text = bench_text(result, best, improved=True)
    assert text.splitlines()[0] == (
        "benchmark CORRECT: 50% of the speed-of-light floor (the headline); speedup (launch-free ref) 33.33×, "
        "eager speedup 33.33×."
    )
    assert "(eager) -> 33.33×; floor 0.746 ms (compute-bound) — yours at 50% of it" in text


def test_the_result_view_shows_the_floor_and_the_peaks() -> None:
    result = correct_result(REPO / "problems" / "selective_scan.yaml", 1.5)
    console = Console(file=io.StringIO(), width=200, legacy_windows=False)
    for part in bench_view(result, "kernels/001.py", full=True):
        console.print(part)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "speed-of-light b16_l1024_d1024: floor 0.746 ms (compute-bound) — yours at 50% of it" in out
    assert "peaks: 50.0 TFLOP/s fp32, 4000 GB/s memory (measured on this host)" in out
    assert '"fraction":0.497' in result.model_dump_json()  # and so in `agent bench --json`


def test_the_prompt_lines_state_each_shapes_work_and_floor() -> None:
    problem = load_problem(REPO / "problems" / "selective_scan_cpu.yaml")
    assert floor_lines(problem, None) == ["- b8_l1024_d512: 5.03 GFLOP, 51.4 MB"]
    assert floor_lines(problem, PEAKS) == [
        "- b8_l1024_d512: 5.03 GFLOP, 51.4 MB -> floor 0.101 ms (compute-bound)"
    ]


def test_peaks_are_measured_once_per_host_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real measurement on this machine's CPU (a few seconds), then the cache's answer."""
    monkeypatch.setenv("KERNEL_AGENT_CACHE", str(tmp_path))
    env = EnvInfo(torch="test-peaks", host="here")
    assert cached_peaks("cpu", env) is None
    first = host_peaks("cpu", env)
    assert first.status == "ok", first.message
    assert not first.cached
    assert first.fp32_tflops is not None
    assert first.fp32_tflops > 0.001
    assert first.bandwidth_gbs is not None
    assert first.bandwidth_gbs > 0.1
    again = host_peaks("cpu", env)
    assert again.cached
    assert (again.fp32_tflops, again.bandwidth_gbs) == (first.fp32_tflops, first.bandwidth_gbs)
    assert cached_peaks("cpu", env.model_copy(update={"torch": "other"})) is None  # keyed on torch too
