"""`agent run --parallel N`: N trajectories at once, one shared best.

The first N trajectories are independent samples (best-of-N). When one ends and a best exists, its slot
starts a **branch**: a fresh conversation that opens on the best kernel and a summary of what every
trajectory has tried (up to `--branches` of them). Each trajectory is the ordinary agent loop
(`agent.loop.Agent` with a trajectory number); they share the run log (each event carries its
`trajectory`), the kernels folder, the best (agent.best.Standings) and the run's cost and time budget
(agent.shared.Shared). `--max-turns` is per trajectory.

Compiles and evaluations go through the run's `Executor` (agent.execution.executor: leases on this machine, or
Ray). At the end the top candidates of all trajectories are re-checked once, as in a single run.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import time
from collections import Counter
from dataclasses import replace

from agent.best import settle
from agent.conversation import State, summed
from agent.execution.interrupts import ctrl_c_as_flag, wait_or_stop
from agent.exits import AgentExit, Finished, Interrupted, ModelError
from agent.loop import Agent
from agent.prompt import first_user_message
from agent.providers.base import Provider
from agent.run_setup import RunSetup
from agent.runlog.events import Event, TimedKernel, ToolCallEvent, TrajectoryEvent
from agent.runlog.reader import read_events
from agent.runlog.writer import RunLog
from agent.shared import RunHandle, Shared, end_run
from agent.views.fmt import fmt_headline
from agent.views.live import Progress

HISTORY_LINES = 24  # the last this many benchmarks go into a branch's opening message


def branch_brief(log: RunLog, best: TimedKernel) -> str:
    """A branch's opening: the best kernel and what the run has tried so far, from the log."""
    tried = [
        f"- trajectory {e.trajectory} turn {e.turn}, {e.kernel_path}: {e.summary.splitlines()[0] if e.summary else e.status}"
        for e in read_events(log.dir)
        if isinstance(e, ToolCallEvent) and e.name == "benchmark"
    ][-HISTORY_LINES:]
    code = (log.dir / best.kernel_path).read_text()
    return (
        "This conversation is a branch of a parallel search. Other trajectories have already tried these "
        "kernels (most recent last):\n"
        + "\n".join(tried)
        + f"\n\nThe fastest correct kernel so far is {best.kernel_path} ({best.speedup:.2f}×, "
        f"{best.median_ms:.4g} ms ± {best.rse:.1%}). Start from it and make it faster; a new kernel "
        f"becomes the best only if it beats this one beyond the measured spread.\n\n```python\n{code}\n```"
    )


def branch_provider(provider: Provider, best_code: str) -> Provider:
    """A provider for a branch: a scripted playback continues after the best kernel's step."""
    branch_from = getattr(provider, "branch_from", None)
    return branch_from(best_code) if callable(branch_from) else provider


def overall_outcome(outcomes: list[AgentExit]) -> AgentExit:
    statuses = Counter(o.status for o in outcomes)
    if len(statuses) == 1:
        first = outcomes[0]
        return type(first)(f"{len(outcomes)} trajectories ended: {first}")
    parts = ", ".join(f"{n} {status}" for status, n in statuses.most_common())
    return Finished(f"{len(outcomes)} trajectories ended: {parts}")


class ParallelRun(RunHandle):
    """Runs the trajectories and ends the run: re-check, summary, log closed."""

    def __init__(self, setup: RunSetup, parallel: int, branches: int) -> None:
        self.setup, self.parallel, self.branches_left = setup, parallel, branches
        self.shared = Shared()
        self.ids = itertools.count(1)
        self.state = State(messages=[])  # the run's totals once it ends (what the CLI's summary shows)

    def progress(self) -> Progress:
        best, states = self.standings.best, list(self.shared.states)
        return Progress(
            turn=sum(s.turn for s in states), phase=f"{len(states)} trajectories",
            usage=summed(states).usage, cost_usd=self.shared.cost_usd,
            best_speedup=best.speedup if best else None, best_headline=fmt_headline(best, best.speedup) if best else None,
            elapsed_s=time.monotonic() - self.shared.started,
            scripted=self.setup.provider.scripted,
        )  # fmt: skip

    # --- trajectories -------------------------------------------------------------------------

    def run(self) -> AgentExit:
        self.log.start_heartbeat()
        self.log.set_phase("model")
        outcomes: list[AgentExit] = []
        with (
            ctrl_c_as_flag() as ctrl_c,
            cf.ThreadPoolExecutor(self.parallel, thread_name_prefix="trajectory") as pool,
        ):
            futures = [pool.submit(self.slot) for _ in range(self.parallel)]
            wait_or_stop(futures, ctrl_c, self.interrupt, self.setup.executor.kill_all)
            for f in futures:
                outcomes += f.result()
        return self.finish(self.shared.stop or overall_outcome(outcomes))

    def interrupt(self) -> None:
        self.shared.stop_all(Interrupted(Interrupted.CTRL_C))

    def slot(self) -> list[AgentExit]:
        """One of the N places a trajectory runs: a sample, then branches while any are left."""
        outcomes = [self.run_trajectory(None)]
        while self.shared.stop is None and (best := self.take_branch()) is not None:
            outcomes.append(self.run_trajectory(best))
        return outcomes

    def take_branch(self) -> TimedKernel | None:
        with self.standings.lock:
            if self.branches_left <= 0 or self.standings.best is None:
                return None
            self.branches_left -= 1
            return self.standings.best

    def run_trajectory(self, branch_of: TimedKernel | None) -> AgentExit:
        number = next(self.ids)
        opening, setup = first_user_message(self.setup.problem), self.setup
        if branch_of is not None:
            opening += "\n\n" + branch_brief(self.log, branch_of)
            code = (self.log.dir / branch_of.kernel_path).read_text()
            setup = replace(setup, provider=branch_provider(setup.provider, code))
        agent = Agent(setup, State(messages=[{"role": "user", "content": opening}]), self.shared, number)
        kind = "sample" if branch_of is None else "branch"
        from_kernel = branch_of.kernel_path if branch_of else None
        agent.record(TrajectoryEvent(action="started", kind=kind, from_kernel=from_kernel))
        try:
            outcome = agent.loop()
        except Exception as exc:  # a harness bug ends this trajectory (loop() has logged it)
            outcome = ModelError(f"harness error: {type(exc).__name__}: {exc}")
        agent.record(
            TrajectoryEvent(
                action="ended",
                kind=kind,
                from_kernel=from_kernel,
                exit_status=outcome.status,
                message=str(outcome),
            )
        )
        return outcome

    # --- the end --------------------------------------------------------------------------------

    def record(self, event: Event) -> None:
        """A run-level event (the final re-check's)."""
        self.log.append(event)
        self.setup.display.event(event)

    def set_phase(self, phase: str) -> None:
        self.log.set_phase(phase)
        self.setup.display.progress(self.progress())

    def finish(self, outcome: AgentExit) -> AgentExit:
        """One re-check of the best candidates of every trajectory, then the summary of all of them."""
        states = list(self.shared.states)
        last_turn = max((s.turn for s in states), default=0)  # the re-check's events: after every turn
        outcome = settle(outcome, self.standings, self.setup, self, last_turn)
        self.setup.executor.close()
        self.state = summed(states)  # the summary counts every trajectory's turns
        end_run(self.setup, outcome, self.state, self.standings, time.monotonic() - self.shared.started)
        return outcome
