"""The parallel loop without builds: scripted trajectories whose evaluations take a real child process and
return a time fixed per kernel, so the shared best, the branches and the run's end can be checked exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.budget import Budget
from agent.execution.executor import LeasedExecutor
from agent.execution.leases import Leases
from agent.parallel import ParallelRun
from agent.providers.scripted import ScriptedProvider
from agent.run_setup import RunSetup
from agent.runlog.data import overlapping_leases
from agent.runlog.events import BestRecord, RunConfig, ToolCallEvent
from agent.runlog.reader import load_run
from agent.runlog.writer import RunLog
from agent.views.live import NullDisplay
from tests.helpers.playback import PLAYBACK, TRAJECTORY, FixedTimeEvaluator, kernel_ms
from tools.problem import load_problem


def run_parallel(tmp_path: Path, parallel: int, branches: int, max_turns: int | None) -> ParallelRun:
    from agent.cli.run import create_log

    problem = load_problem(PLAYBACK)
    provider = ScriptedProvider(TRAJECTORY)
    config = RunConfig(
        problem_path=str(PLAYBACK), provider="scripted", model="scripted", max_turns=max_turns,
        parallel=parallel, branches=branches,
    )  # fmt: skip
    log: RunLog = create_log(problem, provider, config, tmp_path)
    executor = LeasedExecutor(Leases(gpus=None, compile_slots=2), FixedTimeEvaluator())
    setup = RunSetup(problem, provider, log, "system", Budget(max_turns=max_turns), executor, NullDisplay())
    run = ParallelRun(setup, parallel=parallel, branches=branches)
    run.run()
    return run


def test_samples_share_one_best_and_a_branch_continues_after_it(tmp_path: Path) -> None:
    run = run_parallel(tmp_path, parallel=3, branches=2, max_turns=2)  # samples stop after openmp
    data = load_run(run.log.dir)
    kinds = [(t.kind, t.from_kernel is not None) for t in data.trajectories]
    assert kinds == [("sample", False)] * 3 + [("branch", True)] * 2
    assert [len(t.benchmarks) for t in data.trajectories[:3]] == [2, 2, 2]
    running = [e for e in data.best_events if not e.final]
    for branch in data.trajectories[3:]:  # from the best when it started: openmp, or blocked once found
        assert branch.from_kernel in {e.kernel_path for e in running}
        source = (run.log.dir / str(branch.from_kernel)).read_text()
        played = [(run.log.dir / str(c.kernel_path)).read_text() for c in branch.benchmarks]
        assert [kernel_ms(code) for code in played] == ([1.0] if kernel_ms(source) == 2.0 else [])
    assert [e.speedup for e in running] == [2.0, 5.0, 10.0]  # every improvement once, never a tie
    best = BestRecord.model_validate_json((run.log.dir / "best.json").read_text())
    assert best.final
    assert best.speedup == 10.0
    assert "scan_blocked" in (run.log.dir / "best.py").read_text()
    assert run.standings.best is not None
    assert data.summary is not None
    assert data.summary.turns == sum(len(t.turns) for t in data.trajectories)
    assert overlapping_leases(data.leases, cpu_problem=True) == []


def test_the_best_so_far_told_to_each_trajectory_is_the_shared_one(tmp_path: Path) -> None:
    run = run_parallel(tmp_path, parallel=2, branches=0, max_turns=None)
    calls = [
        e for e in load_run(run.log.dir).events if isinstance(e, ToolCallEvent) and e.name == "benchmark"
    ]
    assert len(calls) == 6
    assert (
        sum("(this kernel: new best)" in c.summary for c in calls) == 3
    )  # naive, openmp, blocked: once each
    assert "Best so far: 10.00×" in calls[-1].summary


@pytest.mark.parametrize(
    ("wrote", "start"),
    [("01_naive.py", 1), ("02_openmp.py", 2), ("03_blocked_simd.py", 3), (None, 0)],
)
def test_a_scripted_branch_plays_the_steps_after_the_best(wrote: str | None, start: int) -> None:
    provider = ScriptedProvider(TRAJECTORY)
    code = next((v for k, v in provider.kernels.items() if k.endswith(wrote)), None) if wrote else "other"
    branch = provider.branch_from(code or "")
    assert branch.start == start
    assert provider.start == 0
    reply = branch.complete("system", [], [{"role": "user", "content": "go"}])
    if start < 3:
        assert [c.input["kernel_code"] for c in reply.tool_calls] == [
            provider.kernels[provider.trajectory.steps[start].tool_calls[0].kernel_file]
        ]
    else:
        assert reply.tool_calls == []
        assert reply.stop_reason == "end_turn"
