"""The agent loop: `run()` loops `step()`; one step = one model call and the tools it asks for.

Control flow by exceptions: every way a run ends is an `AgentExit` subclass carrying its message, and
its class name is the exit status. Every event is appended to the log as it happens, and the summary is
written in `finally`, so the log is complete however the run ends (Ctrl-C included).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from agent.events import (
    BestEvent,
    BestRecord,
    ErrorEvent,
    Event,
    ModelCallEvent,
    RunEndEvent,
    RunSummary,
    ToolCallEvent,
    TurnEndEvent,
    Usage,
)
from agent.feedback import BestSoFar, bench_text, bounded_messages, compile_text
from agent.prompt import TOOLS, Budget, first_user_message
from agent.providers.base import Message, ModelReply, Provider, ProviderError, ToolCall
from agent.runlog import RunLog, read_events
from tools.problem import Problem
from tools.results import BenchResult, CompileResult

SPREAD_SIGMAS = 2.0  # a new best must beat the old by this many standard errors of both medians
RECHECK_TOP = 3  # candidates re-benchmarked at the end ...
RECHECK_WITHIN = 0.75  # ... among those within this fraction of the best speedup
MAX_TOKENS_NOTE = (
    "Your previous reply hit the max_tokens limit and was cut off; any tool call in it was not run. "
    "Reply again, shorter: one tool call with the whole module, little prose."
)


class AgentExit(Exception):
    """Ends the run. The subclass name is the exit status; the message says why."""

    exit_code = 0

    @property
    def status(self) -> str:
        return type(self).__name__


class Finished(AgentExit):
    """The model ended its turn without a tool call."""


class TurnLimit(AgentExit):
    pass


class CostLimit(AgentExit):
    pass


class TimeLimit(AgentExit):
    pass


class TargetReached(AgentExit):
    pass


class Interrupted(AgentExit):
    exit_code = 130


class Refused(AgentExit):
    exit_code = 3


class ContextExhausted(AgentExit):
    exit_code = 3


class ModelError(AgentExit):
    exit_code = 3


class Progress(BaseModel):
    """What the live display shows."""

    turn: int
    phase: str
    usage: Usage
    cost_usd: float
    best_speedup: float | None
    elapsed_s: float
    scripted: bool


class Display(Protocol):
    def progress(self, progress: Progress) -> None: ...

    def event(self, event: Event) -> None: ...


class NullDisplay:
    def progress(self, progress: Progress) -> None:
        pass

    def event(self, event: Event) -> None:
        pass


class Evaluator(BaseModel):
    """The evaluator entry points (the real ones from tools/, bound late so the CLI starts light)."""

    model_config = {"arbitrary_types_allowed": True}
    compile: Callable[[Problem, str], CompileResult]
    benchmark: Callable[..., BenchResult]
    kill_all_children: Callable[[], None]

    @classmethod
    def real(cls) -> Evaluator:
        from tools.judge import benchmark, compile_kernel
        from tools.supervise import kill_all_children

        return cls(compile=compile_kernel, benchmark=benchmark, kill_all_children=kill_all_children)


class Candidate(BaseModel):
    turn: int
    kernel_path: str
    speedup: float
    median_ms: float
    rse: float


# --- the conversation: the same functions build it live and rebuild it from the log ---------------


def add_reply(messages: list[Message], content: list[dict[str, Any]], stop_reason: str | None) -> None:
    """Add a reply to the history (live, and again when a resume rebuilds it from the log)."""
    if stop_reason == "max_tokens":
        # a cut-off reply may hold a half-written tool call or unsigned thinking: keep its text only
        text = [b for b in content if b.get("type") == "text"] or [{"type": "text", "text": "[cut off]"}]
        content = text
    if messages and messages[-1]["role"] == "assistant":  # the continuation of a pause_turn
        messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *content]}
    else:
        messages.append({"role": "assistant", "content": content})
    if stop_reason == "max_tokens":
        messages.append({"role": "user", "content": MAX_TOKENS_NOTE})


def tool_result_block(tool_use_id: str, text: str, is_error: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": is_error}


def pending_tool_calls(messages: list[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet."""
    if not messages or messages[-1]["role"] != "assistant":
        return []
    return ModelReply(content=messages[-1]["content"], stop_reason="tool_use").tool_calls


