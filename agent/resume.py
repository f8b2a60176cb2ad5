"""`agent run --resume RUN_DIR`: which runs can be continued, and the exact conversation, totals and
best a stopped or killed run had, rebuilt from its log with the functions the loop builds them with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent import toolbox
from agent.best import Standings, timed_kernel
from agent.conversation import State, add_reply, pending_tool_calls, tool_result_block
from agent.prompt import first_user_message
from agent.providers import model_spec
from agent.runlog.events import (
    BestEvent,
    Event,
    ModelCallEvent,
    RunEndEvent,
    RunInfo,
    TimedKernel,
    ToolCallEvent,
    TrajectoryEvent,
    TurnEndEvent,
)
from agent.runlog.reader import read_events
from tools.problem import Problem, load_problem
from tools.results import BenchResult


class CannotResume(Exception):
    """The run cannot be continued; the message says why."""


def resumable(run_dir: Path, problem_arg: str | None, model_arg: str | None) -> tuple[RunInfo, Problem]:
    """The run's record and its problem, once it is clear the run can be continued as it was started."""
    if not (run_dir / "run.json").is_file():
        raise CannotResume(f"--resume {run_dir}: not a run folder (no run.json)")
    info = RunInfo.model_validate_json((run_dir / "run.json").read_text())
    events = read_events(run_dir)
    if info.config.parallel > 1 or info.config.executor != "local" or ran_trajectories(events):
        raise CannotResume(f"--resume {run_dir}: resuming a parallel or Ray run is not supported yet")
    if info.config.mode == "redteam":  # its prompt and its re-judge are agent redteam's, not agent run's
        raise CannotResume(f"--resume {run_dir}: a red-team run is not resumed; start a new `agent redteam`")
    problem = load_problem(problem_arg or info.config.problem_path)
    if problem.content_hash != info.problem_hash:
        raise CannotResume(
            f"--resume: {problem.path} changed since the run started "
            f"(hash {problem.content_hash} != {info.problem_hash})"
        )
    ended = [e for e in events if isinstance(e, RunEndEvent)]
    if ended and ended[-1].exit_status == "Finished":
        raise CannotResume(f"--resume {run_dir}: the model already ended this run; start a new one")
    if model_arg and model_arg not in (info.model, model_spec(info.provider, info.model)):
        raise CannotResume(
            f"--resume: the run used model {info.model!r}; cannot continue it with {model_arg!r}"
        )
    return info, problem


def ran_trajectories(events: list[Event]) -> bool:
    """Whether the run was driven as a parallel run (its events carry trajectories): `--gpus` makes one
    even with a single trajectory. The GPUs a run used are no sign of it: on a GPU machine a plain run
    records every visible GPU in its config (agent.cli.run_options.choose_gpus), and resuming takes them again."""
    return any(isinstance(e, TrajectoryEvent) or e.trajectory is not None for e in events)


def state_from_log(problem: Problem, run_dir: Path) -> tuple[State, Standings]:
    """The exact conversation, totals and best a killed or stopped run had, from its events."""
    state = State(messages=[{"role": "user", "content": first_user_message(problem)}])
    best: TimedKernel | None = None
    candidates: list[TimedKernel] = []
    results: list[dict[str, Any]] = []
    for ev in read_events(run_dir):
        if isinstance(ev, ModelCallEvent) and ev.status == "ok":
            if results:
                state.messages.append({"role": "user", "content": results})
                results = []
            add_reply(state.messages, ev.content, ev.stop_reason)
            state.turn = ev.turn
            state.usage += ev.usage
            state.cost_usd += ev.cost_usd
            state.llm_seconds += ev.seconds
        elif isinstance(ev, ToolCallEvent) and any(
            c.id == ev.tool_use_id for c in pending_tool_calls(state.messages)
        ):
            results.append(tool_result_block(ev.tool_use_id, ev.summary, ev.is_error))
            state.tool_seconds += ev.seconds
            candidates += timed_kernels_of(ev)
        elif isinstance(ev, TurnEndEvent):
            state.earlier_wall_s += ev.turn_seconds
        elif isinstance(ev, BestEvent):
            best = TimedKernel.model_validate(ev.model_dump())
    answered = {r["tool_use_id"] for r in results}
    if results and all(c.id in answered for c in pending_tool_calls(state.messages)):
        state.messages.append({"role": "user", "content": results})
    else:
        state.partial_results = results  # killed between two tool calls: the rest run on resume
    return state, Standings(best, candidates)


def timed_kernels_of(event: ToolCallEvent) -> list[TimedKernel]:
    """The candidate for the best a logged call found, if any (as the loop counted it live)."""
    tool = toolbox.find(event.name)
    if tool is None or not tool.times_kernels or event.kernel_path is None:
        return []
    result = tool.parse(event.result)
    timed = timed_kernel(result, event.turn, event.kernel_path) if isinstance(result, BenchResult) else None
    return [timed] if timed else []
