"""`RedTeamAgent`: `agent run`'s loop (the same tools, budgets and providers), which also records the attack
each candidate names (`AttackEvent`, after its tool call) and, once the loop and the final re-check are
done and before the run's summary, re-judges every benchmarked candidate (`RejudgeEvent`s)."""

from __future__ import annotations

from agent.conversation import State
from agent.execution.executor import KernelJob
from agent.execution.interrupts import raised_by_ctrl_c
from agent.exits import AgentExit, Interrupted
from agent.loop import Agent
from agent.providers.base import ToolCall
from agent.redteam.attacks import attack_of
from agent.redteam.rejudge import Rejudge, benchmarked
from agent.run_setup import RunSetup
from agent.runlog.events import AttackEvent, ErrorEvent, RejudgeEvent, ToolCallEvent
from agent.runlog.reader import read_events
from tools.results import SanitizerReport


class RedTeamAgent(Agent):
    def __init__(self, setup: RunSetup, state: State) -> None:
        super().__init__(setup, state)
        self.rejudged: list[RejudgeEvent] = []  # the summary's rows, as recorded

    def run_tool(self, call: ToolCall) -> ToolCallEvent:
        event = super().run_tool(call)
        code = call.input.get("kernel_code")
        if event.kernel_path and isinstance(code, str):
            attack = attack_of(code)
            self.record(
                AttackEvent(
                    turn=event.turn,
                    kernel_path=event.kernel_path,
                    name=attack.name,
                    description=attack.description,
                )
            )
        return event

    def after_recheck(self, outcome: AgentExit) -> AgentExit:
        """The re-judge, between the final re-check and the summary (an interrupted run skips it; one
        interrupted while re-judging ends Interrupted, its summary written all the same)."""
        return outcome if isinstance(outcome, Interrupted) else self.rejudge(outcome)

    def rejudge(self, outcome: AgentExit) -> AgentExit:
        """Each benchmarked candidate judged again, its event recorded as it is made. A harness fault in the
        re-judge is an error event (the run still ends as it did); Ctrl-C makes the outcome Interrupted."""
        self.set_phase("re-judging")
        judge = Rejudge(self.setup.problem, self.setup.executor, self.log.dir, self.sanitize)
        try:
            for call in benchmarked(read_events(self.log.dir)):
                event = judge.one(call)
                self.record(event)
                self.rejudged.append(event)
        except (KeyboardInterrupt, Exception) as exc:
            if raised_by_ctrl_c(exc):
                self.setup.executor.kill_all()
                return Interrupted(
                    f"interrupted during the re-judge (the run had ended: {outcome.status}: {outcome})"
                )
            self.record(ErrorEvent(where="redteam re-judge", message=f"{type(exc).__name__}: {exc}"))
        return outcome

    def sanitize(self, job: KernelJob) -> SanitizerReport | None:
        """The sanitizer's report where it runs here (the run's own, or a fresh probe), else None."""
        from tools.judge import sanitizer_availability

        if sanitizer_availability(job.problem, None):
            return None
        return self.setup.executor.sanitize(job)