def best_so_far(record: BestRecord) -> BestSoFar:
    return BestSoFar(
        turn=record.turn,
        kernel_path=record.kernel_path,
        speedup=record.speedup,
        median_ms=record.median_ms,
        rse=record.rse,
    )


def beats(median_ms: float, rse: float, best: BestSoFar | None) -> bool:
    if best is None:
        return True
    spread = SPREAD_SIGMAS * (median_ms * rse + best.median_ms * best.rse)
    return median_ms + spread < best.median_ms


class State(BaseModel):
    messages: list[Message]
    turn: int = 0
    usage: Usage = Usage()
    cost_usd: float = 0.0
    llm_seconds: float = 0.0
    tool_seconds: float = 0.0
    earlier_wall_s: float = 0.0  # wall time of the sessions before a resume
    best: BestSoFar | None = None
    candidates: list[Candidate] = []
    partial_results: list[dict[str, Any]] = []


def state_from_log(problem: Problem, run_dir: Path) -> State:
    """The exact conversation and totals a killed or stopped run had, from its events."""
    state = State(messages=[{"role": "user", "content": first_user_message(problem)}])
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
            record_candidate(state, ev)
        elif isinstance(ev, TurnEndEvent):
            state.earlier_wall_s += ev.turn_seconds
        elif isinstance(ev, BestEvent):
            state.best = BestSoFar(
                turn=ev.turn,
                kernel_path=ev.kernel_path,
                speedup=ev.speedup,
                median_ms=ev.median_ms,
                rse=ev.rse,
            )
    answered = {r["tool_use_id"] for r in results}
    if results and all(c.id in answered for c in pending_tool_calls(state.messages)):
        state.messages.append({"role": "user", "content": results})
    else:
        state.partial_results = results  # killed between two tool calls: the rest run on resume
    return state


def record_candidate(state: State, ev: ToolCallEvent) -> None:
    if ev.name != "benchmark" or not ev.result or ev.kernel_path is None:
        return
    result = BenchResult.model_validate(ev.result)
    timing = result.primary_timing
    if result.correct and result.speedup is not None and timing and timing.candidate:
        state.candidates.append(
            Candidate(
                turn=ev.turn,
                kernel_path=ev.kernel_path,
                speedup=result.speedup,
                median_ms=timing.candidate.median_ms,
                rse=timing.candidate.rse,
            )
        )


