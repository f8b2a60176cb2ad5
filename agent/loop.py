"""The agent loop: `run()` loops `step()`; one step = one model call and the tools it asks for.

Control flow by exceptions: every way a run ends is an `AgentExit` (agent.exits) carrying its message.
Every event is appended to the log as it happens, and the summary is written however the run ends
(Ctrl-C included). An `Agent` is one trajectory: the whole of a single run, or one of the threads of a
parallel run (agent.parallel), which calls `loop()` and shares the best, the budget and the stop.
"""

from __future__ import annotations

import time

from agent import toolbox
from agent.best import beats, settle, timed_kernel, write_best
from agent.budget import floor_reached, over_budget, target_reached
from agent.conversation import State, add_reply, bounded_messages, pending_tool_calls, tool_result_block
from agent.execution.executor import KernelJob
from agent.execution.interrupts import raised_by_ctrl_c
from agent.exits import AgentExit, ContextExhausted, Finished, Interrupted, ModelError, Refused, TurnLimit
from agent.providers.base import ModelReply, ProviderError, ToolCall
from agent.run_setup import RunSetup
from agent.runlog.events import ErrorEvent, Event, ModelCallEvent, ToolCallEvent, TurnEndEvent
from agent.shared import RunHandle, Shared, end_run
from agent.views.fmt import fmt_headline
from agent.views.live import BuildStep, Progress
from tools.wire import Building


