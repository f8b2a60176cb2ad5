"""The parallel playback without builds: scripted trajectories (tests/problems/scan_tiny_playback) whose
evaluations take a real child process and return a time fixed per kernel."""

from __future__ import annotations

import subprocess

from tests.helpers import TESTS
from tools.problem import Problem
from tools.results import BenchResult, CompileResult, ShapeTiming, TimingStats

PLAYBACK = TESTS / "problems" / "scan_tiny_playback.yaml"
TRAJECTORY = TESTS / "problems" / "scan_tiny_playback" / "trajectory.yaml"
REFERENCE_MS = 10.0
MS_BY_KERNEL = {"scan_naive": 5.0, "scan_openmp": 2.0, "scan_blocked": 1.0}  # load_inline names


def kernel_ms(code: str) -> float:
    return next(ms for name, ms in MS_BY_KERNEL.items() if name in code)


class FixedTimeEvaluator:
    """Compiles and evaluates in a child process (`sleep`); each kernel's time is fixed, RSE 1%."""

    def compile(self, problem: Problem, code: str, on_progress: object = None) -> CompileResult:
        subprocess.run(["sleep", "0.05"], check=True)
        return CompileResult(status="ok", message="compiled")

    def evaluate(self, problem: Problem, code: str, gpu: int | None, seed: int | None = None) -> BenchResult:
        subprocess.run(["sleep", "0.05"], check=True)
        ms = kernel_ms(code)
        stats = TimingStats(median_ms=ms, rse=0.01, n=10, min_ms=ms, max_ms=ms, mean_ms=ms, clock="host")
        reference = stats.model_copy(update={"median_ms": REFERENCE_MS})
        timing = ShapeTiming(name="small", primary=True, sizes={}, candidate=stats, reference=reference)
        return BenchResult(
            status="ok", correct=True, speedup=REFERENCE_MS / ms, message="ok", timings=[timing]
        )

    def kill_all(self) -> None:
        pass