class Agent:
    def __init__(
        self,
        problem: Problem,
        provider: Provider,
        log: RunLog,
        system: str,
        budget: Budget,
        state: State,
        evaluator: Evaluator,
        display: Display | None = None,
    ) -> None:
        self.problem, self.provider, self.log, self.system = problem, provider, log, system
        self.budget, self.state, self.evaluator = budget, state, evaluator
        self.display = display or NullDisplay()
        self.started = time.monotonic()
        self.phase = "starting"

    # --- the loop ---------------------------------------------------------------------------------

    def run(self) -> AgentExit:
        self.log.start_heartbeat()
        try:
            try:
                self.finish_pending_turn()
                while True:
                    self.step()
            except KeyboardInterrupt:
                raise Interrupted("interrupted (Ctrl-C); in-flight compiles and benchmarks killed") from None
        except AgentExit as stop:
            outcome = stop
        except Exception as exc:  # a harness bug: record it as data, then let it surface
            self.record(
                ErrorEvent(turn=self.state.turn, where="loop", message=f"{type(exc).__name__}: {exc}")
            )
            self.finish(ModelError(f"harness error: {type(exc).__name__}: {exc}"))
            raise
        if isinstance(outcome, Interrupted):
            self.evaluator.kill_all_children()
        else:
            outcome = self.final_recheck(outcome)
        self.finish(outcome)
        return outcome

    def step(self) -> None:
        self.check_limits()
        self.state.turn += 1
        started = time.monotonic()
        reply, llm_seconds = self.call_model()
        add_reply(self.state.messages, reply.content, reply.stop_reason)
        if reply.stop_reason == "refusal":
            raise Refused(f"the model refused: {reply.stop_details or 'no reason given'}")
        if reply.stop_reason == "model_context_window_exceeded":
            raise ContextExhausted("the conversation no longer fits the model's context window")
        calls = reply.tool_calls if reply.stop_reason != "max_tokens" else []
        tool_seconds = self.run_tools(calls, [])
        self.end_turn(started, llm_seconds, tool_seconds, reply)
        if reply.stop_reason == "end_turn" and not calls:
            raise Finished("the model ended its turn")
        self.check_target()

    def finish_pending_turn(self) -> None:
        """After a resume: run the tool calls the killed session did not get to."""
        calls = [
            c
            for c in pending_tool_calls(self.state.messages)
            if c.id not in {r["tool_use_id"] for r in self.state.partial_results}
        ]
        if not calls and not self.state.partial_results:
            return
        started = time.monotonic()
        tool_seconds = self.run_tools(calls, self.state.partial_results)
        self.state.partial_results = []
        self.record(
            TurnEndEvent(
                turn=self.state.turn,
                turn_seconds=time.monotonic() - started,
                llm_seconds=0.0,
                tool_seconds=tool_seconds,
            )
        )
        self.check_target()

    # --- limits -----------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.state.earlier_wall_s + time.monotonic() - self.started

    def check_limits(self) -> None:
        b = self.budget
        if b.max_turns is not None and self.state.turn >= b.max_turns:
            raise TurnLimit(f"reached --max-turns {b.max_turns}")
        if b.max_cost_usd is not None and self.state.cost_usd >= b.max_cost_usd:
            raise CostLimit(f"spent ${self.state.cost_usd:.4f} of --max-cost ${b.max_cost_usd:.2f}")
        if b.max_minutes is not None and self.elapsed() >= b.max_minutes * 60:
            raise TimeLimit(f"ran {self.elapsed() / 60:.1f} min of --max-minutes {b.max_minutes:g}")

    def check_target(self) -> None:
        target, best = self.budget.target_speedup, self.state.best
        if target is not None and best is not None and best.speedup >= target:
            raise TargetReached(f"best speedup {best.speedup:.2f}x reached --target-speedup {target:g}")

    # --- model ------------------------------------------------------------------------------------

    def call_model(self) -> tuple[ModelReply, float]:
        self.set_phase("model")
        started = time.monotonic()
        turn = self.state.turn
        try:
            reply = self.provider.complete(self.system, TOOLS, bounded_messages(self.state.messages))
        except ProviderError as exc:
            seconds = time.monotonic() - started
            self.record(self.model_event(turn, seconds, None, error=str(exc)))
            raise ModelError(str(exc)) from None
        seconds = time.monotonic() - started
        self.state.usage += reply.usage
        self.state.cost_usd += reply.cost_usd
        self.state.llm_seconds += seconds
        self.record(self.model_event(turn, seconds, reply))
        return reply, seconds

    def model_event(
        self, turn: int, seconds: float, reply: ModelReply | None, error: str | None = None
    ) -> ModelCallEvent:
        if reply is None:
            return ModelCallEvent(
                turn=turn,
                provider=self.provider.name,
                model=self.provider.model,
                seconds=seconds,
                status="error",
                error=error,
            )
        return ModelCallEvent(
            turn=turn,
            provider=self.provider.name,
            model=self.provider.model,
            seconds=seconds,
            usage=reply.usage,
            cost_usd=reply.cost_usd,
            stop_reason=reply.stop_reason,
            text=reply.text,
            reasoning=reply.reasoning,
            content=reply.content,
        )

    # --- tools ------------------------------------------------------------------------------------

    def run_tools(self, calls: list[ToolCall], results: list[dict[str, Any]]) -> float:
        """Run each call, log it, and add one user message holding every result of the turn."""
        total = 0.0
        for call in calls:
            event = self.run_tool(call)
            total += event.seconds
            results = [*results, tool_result_block(call.id, event.summary, event.is_error)]
        if results:
            self.state.messages.append({"role": "user", "content": results})
        return total

    def run_tool(self, call: ToolCall) -> ToolCallEvent:
        code = call.input.get("kernel_code")
        base = {"turn": self.state.turn, "tool_use_id": call.id, "name": call.name}
        if call.name not in ("compile_kernel", "benchmark") or not isinstance(code, str):
            message = f"invalid call: tools are compile_kernel(kernel_code) and benchmark(kernel_code); got {call.name}({', '.join(call.input)})"
            event = ToolCallEvent(
                **base, arguments=call.input, status="invalid_call", is_error=True, summary=message
            )
            self.record(event)
            return event
        kernel_path = self.log.save_kernel(code)
        arguments = {
            **{k: v for k, v in call.input.items() if k != "kernel_code"},
            "kernel_path": kernel_path,
        }
        started = time.monotonic()
        try:
            return self.evaluate(call, code, base, arguments, kernel_path, started)
        except Exception as exc:  # a harness fault is logged and told to the model, never a crash
            seconds = time.monotonic() - started
            self.state.tool_seconds += seconds
            message = f"harness_error: the evaluator itself failed ({type(exc).__name__}: {exc}); not your kernel's fault"
            self.record(ErrorEvent(turn=self.state.turn, where=f"tool {call.name}", message=message))
            event = ToolCallEvent(
                **base, arguments=arguments, kernel_path=kernel_path, status="harness_error",
                is_error=True, summary=message, seconds=seconds,
            )  # fmt: skip
            self.record(event)
            return event

    def evaluate(
        self, call: ToolCall, code: str, base: dict[str, Any], arguments: dict[str, Any], kernel_path: str,
        started: float,
    ) -> ToolCallEvent:  # fmt: skip
        if call.name == "compile_kernel":
            self.set_phase("compiling")
            compiled = self.evaluator.compile(self.problem, code)
            seconds = time.monotonic() - started
            self.state.tool_seconds += seconds
            event = ToolCallEvent(
                **base,
                arguments=arguments,
                kernel_path=kernel_path,
                status=compiled.status,
                is_error=not compiled.ok,
                result=compiled.model_dump(mode="json"),
                summary=compile_text(compiled),
                seconds=seconds,
            )
        else:
            self.set_phase("benchmarking")
            result = self.evaluator.benchmark(self.problem, code)
            seconds = time.monotonic() - started
            self.state.tool_seconds += seconds
            new_best = self.better_best(result, kernel_path)
            best = best_so_far(new_best) if new_best else self.state.best
            event = ToolCallEvent(
                **base,
                arguments=arguments,
                kernel_path=kernel_path,
                status=result.status,
                is_error=not result.correct,
                result=result.model_dump(mode="json"),
                summary=bench_text(result, best, new_best is not None),
                seconds=seconds,
            )
            self.record(event)  # the call first, then the new best it found
            record_candidate(self.state, event)
            if new_best:
                self.set_best(new_best)
            return event
        self.record(event)
        record_candidate(self.state, event)
        return event

    def better_best(self, result: BenchResult, kernel_path: str) -> BestRecord | None:
        """The record for a new best.py, if this result beats the best beyond the measured spread."""
        timing = result.primary_timing
        if not (result.correct and result.speedup is not None and timing and timing.candidate):
            return None
        stats = timing.candidate
        if not beats(stats.median_ms, stats.rse, self.state.best):
            return None
        return BestRecord(
            turn=self.state.turn,
            kernel_path=kernel_path,
            speedup=result.speedup,
            median_ms=stats.median_ms,
            rse=stats.rse,
            bench=result.model_dump(mode="json"),
        )

    def set_best(self, record: BestRecord) -> None:
        self.state.best = best_so_far(record)
        self.log.write_best(record)
        self.record(
            BestEvent(
                turn=record.turn,
                kernel_path=record.kernel_path,
                speedup=record.speedup,
                median_ms=record.median_ms,
                rse=record.rse,
                final=record.final,
            )
        )

    # --- the end ------------------------------------------------------------------------------------

    def final_recheck(self, outcome: AgentExit) -> AgentExit:
        """Re-benchmark the top candidates with fresh seeds and more repetitions; the winner is final."""
        if self.state.best is None:
            return outcome
        chosen = self.recheck_candidates()
        self.set_phase("rechecking")
        problem = more_repetitions(self.problem)
        winner: tuple[float, BestRecord] | None = None
        try:
            for i, cand in enumerate(chosen):
                code = (self.log.dir / cand.kernel_path).read_text()
                started = time.monotonic()
                result = self.evaluator.benchmark(problem, code, seed=secrets.randbits(31))
                self.record(
                    ToolCallEvent(
                        turn=self.state.turn,
                        tool_use_id=f"final-recheck-{i + 1}",
                        name="final_recheck",
                        arguments={"kernel_path": cand.kernel_path},
                        kernel_path=cand.kernel_path,
                        status=result.status,
                        is_error=not result.correct,
                        result=result.model_dump(mode="json"),
                        summary=bench_text(result, None, False).splitlines()[0],
                        seconds=time.monotonic() - started,
                    )
                )
                timing = result.primary_timing
                if (
                    result.correct
                    and result.speedup is not None
                    and timing
                    and timing.candidate
                    and (winner is None or result.speedup > winner[0])
                ):
                    record = BestRecord(
                        turn=cand.turn,
                        kernel_path=cand.kernel_path,
                        speedup=result.speedup,
                        median_ms=timing.candidate.median_ms,
                        rse=timing.candidate.rse,
                        final=True,
                        bench=result.model_dump(mode="json"),
                    )
                    winner = (result.speedup, record)
        except KeyboardInterrupt:
            self.evaluator.kill_all_children()
            return Interrupted(
                f"interrupted during the final re-check (the run had ended: {outcome.status}: {outcome})"
            )
        if winner is None:
            self.record(
                ErrorEvent(
                    turn=self.state.turn,
                    where="final_recheck",
                    message="no candidate stayed correct under fresh seeds; best.py removed",
                )
            )
            self.state.best = None
            self.log.remove_best()
        else:
            self.set_best(winner[1])
        return outcome

    def recheck_candidates(self) -> list[Candidate]:
        best = self.state.best
        assert best is not None
        seen: set[str] = set()
        ranked = []
        for cand in sorted(self.state.candidates, key=lambda c: -c.speedup):
            if cand.kernel_path not in seen and cand.speedup >= RECHECK_WITHIN * best.speedup:
                seen.add(cand.kernel_path)
                ranked.append(cand)
        return ranked[:RECHECK_TOP]

    def finish(self, outcome: AgentExit) -> None:
        self.record(RunEndEvent(exit_status=outcome.status, message=str(outcome)))
        best = self.state.best
        self.log.write_summary(
            RunSummary(
                exit_status=outcome.status,
                message=str(outcome),
                turns=self.state.turn,
                usage=self.state.usage,
                cost_usd=self.state.cost_usd,
                wall_seconds=self.elapsed(),
                llm_seconds=self.state.llm_seconds,
                tool_seconds=self.state.tool_seconds,
                best_speedup=best.speedup if best else None,
                best_kernel="best.py" if best else None,
                scripted=self.provider.scripted,
            )
        )
        self.log.close()

    # --- logging and display -----------------------------------------------------------------------

    def end_turn(self, started: float, llm_seconds: float, tool_seconds: float, reply: ModelReply) -> None:
        self.record(
            TurnEndEvent(
                turn=self.state.turn,
                turn_seconds=time.monotonic() - started,
                llm_seconds=llm_seconds,
                tool_seconds=tool_seconds,
                usage=reply.usage,
                cost_usd=reply.cost_usd,
            )
        )

    def record(self, event: Event) -> None:
        self.log.append(event)
        self.display.event(event)

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.log.set_phase(phase)
        self.display.progress(self.progress())

    def progress(self) -> Progress:
        best = self.state.best
        return Progress(
            turn=self.state.turn,
            phase=self.phase,
            usage=self.state.usage,
            cost_usd=self.state.cost_usd,
            best_speedup=best.speedup if best else None,
            elapsed_s=self.elapsed(),
            scripted=self.provider.scripted,
        )


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
