"""The tools as the agent uses them, one record each: what the model is told (each tool's `SPEC`, from its
home in tools/compile_kernel.py, tools/benchmark.py or tools/profile_kernel.py), how a call runs (through the run's executor, to
a typed result), the text the model reads back (the tool's own `text`), and the view a person sees
(agent.views.result).

Adding a tool is adding a record to `TOOLS`: the API's tool list and the system prompt's (agent.prompt),
the loop's dispatch (agent.loop), the scripted playback's check (agent.providers.scripted) and the views
of `agent show` and the live display (agent.views.event) all read the records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from pydantic import ValidationError
from rich.console import RenderableType

from agent.execution.executor import Executor, KernelJob
from agent.runlog.events import TimedKernel, ToolCallEvent
from agent.views.profile import profile_view
from agent.views.result import bench_view, compile_view
from tools.benchmark import SPEC as BENCHMARK_SPEC
from tools.benchmark import headline as bench_headline
from tools.benchmark import text as bench_text
from tools.compile_kernel import SPEC as COMPILE_SPEC
from tools.compile_kernel import text as compile_text
from tools.problem import Problem
from tools.profile_kernel import SPEC as PROFILE_SPEC
from tools.profile_kernel import text as profile_text
from tools.profile_results import ProfileResult
from tools.results import BenchResult, CompileResult
from tools.toolspec import ToolSpec

R = TypeVar("R", CompileResult, BenchResult, ProfileResult)
AnyResult = CompileResult | BenchResult | ProfileResult


@dataclass(frozen=True)
class Tool(Generic[R]):
    """One tool, whole: what the model is offered, how a call runs, what the model and a person see."""

    spec: ToolSpec  # name, description, the system prompt's line, input schema
    phase: str  # what the heartbeat says while it runs
    result_type: type[R]
    run: Callable[[Executor, KernelJob], R]  # one call's kernel, through the run's executor
    is_error: Callable[[R], bool]
    text: Callable[[R, TimedKernel | None, bool], str]  # for the model: (result, best so far, new best?)
    view: Callable[[R, str | None, bool], Iterable[RenderableType]]  # (result, kernel path, full)
    times_kernels: bool = False  # a correct result is a candidate for the best
    offered: bool = True  # offered to the model (the final re-check is logged, never offered)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def brief(self) -> str:
        return self.spec.brief

    @property
    def schema(self) -> dict[str, Any]:
        return self.spec.schema

    def parse(self, dump: dict[str, Any]) -> R | None:
        """The typed result of a logged call (None when the log holds none, or an unreadable one)."""
        if not dump:
            return None
        try:
            return self.result_type.model_validate(dump)
        except ValidationError:
            return None


def more_repetitions(problem: Problem) -> Problem:
    """The problem with twice the timed repetitions and a tighter spread target, for the final re-check."""
    cfg = problem.spec.timing_config
    timing = cfg.model_copy(
        update={
            "min_iters": cfg.min_iters * 2,
            "max_iters": cfg.max_iters * 2,
            "target_rse": cfg.target_rse / 2,
            "max_seconds": cfg.max_seconds * 2,
        }
    )
    return problem.model_copy(update={"spec": problem.spec.model_copy(update={"timing_config": timing})})


COMPILE = Tool(
    spec=COMPILE_SPEC,
    phase="compiling",
    result_type=CompileResult,
    run=lambda executor, job: executor.compile(job),
    is_error=lambda result: not result.ok,
    text=lambda result, _best, _new: compile_text(result),
    view=compile_view,
)

BENCHMARK = Tool(
    spec=BENCHMARK_SPEC,
    phase="benchmarking",
    result_type=BenchResult,
    run=lambda executor, job: executor.benchmark(job),
    is_error=lambda result: not result.correct,
    text=bench_text,
    view=bench_view,
    times_kernels=True,
)

PROFILE = Tool(
    spec=PROFILE_SPEC,
    phase="profiling",
    result_type=ProfileResult,
    run=lambda executor, job: executor.profile(job),
    is_error=lambda result: result.status != "ok",
    text=lambda result, _best, _new: profile_text(result),
    view=profile_view,
)

FINAL_RECHECK = Tool(
    # seed None: the evaluation's data and truth come from a seed drawn in secret and never used before (the
    # truth made ahead while the run went on, or made now), so a kernel fitted to what it saw gains nothing,
    # and the re-check does not wait for truth nobody will use and then make its own (20 s a kernel on the H200).
    spec=ToolSpec(
        name="final_recheck",
        description="A candidate benchmarked again at the end: a fresh seed, twice the repetitions.",
        brief="",
    ),
    phase="rechecking",
    result_type=BenchResult,
    run=lambda executor, job: executor.benchmark(
        replace(job, problem=more_repetitions(job.problem)), seed=None
    ),
    is_error=lambda result: not result.correct,
    text=lambda result, _best, _new: bench_headline(result),
    view=bench_view,
    offered=False,
)

TOOLS: tuple[Tool[Any], ...] = (COMPILE, BENCHMARK, PROFILE, FINAL_RECHECK)
OFFERED: tuple[Tool[Any], ...] = tuple(t for t in TOOLS if t.offered)


def find(name: str) -> Tool[Any] | None:
    return next((t for t in TOOLS if t.name == name), None)


def schemas() -> list[dict[str, Any]]:
    """The tool list of every model call."""
    return [t.schema for t in OFFERED]


def prompt_lines() -> list[str]:
    """The system prompt's list of tools."""
    return [f"- {t.name}(kernel_code): {t.brief}" for t in OFFERED]


def invalid_call_text(name: str, arguments: Iterable[str]) -> str:
    names = [f"{t.name}(kernel_code)" for t in OFFERED]
    offered = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)
    return f"invalid call: tools are {offered}; got {name}({', '.join(arguments)})"


def parse_result(call: ToolCallEvent) -> AnyResult | None:
    tool = find(call.name)
    return tool.parse(call.result) if tool else None


def logged_call(
    tool: Tool[Any], result: AnyResult, *, turn: int, tool_use_id: str, kernel_path: str,
    arguments: dict[str, Any], text: str, seconds: float,
) -> ToolCallEvent:  # fmt: skip
    """The log's record of one call that returned a result."""
    return ToolCallEvent(
        turn=turn,
        tool_use_id=tool_use_id,
        name=tool.name,
        arguments=arguments,
        kernel_path=kernel_path,
        status=result.status,
        is_error=tool.is_error(result),
        result=result.model_dump(mode="json"),
        summary=text,
        seconds=seconds,
    )
