"""`agent run --resume`: which runs can be continued. A plain run on a GPU machine records the GPUs it
timed on (every visible one) and is resumed onto them; a run driven as a parallel run is refused."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from agent.cli.run import create_log, reopen_agent
from agent.providers.scripted import ScriptedProvider
from agent.resume import CannotResume, resumable
from agent.runlog.events import RunConfig, RunSummary, TrajectoryEvent
from tools.problem import Problem


def a_run(tmp_path: Path, problem: Problem, gpus: list[int] | None) -> tuple[Path, ScriptedProvider]:
    """A run as `agent run` starts one (its run.json), stopped before its first turn; its playback ends
    its turn at once."""
    trajectory = tmp_path / "trajectory.yaml"
    trajectory.write_text(yaml.safe_dump({"steps": [{"text": "Done."}]}))
    provider = ScriptedProvider(trajectory)
    config = RunConfig(problem_path=str(problem.path), provider="scripted", model="scripted", gpus=gpus)
    log = create_log(problem, provider, config, tmp_path / "runs")
    log.close()
    return log.dir, provider


def test_a_run_made_on_a_gpu_machine_resumes_onto_its_gpus(
    tmp_path: Path, tiny: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_AGENT_WARM", "0")  # nothing made ahead: this test times nothing
    run_dir, provider = a_run(tmp_path, tiny, gpus=[0])  # what choose_gpus records on a one-GPU host
    info, _ = resumable(run_dir, None, None)
    assert info.config.gpus == [0]
    agent = reopen_agent(run_dir, Console(file=io.StringIO()), provider=provider)
    assert agent.run().status == "Finished"
    assert RunSummary.model_validate_json((run_dir / "summary.json").read_text()).exit_status == "Finished"


def test_a_run_driven_as_a_parallel_run_is_refused_even_with_one_trajectory(
    tmp_path: Path, tiny: Problem
) -> None:
    run_dir, _ = a_run(tmp_path, tiny, gpus=[0])  # `--gpus 0` drives even one trajectory in parallel
    with (run_dir / "events.jsonl").open("a") as events:
        events.write(TrajectoryEvent(trajectory=1, action="started").model_dump_json() + "\n")
    with pytest.raises(CannotResume, match="parallel"):
        resumable(run_dir, None, None)


def test_a_red_team_run_is_refused(tmp_path: Path, tiny: Problem) -> None:
    """Its prompt and its re-judge are `agent redteam`'s: `agent run --resume` would continue it as a plain run."""
    trajectory = tmp_path / "trajectory.yaml"
    trajectory.write_text(yaml.safe_dump({"steps": [{"text": "Done."}]}))
    config = RunConfig(problem_path=str(tiny.path), provider="scripted", model="scripted", mode="redteam")
    log = create_log(tiny, ScriptedProvider(trajectory), config, tmp_path / "runs")
    log.close()
    with pytest.raises(CannotResume, match="red-team"):
        resumable(log.dir, None, None)
