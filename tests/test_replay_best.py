"""Replays "the best kernel" of the selective scan: every correctness case with fresh seeds, and at least
20x faster than the reference on the H200 (`gpu`); and, on any machine, that the same kernel compiles.

Which kernel: `--run RUN_DIR` (or $KERNEL_AGENT_REPLAY_RUN), else `best.py` of the newest selective_scan
run under runs/, else the problem's shipped `problems/selective_scan/solutions/best.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import REPO
from tools import benchmark, compile_kernel
from tools.problem import Problem, load_problem

PROBLEM = REPO / "problems" / "selective_scan.yaml"
SHIPPED_BEST = REPO / "problems" / "selective_scan" / "solutions" / "best.py"
MIN_SPEEDUP = 20.0


def _runs_best(run_dir: Path) -> Path:
    best = run_dir / "best.py"
    if not best.is_file():
        raise pytest.UsageError(f"{run_dir} has no best.py")
    return best


def newest_run_best(runs_dir: Path, problem_name: str) -> Path | None:
    """best.py of the newest run of `problem_name` (run folders start with a UTC timestamp)."""
    if not runs_dir.is_dir():
        return None
    for run in sorted((p for p in runs_dir.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True):
        info = run / "run.json"
        if (run / "best.py").is_file() and info.is_file():
            try:
                if json.loads(info.read_text()).get("problem") == problem_name:
                    return run / "best.py"
            except ValueError:
                continue
    return None


@pytest.fixture(scope="module")
def best_kernel(request: pytest.FixtureRequest) -> Path:
    chosen = request.config.getoption("--run") or os.environ.get("KERNEL_AGENT_REPLAY_RUN")
    if chosen:
        return _runs_best(Path(chosen))
    return newest_run_best(REPO / "runs", "selective_scan") or SHIPPED_BEST


@pytest.fixture(scope="module")
def problem() -> Problem:
    return load_problem(PROBLEM)


def test_newest_run_is_preferred_over_the_shipped_best(tmp_path: Path) -> None:
    for name, problem_name in (("20260101T000000Z-selective_scan-aaaaaa", "selective_scan"),
                               ("20260102T000000Z-selective_scan-bbbbbb", "selective_scan"),
                               ("20260103T000000Z-other-cccccc", "other")):  # fmt: skip
        run = tmp_path / name
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"problem": problem_name}))
        (run / "best.py").write_text(f"# {name}\n")
    assert (
        newest_run_best(tmp_path, "selective_scan")
        == tmp_path / "20260102T000000Z-selective_scan-bbbbbb" / "best.py"
    )
    assert newest_run_best(tmp_path / "missing", "selective_scan") is None


@pytest.mark.slow
@pytest.mark.long  # CUDA builds on a CPU machine; the GPU tier compiles and runs it
@pytest.mark.nvcc
def test_the_best_kernel_compiles_here(problem: Problem, best_kernel: Path) -> None:
    result = compile_kernel(problem, best_kernel.read_text())
    assert result.status == "ok", f"{best_kernel}: {result.message}\n{result.output[-2000:]}"
    assert result.kernels, "the ptxas report of the build should list the kernels"


@pytest.mark.gpu
def test_the_best_kernel_passes_every_case_and_is_20x_faster(problem: Problem, best_kernel: Path) -> None:
    result = benchmark(problem, best_kernel.read_text())  # a fresh secret seed: new inputs and weights
    assert result.status == "ok", f"{best_kernel}: {result.message}"
    assert all(c.status == "passed" for c in result.cases)
    assert result.flags == []
    assert result.speedup is not None
    assert result.speedup >= MIN_SPEEDUP, f"{best_kernel}: {result.speedup:.1f}x < {MIN_SPEEDUP}x"
