"""`--executor ray` on a local Ray instance (one per session: 2 CPUs, no dashboard) with the CPU problem.

The Ray executor must give the verdicts the local one gives (same candidate, same seed), and a parallel
scripted run through it must end with one consistent best and Ray's task times as non-overlapping leases.
Skipped where Ray is not installed (`pip install 'kernel-agent[ray]'`; CI installs it). The parallel run is
in the long tier (docs/testing.md): CI checks Ray's verdicts against the local ones here, and a parallel
scripted run's leases and its one consistent best with the local executor (tests/test_parallel_run.py).
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.execution.executor import KernelJob, LeasedExecutor
from agent.execution.leases import Leases
from agent.runlog.data import overlapping_leases
from agent.runlog.events import RunConfig
from agent.runlog.reader import load_run
from tests.candidates import scan_variants
from tests.helpers import TESTS, TINY
from tools.problem import load_problem
from tools.results import BenchResult

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

PLAYBACK = TESTS / "problems" / "scan_tiny_playback.yaml"
SEED = 20261129


@pytest.fixture(scope="module")
def ray_executor() -> Iterator[object]:
    from agent.execution.ray_executor import RayExecutor, connect

    connect(None, num_cpus=2)
    yield RayExecutor()
    ray.shutdown()


def verdict(result: BenchResult) -> dict[str, object]:
    """What decides a candidate's fate (timings differ between any two evaluations)."""
    return {
        "status": result.status,
        "correct": result.correct,
        "has_speedup": result.speedup is not None,
        "cases": [(c.name, c.status) for c in result.cases],
        "flags": sorted(result.flags),
        "compile": result.compile.status if result.compile else None,
        "kernel_hash": result.kernel_hash,
    }


CANDIDATES = {
    "baseline": scan_variants.baseline,
    "wrong_no_skip": scan_variants.wrong_no_skip,
    "cpp_syntax_error": scan_variants.cpp_syntax_error,
}


def test_ray_gives_the_local_verdicts(ray_executor: object) -> None:
    problem = load_problem(TINY)
    local = LeasedExecutor(Leases(gpus=None))
    codes = {name: make() for name, make in CANDIDATES.items()}
    here = {name: local.benchmark(KernelJob(problem, code), seed=SEED) for name, code in codes.items()}
    with cf.ThreadPoolExecutor(len(codes)) as pool:  # at once: Ray's resources do the leasing
        futures = {
            name: pool.submit(ray_executor.benchmark, KernelJob(problem, code, trajectory=1), SEED)
            for name, code in codes.items()
        }  # type: ignore[attr-defined]
        there = {name: f.result() for name, f in futures.items()}
    assert {n: r.status for n, r in here.items()} == {
        "baseline": "ok",
        "wrong_no_skip": "incorrect",
        "cpp_syntax_error": "compile_error",
    }
    for name in codes:
        assert verdict(there[name]) == verdict(here[name]), name
    assert there["baseline"].env.host  # measured and judged on the worker, sent back as a BenchResult


@pytest.mark.long  # ~3 min on 2 cores: Ray's workers start and import torch per task
def test_a_parallel_scripted_run_through_ray(ray_executor: object, tmp_path: Path) -> None:
    from agent.cli.run import budget_of, create_log, system_for
    from agent.parallel import ParallelRun
    from agent.providers import make_provider
    from agent.run_setup import RunSetup
    from agent.views.live import NullDisplay

    problem = load_problem(PLAYBACK)
    provider = make_provider("scripted", PLAYBACK.parent / "scan_tiny_playback" / "trajectory.yaml")
    config = RunConfig(
        problem_path=str(PLAYBACK), provider="scripted", model="scripted", max_turns=1, parallel=2,
        branches=0, executor="ray",
    )  # fmt: skip
    log = create_log(problem, provider, config, tmp_path)
    setup = RunSetup(
        problem, provider, log, system_for(problem, config), budget_of(config), ray_executor,  # type: ignore[arg-type]
        NullDisplay(),
    )  # fmt: skip
    run = ParallelRun(setup, parallel=2, branches=0)
    outcome = run.run()
    assert outcome.status == "TurnLimit", str(outcome)
    data = load_run(log.dir)
    assert [t.kind for t in data.trajectories] == ["sample", "sample"]
    assert all(len(t.benchmarks) == 1 for t in data.trajectories)
    spans = data.leases
    assert {s.kind for s in spans} == {"compile", "timing"}
    assert all(s.resource.startswith("ray:") and s.released is not None for s in spans)
    assert overlapping_leases(spans, cpu_problem=True) == []
    finals = [e for e in data.best_events if e.final]
    assert len(finals) == 1
    assert data.best is not None
    assert data.best.final
    assert data.best.kernel_path == finals[0].kernel_path
    assert (log.dir / "best.py").read_text() == (log.dir / data.best.kernel_path).read_text()
    assert data.summary is not None
    assert data.summary.exit_status == "TurnLimit"
    assert data.summary.best_speedup == finals[0].speedup
