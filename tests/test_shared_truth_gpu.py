"""Shared truth and the first launch on a CUDA GPU (tools/judge/_share.py, tools/worker/usage.py): a second
candidate's evaluation started while the first's is in flight takes its input set, and both are judged in
full (cases, timed outputs re-checked where the truth server keeps the shared truth). Run with -m gpu."""

from __future__ import annotations

import threading
import time

import pytest

from tests.helpers import REPO
from tools import benchmark
from tools.judge import SHARE_ENV
from tools.judge._share import shares_of
from tools.problem import load_problem
from tools.results import BenchResult
from tools.supervise.pool import pool_for

BASELINE = REPO / "problems" / "selective_scan" / "solutions" / "01_naive_fused.py"


def _judged_in_full(result: BenchResult) -> None:
    assert result.status == "ok", result.message
    assert all(c.status == "passed" for c in result.cases)
    for timing in result.timings:
        assert timing.rechecked
        assert all(r.status == "passed" for r in timing.rechecked)


@pytest.mark.gpu
def test_two_candidates_in_flight_share_one_set_and_are_judged_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = load_problem(REPO / "tests" / "adversarial" / "gpu" / "scan_gpu_small.yaml")
    pool = pool_for(None)
    assert pool is not None
    assert benchmark(problem, BASELINE.read_text()).status == "ok"  # built, the reference's figures cached
    pool.wait_prefetch(problem.data_hash)
    monkeypatch.setenv(SHARE_ENV, "1")
    results: dict[str, BenchResult] = {}
    first = threading.Thread(target=lambda: results.update(a=benchmark(problem, BASELINE.read_text())))
    first.start()
    deadline = time.monotonic() + 120
    while shares_of(pool).open_sets() == 0 and first.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    other = BASELINE.read_text() + "\n# another candidate, the same build\n"
    b = benchmark(problem, other)
    first.join()
    a = results["a"]
    _judged_in_full(a)
    _judged_in_full(b)
    assert b.truth_source == "shared"
    assert b.seed == a.seed
    assert a.kernel_hash != b.kernel_hash


@pytest.mark.gpu
def test_a_cuda_evaluation_reports_its_host_time_to_the_first_launch() -> None:
    problem = load_problem(REPO / "tests" / "adversarial" / "gpu" / "scan_gpu_small.yaml")
    result = benchmark(problem, BASELINE.read_text())
    assert result.status == "ok", result.message
    assert result.usage is not None
    assert result.usage.first_launch == "measured", result.usage
    assert result.usage.first_launch_ms is not None
    assert 0 < result.usage.first_launch_ms < 50
