"""`agent run --parallel auto` and a cap on `--parallel N` (agent/execution/capacity.py): what each resource
holds, the run's first lines and run.json; and a trajectory that crashes leaves the others running and its
own log intact."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agent.budget import Budget
from agent.execution.capacity import Machine, choice_lines, choose_parallel
from agent.execution.executor import LeasedExecutor
from agent.execution.leases import Leases
from agent.parallel import ParallelRun
from agent.providers.scripted import ScriptedProvider
from agent.run_setup import RunSetup
from agent.runlog.events import ErrorEvent, RunConfig, RunInfo
from agent.runlog.reader import load_run
from agent.views.live import NullDisplay
from tests.helpers import REPO
from tests.helpers.playback import PLAYBACK, TRAJECTORY, FixedTimeEvaluator
from tools.problem import load_problem

H200 = Machine(cores=16, gpus=1, gpu_memory_gib=139.8, truth_uses=1)


def test_auto_on_one_gpu_stops_where_the_truth_saturates_and_says_so() -> None:
    choice = choose_parallel("auto", "cuda", H200)
    assert choice.chose == 2
    assert {c.resource: c.most for c in choice.limits} == {"cores": 16, "gpus": 4, "truth": 2}
    (line,) = choice_lines(choice)
    assert line.startswith("--parallel auto: 2 trajectories at once (truth: at most 2 (")
    assert "KERNEL_AGENT_SHARE_TRUTH=1" in line


def test_auto_with_shared_truth_takes_four_a_gpu_and_a_number_runs_as_asked_without_a_line() -> None:
    shared = Machine(cores=16, gpus=2, gpu_memory_gib=79.6, truth_uses=2)
    assert choose_parallel("auto", "cuda", shared).chose == 8  # 4 a GPU: one timed loop at a time each
    asked = choose_parallel(3, "cuda", shared)
    assert asked.chose == 3
    assert choice_lines(asked) == []


@pytest.mark.parametrize(
    ("machine", "device", "chose", "held_by"),
    [
        (Machine(cores=2, gpus=0, gpu_memory_gib=None, truth_uses=1), "cpu", 2, "cores"),
        (Machine(cores=16, gpus=0, gpu_memory_gib=None, truth_uses=1), "cpu", 2, "host"),
        (Machine(cores=16, gpus=0, gpu_memory_gib=None, truth_uses=2), "cuda", 1, "gpus"),
        (Machine(cores=16, gpus=1, gpu_memory_gib=40.0, truth_uses=2), "cuda", 1, "gpu_memory"),
        (Machine(cores=3, gpus=1, gpu_memory_gib=139.8, truth_uses=2), "cuda", 3, "cores"),
    ],
)
def test_eight_asked_runs_what_the_machine_holds_and_names_the_reason(
    machine: Machine, device: str, chose: int, held_by: str
) -> None:
    choice = choose_parallel(8, device, machine)
    assert choice.chose == chose
    (line,) = choice_lines(choice)
    assert line.startswith(f"--parallel 8: running {chose}, fewer than asked (")
    assert f"{held_by}: at most {chose} (" in line


def test_the_run_says_why_in_its_first_lines_and_records_it(tmp_path: Path) -> None:
    """On this machine (a CPU problem: at most 2, the host's), asked for 8: it says so before anything else and
    run.json keeps the choice. --max-turns 0 ends each trajectory before its first model turn (no build: a
    --max-minutes this short still let each trajectory take one turn, which built its kernel: 39 s of the fast tier)."""
    done = subprocess.run(
        [
            sys.executable, "-m", "agent.cli", "run", "tests/problems/scan_tiny_playback.yaml", "--model",
            "scripted", "--parallel", "8", "--max-turns", "0", "--runs-dir", str(tmp_path),
        ],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (run_dir,) = tmp_path.iterdir()
    info = RunInfo.model_validate_json((run_dir / "run.json").read_text())
    choice = info.config.parallel_choice
    assert choice is not None
    assert choice.asked == 8
    assert info.config.parallel == choice.chose <= 2
    lines = " ".join(done.stderr.split())  # the console wraps long lines
    assert lines.startswith(f"--parallel 8: running {choice.chose}, fewer than asked ("), done.stderr
    assert f"{choice.chose} trajectories at once" in lines


def test_auto_is_refused_on_ray_which_leases_itself() -> None:
    from agent.cli.run_options import UsageError, parallel_choice
    from tools.problem import load_problem

    problem = load_problem(REPO / "tests" / "problems" / "scan_tiny.yaml")
    with pytest.raises(UsageError, match="--parallel auto"):
        parallel_choice("auto", "ray", problem, None)
    assert parallel_choice(4, "ray", problem, None).chose == 4


class CrashOnce(ScriptedProvider):
    """The bundled playback, whose first trajectory to reach its second turn raises there: a harness bug (not
    a provider error), which ends that trajectory."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.crashed = False
        self.lock = threading.Lock()

    def complete(self, system: str, tools: list[dict[str, Any]], messages: list[Any]) -> Any:
        with self.lock:
            crash = not self.crashed and sum(1 for m in messages if m["role"] == "assistant") == 1
            self.crashed = self.crashed or crash
        if crash:
            raise RuntimeError("an injected harness bug")
        return super().complete(system, tools, messages)


def test_a_crashing_trajectory_leaves_the_others_running_and_its_log_intact(tmp_path: Path) -> None:
    from agent.cli.run import create_log

    problem = load_problem(PLAYBACK)
    provider = CrashOnce(TRAJECTORY)
    config = RunConfig(problem_path=str(PLAYBACK), provider="scripted", model="scripted", parallel=2)
    log = create_log(problem, provider, config, tmp_path)
    executor = LeasedExecutor(Leases(gpus=None, compile_slots=2), FixedTimeEvaluator())
    setup = RunSetup(problem, provider, log, "system", Budget(), executor, NullDisplay())
    ParallelRun(setup, parallel=2, branches=0).run()
    data = load_run(log.dir)
    assert provider.crashed
    (failed,) = [t for t in data.trajectories if t.exit_status == "ModelError"]
    (other,) = [t for t in data.trajectories if t.number != failed.number]
    assert other.exit_status in ("Finished", "TurnLimit")
    assert len(other.benchmarks) == 3  # it played every step, the other's crash notwithstanding
    assert len(failed.benchmarks) == 1  # what the crashed one did before it is still in the log
    errors = [e for e in data.events if isinstance(e, ErrorEvent) and e.trajectory == failed.number]
    assert any("an injected harness bug" in e.message for e in errors)
    assert data.summary is not None
