"""The sanitizer on the GPU (issue 23): compute-sanitizer memcheck, racecheck and initcheck on the candidate
at the problem's smallest correctness case. Each fault candidate is 01_naive_fused with one more kernel
(sanitizer_faults.cu) whose results nobody reads: every case passes, so without the sanitizer it is
correct; under it the fault is a flag naming the kernel, and the verdict is incorrect. The honest 01 comes
out clean under every tool.

Run on the H200 (PART=1 of bench/h200_tier.sh runs this folder); skipped without a CUDA device, and
with a reason where compute-sanitizer cannot run (gVisor's GPU: "Device not supported").
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.adversarial.gpu import gpu_candidates as g
from tests.adversarial.gpu.test_gpu_exploits import HERE, record_figure
from tools import benchmark
from tools.judge import sanitize, sanitizer_availability, with_sanitizer
from tools.judge._sanitize import compute_sanitizer
from tools.problem import Problem, load_problem
from tools.results import BenchResult

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def small() -> Problem:
    problem = load_problem(HERE / "scan_gpu_small.yaml")
    if why := sanitizer_availability(problem):
        pytest.skip(f"the sanitizer cannot run here: {why}")
    return problem


def sanitized(problem: Problem, code: str, *tools: str) -> BenchResult:
    result = benchmark(problem, code)
    assert result.correct, result.message  # the fault is invisible to the correctness cases
    return with_sanitizer(result, sanitize(problem, code, tools=tools))


def assert_flagged(result: BenchResult, tool: str, kernel: str, header: str) -> None:
    assert [c.status for c in result.cases] == ["passed"] * len(result.cases)
    assert (result.status, result.correct, result.speedup) == ("incorrect", False, None), result.message
    assert f"sanitizer_{tool}" in result.flags
    assert result.sanitizer is not None
    run = next(r for r in result.sanitizer.runs if r.tool == tool)
    assert run.status == "errors", run
    assert run.kernel.startswith(kernel), run
    assert header in run.first, run.first
    record_figure(f"sanitizer_{tool}_seconds", run.seconds, kernel=kernel)


def test_the_honest_baseline_is_clean_under_every_tool(small: Problem) -> None:
    result = sanitized(small, g.baseline(), "memcheck", "racecheck", "initcheck")
    assert result.sanitizer is not None
    assert result.sanitizer.status == "clean", result.sanitizer.message
    assert (result.status, result.flags) == ("ok", [])
    for run in result.sanitizer.runs:
        record_figure(f"sanitizer_{run.tool}_seconds_baseline", run.seconds)


def test_an_out_of_bounds_read_is_a_memcheck_flag(small: Problem) -> None:
    result = sanitized(small, g.sanitizer_fault("oob_read"), "memcheck")
    assert_flagged(result, "memcheck", "adv_oob_read", "Invalid __global__ read")


def test_a_shared_memory_race_is_a_racecheck_flag(small: Problem) -> None:
    result = sanitized(small, g.sanitizer_fault("smem_race"), "racecheck")
    assert_flagged(result, "racecheck", "adv_smem_race", "Race reported between")


def test_reads_of_uninitialised_global_memory_are_an_initcheck_flag(small: Problem) -> None:
    result = sanitized(small, g.sanitizer_fault("uninit_global"), "initcheck")
    assert_flagged(result, "initcheck", "adv_uninit_global", "Uninitialized __global__ memory read")


def test_reads_of_uninitialised_shared_memory_are_an_initcheck_flag(small: Problem) -> None:
    binary = compute_sanitizer()
    assert binary is not None
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout
    if not re.search(r"--initcheck-address-space[^\n]*\n?[^\n]*\ball\b", help_text):
        pytest.skip("this compute-sanitizer checks only global memory (--initcheck-address-space: 2025.4+)")
    result = sanitized(small, g.sanitizer_fault("uninit_shared"), "initcheck")
    assert_flagged(result, "initcheck", "adv_uninit_shared", "Uninitialized __shared__ memory read")


# --- reads past the end of an input whose values the output ignores (issue 52) ------------------------------


@pytest.fixture(scope="module")
def aligned() -> Problem:
    """One case whose inputs and weights are multiples of 512 bytes: each can sit right against the next
    allocation, where only memcheck's padding makes a read past its end out of bounds."""
    problem = load_problem(HERE / "scan_gpu_aligned.yaml")
    if why := sanitizer_availability(problem):
        pytest.skip(f"the sanitizer cannot run here: {why}")
    return problem


def test_a_read_past_an_aligned_input_is_correct_without_the_sanitizer(aligned: Problem) -> None:
    result = benchmark(aligned, g.read_past_the_end("x", 64))
    assert (result.status, result.flags) == ("ok", []), result.message


@pytest.mark.parametrize("past", [1, 2, 16, 64])
@pytest.mark.parametrize("tensor", ["x", "self.A_log"])
def test_a_read_past_the_end_of_an_input_is_a_memcheck_flag(aligned: Problem, tensor: str, past: int) -> None:
    report = sanitize(aligned, g.read_past_the_end(tensor, past), tools=("memcheck",))
    run = report.runs[0]
    assert (report.status, run.status) == ("flagged", "errors"), report.message
    assert run.kernel.startswith("adv_oob_read"), run
    assert "Invalid __global__ read" in run.first, run.first
    record_figure("sanitizer_memcheck_seconds_past_end", run.seconds, kernel=f"{tensor}+{past}")
