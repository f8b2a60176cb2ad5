"""`RedTeamAgent`: `agent run`'s loop (the same tools, budgets and providers), which also records the attack
each candidate names (`AttackEvent`, after its tool call) and, once the loop is done, re-judges every
benchmarked candidate (`RejudgeEvent`s) before the final re-check, which then measures only the escapes: a
red-team run's best is an attack both judgements accepted, or none."""

from __future__ import annotations

from agent.best import write_best
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

    def finish(self, outcome: AgentExit) -> AgentExit:
        """The re-judge, then the final re-check of the escapes only (an interrupted run skips both; one
        interrupted while re-judging ends Interrupted, its summary written all the same). A caught attack
        is never crowned: where none escaped, the run has no best and best.py is removed."""
        if isinstance(outcome, Interrupted):
            return super().finish(outcome)
        outcome = self.rejudge(outcome)
        if isinstance(outcome, Interrupted):
            return outcome
        self.standings.drop({e.kernel_path for e in self.rejudged if e.outcome != "escaped"})
        if self.standings.best is None and self.standings.best_record is not None:
            self.log.remove_best()
            self.standings.crown(None, write_best(self.log, self.record))
        return super().finish(outcome)

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
