"""What stays fixed through one run (`RunSetup`): the problem, the provider, the log, the prompt, the
budget, the executor and the display. It sits below both `agent.best`, whose final re-check reads it,
and `agent.shared`, which holds the run's `agent.best.Standings`: shared imports best, never the reverse."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.budget import Budget
from agent.execution.executor import Executor
from agent.providers.base import Provider
from agent.runlog.writer import RunLog
from agent.sanitizing import RunSanitizer
from agent.views.live import Display, NullDisplay
from tools.problem import Problem


@dataclass(frozen=True)
class RunSetup:
    """What stays fixed through one run."""

    problem: Problem
    provider: Provider
    log: RunLog
    system: str  # the system prompt
    budget: Budget
    executor: Executor  # where compiles and benchmarks run (leased here, or Ray)
    display: Display = field(default_factory=NullDisplay)
    sanitizer: RunSanitizer | None = None  # new bests sanitized before they count (None: off)
    baselines: bool = False  # the re-checked best timed against the baselines at the end (--baselines)

    def __post_init__(self) -> None:
        self.executor.on_event = self.log.append  # every lease taken for the run is in its log
