"""What the trajectories of one run share: `Shared` (the best, the clock, the spend, the stop), what the
CLI reads of a run (`RunHandle`) and the run's end (`end_run`). What stays fixed for the run is
`agent.run_setup.RunSetup`. A single run is a run of one trajectory."""

from __future__ import annotations

import threading
import time

from agent.best import Standings
from agent.conversation import State
from agent.exits import AgentExit, FloorReached
from agent.run_setup import RunSetup
from agent.runlog.events import RunSummary, TimedKernel
from agent.runlog.writer import RunLog
from agent.views.live import Display
from tools.results import BaselineReport, BenchResult


class Shared:
    """What the trajectories of one run share (a single run: its one trajectory): the best, the clock,
    the spend, and the stop that ends them all."""

    def __init__(self, standings: Standings | None = None, started: float | None = None) -> None:
        self.standings = standings or Standings()
        self.started = time.monotonic() if started is None else started
        self.states: list[State] = []
        self.stop: AgentExit | None = None
        self._lock = threading.Lock()

    def join(self, state: State) -> None:
        with self._lock:
            self.states.append(state)

    def stop_all(self, reason: AgentExit) -> None:
        with self._lock:
            if self.stop is None:
                self.stop = reason

    @property
    def cost_usd(self) -> float:
        with self._lock:
            return sum(s.cost_usd for s in self.states)


class RunHandle:
    """What the CLI reads of a run it follows (agent.loop.Agent, agent.parallel.ParallelRun)."""

    setup: RunSetup
    shared: Shared
    state: State  # a single run's totals; a parallel run's once it has ended

    @property
    def log(self) -> RunLog:
        return self.setup.log

    @property
    def standings(self) -> Standings:
        return self.shared.standings

    @property
    def display(self) -> Display:
        return self.setup.display


def end_run(setup: RunSetup, outcome: AgentExit, totals: State, standings: Standings, wall_s: float) -> None:
    """The run's summary (and its log closed): the same record for a single run and a parallel one."""
    best = standings.best
    report = final_baselines(setup, standings) if setup.baselines and best is not None else None
    setup.log.end(
        RunSummary(
            exit_status=outcome.status, message=end_message(outcome, best, setup), turns=totals.turn, usage=totals.usage,
            cost_usd=totals.cost_usd, wall_seconds=wall_s, llm_seconds=totals.llm_seconds,
            tool_seconds=totals.tool_seconds, recheck_seconds=standings.recheck_seconds,
            best_speedup=best.speedup if best else None, best_floor_fraction=best.floor_fraction if best else None,
            best_eager_speedup=best.eager_speedup if best else None,
            best_headline_metric=best.headline_metric if best else None,
            best_kernel="best.py" if best else None, scripted=setup.provider.scripted, baselines=report,
        )
    )  # fmt: skip


def final_baselines(setup: RunSetup, standings: Standings) -> BaselineReport | None:
    """The re-checked best against each baseline (--baselines), from the benchmark that crowned it."""
    record = standings.best_record
    bench = record.bench if record is not None else None
    if not bench:
        return None
    timed = setup.executor.baselines(setup.problem, BenchResult.model_validate(bench))
    return timed.baselines


def end_message(outcome: AgentExit, best: TimedKernel | None, setup: RunSetup) -> str:
    """Why the run ended; a stop at the floor also says where the final re-check measured the best."""
    fraction, stop = best.floor_fraction if best else None, setup.budget.stop_at_floor
    if not isinstance(outcome, FloorReached) or fraction is None or stop is None:
        return str(outcome)
    verdict = "still" if fraction >= stop else "no longer"
    return f"{outcome}; the final re-check measured it at {fraction:.1%}: {verdict} at --stop-at-floor"
