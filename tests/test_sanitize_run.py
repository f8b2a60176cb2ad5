"""`agent run`'s sanitizer without builds: the scripted playback's three kernels, evaluated in a real child
process with a fixed time each (03 fastest), and a sanitizer that finds a race in 03. A finding keeps a
kernel from becoming the best and tells the model why; each distinct kernel is sanitized once (the final
re-check's winner reuses its report); where no sanitizer runs here, every new best says so. The CLI refuses
`--sanitize` where the sanitizer cannot run, before it makes a run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.budget import Budget
from agent.conversation import State
from agent.execution.executor import LeasedExecutor
from agent.execution.leases import Leases
from agent.loop import Agent
from agent.providers.scripted import ScriptedProvider
from agent.run_setup import RunSetup
from agent.runlog.events import BestRecord, RunConfig, ToolCallEvent
from agent.runlog.reader import load_run
from agent.sanitizing import RunSanitizer
from agent.views.live import NullDisplay
from tests.helpers import REPO, TINY
from tests.helpers.playback import PLAYBACK, TRAJECTORY, FixedTimeEvaluator
from tools.judge._sanitize import report_of
from tools.problem import Problem, load_problem
from tools.results import BenchResult, SanitizerReport, SanitizerRun

RACY = "scan_blocked"  # load_inline's name in 03_blocked_simd.py: the fastest kernel


class RacyEvaluator(FixedTimeEvaluator):
    """03 has a shared-memory race; the others are clean. Each sanitize call is counted."""

    def __init__(self) -> None:
        self.sanitized: list[str] = []

    def sanitize(self, problem: Problem, code: str, gpu: int | None) -> SanitizerReport:
        subprocess.run(["sleep", "0.05"], check=True)
        name = next(n for n in ("scan_naive", "scan_openmp", RACY) if n in code)
        self.sanitized.append(name)
        if name == RACY:
            run = SanitizerRun(
                tool="racecheck", status="errors", flag="sanitizer_racecheck", errors=1, kernel="scan_blocked",
                first="Error: Race reported between Write access at scan_blocked(float*)+0x50", budget_s=120.0,
            )  # fmt: skip
        else:
            run = SanitizerRun(tool="racecheck", status="clean", errors=0, budget_s=120.0)
        return report_of([run], "odd", 0.05)


def run_agent(tmp_path: Path, sanitizer: RunSanitizer | None, evaluator: FixedTimeEvaluator) -> Agent:
    from agent.cli.run import create_log

    problem = load_problem(PLAYBACK)
    provider = ScriptedProvider(TRAJECTORY)
    config = RunConfig(problem_path=str(PLAYBACK), provider="scripted", model="scripted")
    log = create_log(problem, provider, config, tmp_path)
    executor = LeasedExecutor(Leases(gpus=None, compile_slots=1), evaluator)
    setup = RunSetup(problem, provider, log, "system", Budget(), executor, NullDisplay(), sanitizer)
    agent = Agent(setup, State(messages=[{"role": "user", "content": "go"}]))
    agent.run()
    return agent


def calls(agent: Agent, name: str = "benchmark") -> list[ToolCallEvent]:
    return [c for t in load_run(agent.log.dir).turns for c in t.tool_calls if c.name == name]


def benchmarks(agent: Agent) -> list[BenchResult]:
    return [BenchResult.model_validate(c.result) for c in calls(agent)]


def test_a_kernel_the_sanitizer_flags_never_becomes_the_best_and_the_model_is_told_why(
    tmp_path: Path,
) -> None:
    evaluator = RacyEvaluator()
    agent = run_agent(tmp_path, RunSanitizer(), evaluator)
    best = BestRecord.model_validate_json((agent.log.dir / "best.json").read_text())
    assert "scan_openmp" in (agent.log.dir / best.kernel_path).read_text()  # 03 was faster, and racy
    racy = next(c for c in calls(agent) if RACY in (agent.log.dir / str(c.kernel_path)).read_text())
    assert racy.status == "incorrect"
    assert racy.is_error
    assert "sanitizer_racecheck" in racy.summary
    assert "Race reported between" in racy.summary
    assert racy.result["sanitizer"]["status"] == "flagged"
    assert racy.result["sanitizer"]["budget_s"] == 120.0  # the log shows the budget it ran under
    # each distinct kernel once; the final re-check's winner (02) reused its report
    assert evaluator.sanitized == ["scan_naive", "scan_openmp", RACY]
    final = calls(agent, "final_recheck")
    assert final
    assert final[-1].result["sanitizer"]["cached"] is True


def test_a_flagged_kernel_is_not_a_candidate_of_the_final_recheck(tmp_path: Path) -> None:
    agent = run_agent(tmp_path, RunSanitizer(), RacyEvaluator())
    shortlist = [k.kernel_path for k in agent.standings.candidates]
    texts = [(agent.log.dir / path).read_text() for path in shortlist]
    assert not any(RACY in text for text in texts)


def test_without_the_sanitizer_the_fastest_kernel_wins(tmp_path: Path) -> None:
    """The same run with the sanitizer off: 03 is the best, so the test above fails without the guard."""
    evaluator = RacyEvaluator()
    agent = run_agent(tmp_path, None, evaluator)
    best = BestRecord.model_validate_json((agent.log.dir / "best.json").read_text())
    assert RACY in (agent.log.dir / best.kernel_path).read_text()
    assert evaluator.sanitized == []
    assert all(r.sanitizer is None for r in benchmarks(agent))


def test_where_no_sanitizer_runs_every_new_best_says_so(tmp_path: Path) -> None:
    evaluator = RacyEvaluator()
    agent = run_agent(tmp_path, RunSanitizer(unavailable="compute-sanitizer not found"), evaluator)
    assert evaluator.sanitized == []
    best = BestRecord.model_validate_json((agent.log.dir / "best.json").read_text())
    assert RACY in (agent.log.dir / best.kernel_path).read_text()
    reports = [r.sanitizer for r in benchmarks(agent)]
    assert all(r is not None and r.status == "unavailable" for r in reports)
    assert all(
        "sanitizer: not sanitized: compute-sanitizer not found" in r.notices for r in benchmarks(agent)
    )


def test_an_executor_that_cannot_sanitize_says_so(tmp_path: Path) -> None:
    """An evaluator without `sanitize` (a Ray node, an older one): the best carries an unavailable report."""
    agent = run_agent(tmp_path, RunSanitizer(), FixedTimeEvaluator())
    reports = [r.sanitizer for r in benchmarks(agent)]
    assert reports
    assert all(r is not None and r.status == "unavailable" for r in reports)
    assert all("does not run the sanitizer" in r.message for r in reports if r is not None)


def test_agent_run_sanitize_where_it_cannot_run_is_refused_before_a_run_folder_exists(tmp_path: Path) -> None:
    """A C++ compiler without an ASan runtime (CXX=false: it prints nothing)."""
    env = {**os.environ, "CXX": "false", "KERNEL_AGENT_RUNS": str(tmp_path), "NO_COLOR": "1"}
    env.pop("ANTHROPIC_API_KEY", None)
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", str(PLAYBACK), "--sanitize", "--json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--sanitize: the sanitizer cannot run here" in done.stderr
    assert "no ASan runtime" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "env", "device", "mode"),
    [
        ("--sanitize", "off", "cpu", "on"),
        ("--no-sanitize", "on", "cuda", "off"),
        (None, "off", "cuda", "off"),
        (None, None, "cpu", "off"),  # ASan builds cost 40-80 s on 2 cores: asked for only
        (None, None, "cuda", "auto"),  # compute-sanitizer: about 20 s per new best on the H200
        (None, "auto", "cpu", "auto"),
    ],
)
def test_the_sanitize_mode_comes_from_the_flag_then_the_environment_then_the_device(
    monkeypatch: pytest.MonkeyPatch, flag: str | None, env: str | None, device: str, mode: str
) -> None:
    from agent.cli.run import sanitize_mode

    if env is None:
        monkeypatch.delenv("KERNEL_AGENT_SANITIZE", raising=False)
    else:
        monkeypatch.setenv("KERNEL_AGENT_SANITIZE", env)
    assert sanitize_mode(None if flag is None else flag == "--sanitize", device) == mode


def test_run_json_records_the_sanitize_mode(tmp_path: Path) -> None:
    agent = run_agent(tmp_path, None, FixedTimeEvaluator())
    info = json.loads((agent.log.dir / "run.json").read_text())
    assert info["config"]["sanitize"] == "off"  # RunConfig's default; the CLI writes what it resolved


def test_the_models_text_the_terminal_and_the_report_show_the_sanitizer() -> None:
    import io

    from rich.console import Console, Group

    from agent.report.turns import bench_html
    from agent.views.result import bench_view
    from tools.benchmark import text as bench_text
    from tools.judge import with_sanitizer

    run = SanitizerRun(
        tool="memcheck", status="errors", flag="sanitizer_memcheck", errors=2, kernel="scan_k",
        first="Invalid __global__ read of size 4 bytes", seconds=30.0, budget_s=120.0,
    )  # fmt: skip
    result = with_sanitizer(
        BenchResult(status="ok", correct=True, speedup=2.0, message="fine"), report_of([run], "odd", 31.0)
    )
    line = "sanitizer flagged: memcheck found 2 errors in scan_k: Invalid __global__ read of size 4 bytes"
    told = bench_text(result, None, False)
    assert told.startswith("benchmark INCORRECT: disqualified. sanitizer: memcheck found 2 errors in scan_k")
    assert "flag sanitizer_memcheck (disqualifying): memcheck found 2 errors in scan_k" in told
    assert f"S{line[1:]} (memcheck at case odd; 31 s of a 120 s budget)" in told
    console = Console(file=io.StringIO(), width=300, legacy_windows=False)
    console.print(Group(*bench_view(result, None, full=True)))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert line in shown
    assert "memcheck: errors, 2 errors (30 s of 120 s)" in shown
    assert line in bench_html(result, None)


@pytest.mark.parametrize(
    ("tools", "why"),
    [
        ("memcheck", "memcheck cannot check a cpu problem (use asan)"),
        (
            "memcheck,valgrind",
            "tools are memcheck, racecheck, initcheck, synccheck, asan; got 'memcheck,valgrind'",
        ),
    ],
)
def test_agent_bench_refuses_tools_that_cannot_sanitize_the_problem(
    tmp_path: Path, tools: str, why: str
) -> None:
    """Before any evaluation: compute-sanitizer's tools are for CUDA problems, asan for CPU ones."""
    kernel = tmp_path / "k.py"
    kernel.write_text("class ModelNew:\n    pass\n")
    problem = TINY
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "bench", str(problem), str(kernel), "--sanitize-tools", tools],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert why in done.stderr
    assert done.stdout == ""
