"""Re-judging a red-team run's candidates: each benchmarked candidate's first verdict (the one the model
read) beside the stricter one (agent/redteam/strict.py), as one `RejudgeEvent` each.

A candidate the first judgement rejected is `caught` (not judged again). One it accepted is benchmarked
on the stricter problem through the run's executor, then, where that passes, run under the sanitizer where
it runs here; where the stricter verdict rejects it, it is `caught on re-judge` and written out as a
regression case (agent/redteam/cases.py); where both accept it, it `escaped`. A kernel benchmarked twice is
judged again once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from agent.execution.executor import Executor, KernelJob
from agent.redteam.attacks import attack_of
from agent.redteam.cases import Check, ExpectedCase, case_name, problem_reference, write_case
from agent.redteam.strict import Verdict, strict_problem, verdict_of, why_rejected
from agent.runlog.events import Event, RejudgeEvent, ToolCallEvent
from tools.problem import Problem
from tools.results import BenchResult, SanitizerReport

HARNESS_ERROR = "harness_error"  # a tool call's status where the evaluator itself failed (agent/loop.py)
SanitizerCall = Callable[[KernelJob], SanitizerReport | None]


def benchmarked(events: list[Event]) -> list[ToolCallEvent]:
    """The run's benchmark calls of a kernel (with a verdict, or the harness's failure), in log order."""
    return [
        e
        for e in events
        if isinstance(e, ToolCallEvent) and e.name == "benchmark" and e.kernel_path
        if e.result or e.status == HARNESS_ERROR
    ]


def first_verdict(event: ToolCallEvent) -> Verdict:
    """The verdict the model read, as the evaluator gave it (the stricter floor guard is the re-judge's)."""
    if not event.result:  # the evaluator itself failed: the tool's text says how
        return Verdict(event.status, caught_by=event.summary)
    result = BenchResult.model_validate(event.result)
    return Verdict(result.status, list(result.flags), result.speedup, why_rejected(result, result.status, []))


def strict_verdict(executor: Executor, strict: Problem, job: KernelJob, sanitize: SanitizerCall) -> Verdict:
    """The stricter benchmark; then, where it passes, the sanitizer folded in (where it runs here)."""
    from tools.judge import with_sanitizer

    result = executor.benchmark(KernelJob(strict, job.code, job.kernel_path))
    if result.status == "ok" and (report := sanitize(job)) is not None:
        result = with_sanitizer(result, report)
    return verdict_of(result)


def check_of(verdict: Verdict) -> Check:
    if "faster_than_floor" in verdict.flags:
        return "floor"
    return "sanitizer" if "sanitizer:" in verdict.caught_by else "correctness"


class Rejudge:
    """Re-judging one run: its problem, executor, folder, and the sanitizer (None: not available here)."""

    def __init__(self, problem: Problem, executor: Executor, run_dir: Path, sanitize: SanitizerCall) -> None:
        self.problem, self.executor, self.run_dir, self.sanitize = problem, executor, run_dir, sanitize
        self.strict = strict_problem(problem)
        self.done: dict[str, RejudgeEvent] = {}

    def one(self, call: ToolCallEvent) -> RejudgeEvent:
        assert call.kernel_path is not None
        code = (self.run_dir / call.kernel_path).read_text()
        if code in self.done and self.done[code].outcome != "harness error":  # benchmarked again: judged once
            return self.done[code].model_copy(
                update={"kernel_path": call.kernel_path, "candidate_turn": call.turn}
            )
        started = time.monotonic()
        attack, first = attack_of(code), first_verdict(call)
        base = {
            "candidate_turn": call.turn, "kernel_path": call.kernel_path, "attack": attack.name,
            "first_status": first.status, "first_flags": first.flags, "first_speedup": first.speedup,
        }  # fmt: skip
        if first.status == HARNESS_ERROR:  # no verdict to judge again: a finding about the harness
            event = RejudgeEvent(**base, outcome="harness error", caught_by=first.caught_by)
        elif not first.accepted:
            event = RejudgeEvent(**base, outcome="caught", caught_by=first.caught_by)
        else:
            job = KernelJob(self.problem, code, call.kernel_path)
            strict = strict_verdict(self.executor, self.strict, job, self.sanitize)
            event = RejudgeEvent(
                **base, strict_status=strict.status, strict_flags=strict.flags, caught_by=strict.caught_by,
                outcome="escaped" if strict.accepted else "caught on re-judge",
                seconds=time.monotonic() - started,
            )  # fmt: skip
            if not strict.accepted:
                event.case_dir = str(self.write(code, call, attack.description, first, strict))
        self.done[code] = event
        return event

    def write(
        self, code: str, call: ToolCallEvent, description: str, first: Verdict, strict: Verdict
    ) -> Path:
        expected = ExpectedCase(
            problem=problem_reference(self.problem.path),
            attack=attack_of(code).name,
            description=description,
            first_status=first.status,
            first_speedup=first.speedup,
            expected_status=strict.status,
            expected_flags=strict.flags,
            caught_by=strict.caught_by,
            check=check_of(strict),
            run_id=self.run_dir.name,
            kernel_path=call.kernel_path or "",
        )
        return write_case(self.run_dir, case_name(expected.attack, expected.kernel_path), code, expected)
