"""`agent run --parallel N`: N trajectories at once, one shared best.

The first N trajectories are independent samples (best-of-N). When one ends and a best exists, its slot
starts a **branch**: a fresh conversation that opens on the best kernel and a summary of what every
trajectory has tried (up to `--branches` of them). Each trajectory is the ordinary agent loop
(`TrajectoryAgent`, a thin subclass of `agent.loop.Agent`); they share the run log (each event carries
its `trajectory`), the kernels folder, the best (replaced only when faster beyond the measured spread,
checked and claimed under one lock) and the run's cost and time budget. `--max-turns` is per trajectory.

Compiles and evaluations go through an `Executor` (agent.executor: leases on this machine, or Ray). At
the end the top candidates of all trajectories are re-checked once, as in a single run.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import threading
import time
from collections import Counter
from typing import Any

from agent.events import BestRecord, ErrorEvent, Event, LeaseEvent, ToolCallEvent, TrajectoryEvent
from agent.executor import Executor, loop_evaluator
from agent.feedback import BestSoFar
from agent.loop import (
    Agent,
    AgentExit,
    CostLimit,
    Display,
    Finished,
    Interrupted,
    ModelError,
    Progress,
    State,
    TargetReached,
    TimeLimit,
    TurnLimit,
    best_so_far,
)
from agent.prompt import Budget, first_user_message
from agent.providers.base import Provider
from agent.runlog import RunLog, read_events
from tools.problem import Problem
from tools.results import BenchResult

HISTORY_LINES = 24  # the last this many benchmarks go into a branch's opening message


class Shared:
    """What the trajectories of one run share; every read-modify-write under `lock`."""

    def __init__(self, started: float) -> None:
        self.lock = threading.RLock()
        self.started = started
        self.best: BestSoFar | None = None
        self.claimed: BestRecord | None = None  # the record the current best came from
        self.stop: AgentExit | None = None
        self.agents: list[TrajectoryAgent] = []

    def stop_all(self, reason: AgentExit) -> None:
        with self.lock:
            if self.stop is None:
                self.stop = reason

    @property
    def cost_usd(self) -> float:
        with self.lock:
            return sum(a.state.cost_usd for a in self.agents)


class TrajectoryAgent(Agent):
    """One trajectory: the agent loop, tagging its events and sharing the best and the budget."""

    def __init__(self, *args: Any, trajectory: int, shared: Shared, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trajectory = trajectory
        self.shared = shared
        self.started = shared.started  # --max-minutes counts from the run's start

    def run(self) -> AgentExit:  # the loop of Agent.run, without the run-level start and end
        try:
            while True:
                self.step()
        except AgentExit as stop:
            return stop
        except Exception as exc:  # a harness bug ends this trajectory, recorded as data
            message = f"harness error: {type(exc).__name__}: {exc}"
            self.record(ErrorEvent(turn=self.state.turn, where="loop", message=message))
            return ModelError(message)

    def check_limits(self) -> None:
        if (stop := self.shared.stop) is not None:
            raise type(stop)(str(stop))
        b = self.budget
        if b.max_turns is not None and self.state.turn >= b.max_turns:
            raise TurnLimit(f"reached --max-turns {b.max_turns}")
        cost = self.shared.cost_usd
        if b.max_cost_usd is not None and cost >= b.max_cost_usd:
            self.stop_run(CostLimit(f"spent ${cost:.4f} of --max-cost ${b.max_cost_usd:.2f}"))
        if b.max_minutes is not None and self.elapsed() >= b.max_minutes * 60:
            self.stop_run(TimeLimit(f"ran {self.elapsed() / 60:.1f} min of --max-minutes {b.max_minutes:g}"))

    def check_target(self) -> None:
        try:
            super().check_target()
        except TargetReached as reached:
            self.stop_run(reached)

    def stop_run(self, reason: AgentExit) -> None:
        self.shared.stop_all(reason)
        raise reason

    def better_best(self, result: BenchResult, kernel_path: str) -> BestRecord | None:
        """Compare with the shared best and claim it, in one step (another trajectory may be doing the same)."""
        with self.shared.lock:
            self.state.best = self.shared.best
            record = super().better_best(result, kernel_path)
            if record is not None:
                self.shared.best, self.shared.claimed = best_so_far(record), record
            return record

    def set_best(self, record: BestRecord) -> None:
        with self.shared.lock:  # best.py is written in the order bests were claimed, never a stale one
            if self.shared.claimed is record:
                super().set_best(record)
            self.state.best = self.shared.best

    def record(self, event: Event) -> None:
        event.trajectory = self.trajectory
        super().record(event)

    def set_phase(self, phase: str) -> None:
        super().set_phase(f"t{self.trajectory} {phase}")


def branch_brief(log: RunLog, best: BestRecord) -> str:
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
        + f"\n\nThe fastest correct kernel so far is {best.kernel_path} ({best.speedup:.2f}x, "
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


class ParallelRun:
    """Runs the trajectories and ends the run: re-check, summary, log closed."""

    def __init__(
        self,
        problem: Problem,
        provider: Provider,
        log: RunLog,
        system: str,
        budget: Budget,
        executor: Executor,
        display: Display,
        parallel: int,
        branches: int,
    ) -> None:
        self.problem, self.provider, self.log, self.system = problem, provider, log, system
        self.budget, self.executor, self.display = budget, executor, display
        self.parallel, self.branches_left = parallel, branches
        self.shared = Shared(time.monotonic())
        self.ids = itertools.count(1)
        self.state = State(messages=[])  # the run's totals once it ends (what the CLI's summary shows)
        self.executor.on_event = self.record_lease

    def record_lease(self, event: LeaseEvent) -> None:
        self.log.append(event)

    def progress(self) -> Progress:
        s = self.shared
        return Progress(
            turn=sum(a.state.turn for a in s.agents),
            phase=f"{len(s.agents)} trajectories",
            usage=sum((a.state.usage for a in s.agents), self.state.usage),
            cost_usd=s.cost_usd,
            best_speedup=s.best.speedup if s.best else None,
            elapsed_s=time.monotonic() - s.started,
            scripted=self.provider.scripted,
        )

    # --- trajectories -------------------------------------------------------------------------

    def run(self) -> AgentExit:
        self.log.start_heartbeat()
        self.log.set_phase("model")
        outcomes: list[AgentExit] = []
        with cf.ThreadPoolExecutor(self.parallel, thread_name_prefix="trajectory") as pool:
            futures = [pool.submit(self.slot) for _ in range(self.parallel)]
            try:
                while not all(f.done() for f in futures):
                    cf.wait(futures, timeout=0.5)
            except KeyboardInterrupt:
                self.shared.stop_all(
                    Interrupted("interrupted (Ctrl-C); in-flight compiles and benchmarks killed")
                )
                while not all(f.done() for f in futures):  # kill, and keep killing what a thread starts
                    self.executor.kill_all()
                    cf.wait(futures, timeout=1.0)
            for f in futures:
                outcomes += f.result()
        return self.finish(self.shared.stop or overall_outcome(outcomes))

    def slot(self) -> list[AgentExit]:
        """One of the N places a trajectory runs: a sample, then branches while any are left."""
        outcomes = [self.run_trajectory(None)]
        while self.shared.stop is None and (best := self.take_branch()) is not None:
            outcomes.append(self.run_trajectory(best))
        return outcomes

    def take_branch(self) -> BestRecord | None:
        with self.shared.lock:
            if self.branches_left <= 0 or self.shared.claimed is None:
                return None
            self.branches_left -= 1
            return self.shared.claimed

    def run_trajectory(self, branch_of: BestRecord | None) -> AgentExit:
        number = next(self.ids)
        opening = first_user_message(self.problem)
        provider = self.provider
        if branch_of is not None:
            opening += "\n\n" + branch_brief(self.log, branch_of)
            provider = branch_provider(provider, (self.log.dir / branch_of.kernel_path).read_text())
        agent = TrajectoryAgent(
            self.problem, provider, self.log, self.system, self.budget,
            State(messages=[{"role": "user", "content": opening}]),
            loop_evaluator(self.executor, number), self.display, trajectory=number, shared=self.shared,
        )  # fmt: skip
        kind = "sample" if branch_of is None else "branch"
        from_kernel = branch_of.kernel_path if branch_of else None
        with self.shared.lock:
            self.shared.agents.append(agent)
            agent.state.best = self.shared.best
        agent.record(TrajectoryEvent(action="started", kind=kind, from_kernel=from_kernel))
        outcome = agent.run()
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

    def finish(self, outcome: AgentExit) -> AgentExit:
        """Totals of every trajectory, one re-check of the best candidates of all of them, the summary."""
        agents = self.shared.agents
        self.state = State(
            messages=[],
            turn=max((a.state.turn for a in agents), default=0),  # the re-check's events: after every turn
            usage=sum((a.state.usage for a in agents), self.state.usage),
            cost_usd=sum(a.state.cost_usd for a in agents),
            llm_seconds=sum(a.state.llm_seconds for a in agents),
            tool_seconds=sum(a.state.tool_seconds for a in agents),
            best=self.shared.best,
            candidates=[c for a in agents for c in a.state.candidates],
        )
        final = Agent(
            self.problem, self.provider, self.log, self.system, self.budget, self.state,
            loop_evaluator(self.executor, None), self.display,
        )  # fmt: skip
        final.started = self.shared.started
        if isinstance(outcome, Interrupted):
            self.executor.kill_all()
        else:
            outcome = final.final_recheck(outcome)
        self.executor.close()
        self.state.turn = sum(a.state.turn for a in agents)  # the summary counts every trajectory's turns
        final.finish(outcome)
        return outcome