class Agent(RunHandle):
    """One trajectory: its conversation and totals (`state`), the run's `setup`, and what it shares with
    the other trajectories of the run (`shared`: the best, the clock, the spend, the stop)."""

    def __init__(
        self, setup: RunSetup, state: State, shared: Shared | None = None, trajectory: int | None = None
    ) -> None:
        self.setup, self.state, self.trajectory = setup, state, trajectory
        self.shared = shared or Shared()
        self.shared.join(state)
        self.phase = "starting"
        self.phase_since: float | None = None
        self.build: BuildStep | None = None  # a fresh build's progress, while the phase's tool builds

    # --- the loop ---------------------------------------------------------------------------------

    def run(self) -> AgentExit:
        """A single run, whole: the loop, the final re-check, the summary."""
        self.log.start_heartbeat()
        try:
            outcome = self.loop()
        except Exception as exc:  # a harness bug: the log is ended, then it surfaces
            self.end(ModelError(f"harness error: {type(exc).__name__}: {exc}"))
            raise
        outcome = self.finish(outcome)
        self.end(outcome)
        return outcome

    def finish(self, outcome: AgentExit) -> AgentExit:
        """What runs between the loop and the summary: the final re-check (the red team re-judges first)."""
        return settle(outcome, self.standings, self.setup, self, self.state.turn)

    def loop(self) -> AgentExit:
        """Steps until an exit, which it returns. A harness bug is recorded as data, then raised."""
        try:
            self.finish_pending_turn()
            while True:
                self.step()
        except AgentExit as stop:
            return stop
        except (KeyboardInterrupt, Exception) as exc:
            if raised_by_ctrl_c(exc):
                return Interrupted(Interrupted.CTRL_C)
            self.record(
                ErrorEvent(turn=self.state.turn, where="loop", message=f"{type(exc).__name__}: {exc}")
            )
            raise

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
        done = {r["tool_use_id"] for r in self.state.partial_results}
        calls = [c for c in pending_tool_calls(self.state.messages) if c.id not in done]
        if not calls and not self.state.partial_results:
            return
        started = time.monotonic()
        tool_seconds = self.run_tools(calls, self.state.partial_results)
        self.state.partial_results = []
        self.end_turn(started, 0.0, tool_seconds, None)
        self.check_target()

    # --- limits: the run's, shared by its trajectories ------------------------------------------------

    def elapsed(self) -> float:
        return self.state.earlier_wall_s + time.monotonic() - self.shared.started

    def check_limits(self) -> None:
        if (stop := self.shared.stop) is not None:
            raise type(stop)(str(stop))
        spent = over_budget(self.setup.budget, self.state.turn, self.shared.cost_usd, self.elapsed())
        if spent is not None:
            if not isinstance(spent, TurnLimit):  # turns are counted per trajectory, cost and time per run
                self.shared.stop_all(spent)
            raise spent

    def check_target(self) -> None:
        best = self.standings.best
        reached: AgentExit | None = target_reached(self.setup.budget, best.speedup if best else None)
        if (reached := reached or floor_reached(self.setup.budget, best)) is not None:
            self.shared.stop_all(reached)
            raise reached

    # --- model ------------------------------------------------------------------------------------

    def call_model(self) -> tuple[ModelReply, float]:
        self.set_phase("model")
        provider, turn = self.setup.provider, self.state.turn
        started = time.monotonic()
        try:
            reply = provider.complete(
                self.setup.system, toolbox.schemas(), bounded_messages(self.state.messages)
            )
        except ProviderError as exc:
            seconds = time.monotonic() - started
            self.record(
                ModelCallEvent(
                    turn=turn, provider=provider.name, model=provider.model, seconds=seconds, status="error",
                    error=str(exc),
                )
            )  # fmt: skip
            raise ModelError(str(exc)) from None
        seconds = time.monotonic() - started
        self.state.usage += reply.usage
        self.state.cost_usd += reply.cost_usd
        self.state.llm_seconds += seconds
        self.record(
            ModelCallEvent(
                turn=turn, provider=provider.name, model=provider.model, seconds=seconds, usage=reply.usage,
                cost_usd=reply.cost_usd, stop_reason=reply.stop_reason, text=reply.text,
                reasoning=reply.reasoning, content=reply.content,
            )
        )  # fmt: skip
        return reply, seconds

    # --- tools ------------------------------------------------------------------------------------

    def run_tools(self, calls: list[ToolCall], results: list[dict[str, object]]) -> float:
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
        tool, code, turn = toolbox.find(call.name), call.input.get("kernel_code"), self.state.turn
        if tool is None or not tool.offered or not isinstance(code, str):
            text = toolbox.invalid_call_text(call.name, call.input)
            return self.record_call(
                ToolCallEvent(
                    turn=turn, tool_use_id=call.id, name=call.name, arguments=call.input,
                    status="invalid_call", is_error=True, summary=text,
                )
            )  # fmt: skip
        kernel_path = self.log.save_kernel(code)
        arguments = {k: v for k, v in call.input.items() if k != "kernel_code"} | {"kernel_path": kernel_path}
        self.set_phase(tool.phase)
        started = time.monotonic()
        try:
            job = KernelJob(self.setup.problem, code, kernel_path, self.trajectory, self.on_build)
            result = tool.run(self.setup.executor, job)
        except Exception as exc:  # a harness fault is logged and told to the model, never a crash
            self.state.tool_seconds += (seconds := time.monotonic() - started)
            text = f"harness_error: the evaluator itself failed ({type(exc).__name__}: {exc}); not your kernel's fault"
            self.record(ErrorEvent(turn=turn, where=f"tool {call.name}", message=text))
            return self.record_call(
                ToolCallEvent(
                    turn=turn, tool_use_id=call.id, name=call.name, arguments=arguments, kernel_path=kernel_path,
                    status="harness_error", is_error=True, summary=text, seconds=seconds,
                )
            )  # fmt: skip
        timed = timed_kernel(result, turn, kernel_path) if tool.times_kernels else None
        if timed and self.setup.sanitizer and beats(timed.median_ms, timed.rse, self.standings.best):
            self.set_phase(
                "sanitizing"
            )  # before it can count: a finding makes it incorrect (agent.sanitizing)
            result = self.setup.sanitizer.vet(self.setup.executor, job, result)
            timed = timed_kernel(result, turn, kernel_path)
        self.state.tool_seconds += (seconds := time.monotonic() - started)
        claimed = self.standings.claim(timed, result) if timed else None
        text = tool.text(result, timed if claimed else self.standings.best, claimed is not None)
        event = self.record_call(
            toolbox.logged_call(
                tool, result, turn=turn, tool_use_id=call.id, kernel_path=kernel_path, arguments=arguments,
                text=text, seconds=seconds,
            )
        )  # fmt: skip
        if timed:  # the call first, then the new best it found
            self.standings.add(timed)
        if claimed:
            self.standings.publish(claimed, write_best(self.log, self.record))
        return event

    # --- logging, display, the end -----------------------------------------------------------------

    def end_turn(
        self, started: float, llm_seconds: float, tool_seconds: float, reply: ModelReply | None
    ) -> None:
        self.record(
            TurnEndEvent(
                turn=self.state.turn, turn_seconds=time.monotonic() - started, llm_seconds=llm_seconds,
                tool_seconds=tool_seconds, **({"usage": reply.usage, "cost_usd": reply.cost_usd} if reply else {}),
            )
        )  # fmt: skip

    def record(self, event: Event) -> None:
        if self.trajectory is not None:
            event.trajectory = self.trajectory
        self.log.append(event)
        self.setup.display.event(event)

    def record_call(self, event: ToolCallEvent) -> ToolCallEvent:
        self.record(event)
        return event

    def set_phase(self, phase: str) -> None:
        self.phase = phase if self.trajectory is None else f"t{self.trajectory} {phase}"
        self.phase_since, self.build = time.monotonic(), None
        self.log.set_phase(self.phase)
        self.setup.display.progress(self.progress())

    def on_build(self, msg: Building) -> None:
        """A compile's worker says what its build compiles now (from the worker's reader thread)."""
        now, last = time.monotonic(), self.build
        since = last.compiling if last is not None and last.extension == msg.extension else {}
        self.build = BuildStep(
            extension=msg.extension,
            compiling={name: since.get(name, now) for name in msg.compiling},
            finished=msg.finished,
        )
        doing = ", ".join(msg.compiling) or ("finishing" if msg.finished else "starting")
        self.log.set_phase(f"{self.phase} · {msg.extension}: {doing}")  # what `ls` and `show --follow` see
        self.setup.display.progress(self.progress())

    def progress(self) -> Progress:
        best = self.standings.best
        return Progress(
            turn=self.state.turn, phase=self.phase, usage=self.state.usage, cost_usd=self.state.cost_usd,
            best_speedup=best.speedup if best else None, best_headline=fmt_headline(best, best.speedup) if best else None,
            elapsed_s=self.elapsed(),
            scripted=self.setup.provider.scripted, phase_since=self.phase_since, build=self.build,
        )  # fmt: skip

    def end(self, outcome: AgentExit) -> None:
        end_run(self.setup, outcome, self.state, self.standings, self.elapsed())
