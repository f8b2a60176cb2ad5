"""How long a candidate worker may stay silent: bounds derived from the work, not one fixed budget.

A kernel that never returns must cost seconds, not the evaluation's whole budget. After its import, the
worker reports each step it starts (`start` of a case or timing shape, `tick`s from the timing loop,
`profiling`); the parent allows each step what that work can need and kills the worker when a step
overruns. A step that runs calls gets `call_bound`: max(`limits.call_timeout_min_s`,
`limits.call_timeout_factor` × the reference's time for that case or shape), plus `SETUP_S` for loading
its data and writing its outputs (a run under a tool: its budget). The profiler's one call gets
`PROFILE_S`; the exit after `done`, `EXIT_S`. `limits.eval_timeout_s` stays the cap on the whole
evaluation; `limits.compile_timeout_s` bounds the import (its builds).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from tools import wire
from tools.problem import Limits
from tools.supervise._spawn import Deadline

SETUP_S = 5.0  # a step's own data: loading inputs and weights, building the model, saving outputs
ANSWER_CAP_S = 600.0  # the longest the parent may take to answer one question (it waits for the device)
PROFILE_S = 60.0  # one profiled call, the CUDA profiler's start-up included (about 4 s on the H200)
# After `done` only the worker's exit is left (the interpreter's shutdown, its namespaces'): no candidate
# call, so no hang for a short bound to catch. A busy 2-core CI machine once took over 5 s there.
EXIT_S = 30.0


def call_bound(limits: Limits, reference_s: float | None) -> float:
    """The longest one call of the candidate may take, given the reference's time for the same work."""
    scaled = limits.call_timeout_factor * reference_s if reference_s else 0.0
    return max(limits.call_timeout_min_s, scaled)


@dataclass
class Watchdog:
    """Moves the worker's deadline as its messages arrive. `bounds` maps (kind, name) of each case and
    timing shape to its call bound in seconds."""

    deadline: Deadline
    limits: Limits
    bounds: dict[tuple[str, str], float] = field(default_factory=dict)
    budget_s: float | None = None  # a cap on the whole run, import included (a sanitizer's budget per tool)
    step: str = "import (building its extensions)"
    allowed: float = 0.0
    _cap: float | None = None
    _call: float = 0.0
    _budget_at: float | None = None

    def __post_init__(self) -> None:
        if self.budget_s is not None:
            self._budget_at = time.monotonic() + self.budget_s
            self.deadline.at = min(self.deadline.at, self._budget_at)

    @property
    def setup_s(self) -> float:
        """A step's own data. A run with a budget is one under a tool (a sanitizer, the profiler) whose
        wrapper slows the worker's own host code too (ASan: torch building inputs passed 5 s on a busy CI
        machine): its data steps, like its calls, are bounded by that budget alone."""
        return self.budget_s if self.budget_s is not None else SETUP_S

    def on_message(self, msg: wire.WorkerMessage) -> None:
        match msg:
            case wire.Imported() | wire.ImportFailed() | wire.Retime():
                self._cap = time.monotonic() + self.limits.eval_timeout_s
                self._allow("setup", self.setup_s)
            case wire.Start():
                self._call = self.bounds.get((msg.kind, msg.name), self.limits.call_timeout_min_s)
                self._allow(f"{msg.kind} {msg.name}", self.setup_s + self._call)
            case wire.Tick() | wire.BatchBegin():
                self._allow(self.step, self._call)
            case wire.BatchEnd():  # then its outputs are copied and written
                self._allow(self.step, self._call + self.setup_s)
            case wire.Profiling():
                self._allow(f"profiling {msg.name}", PROFILE_S)
            case wire.CaseDone() | wire.TimingDone() | wire.CasesDone() | wire.Failed():
                self._allow("setup", self.setup_s)
            case wire.Done():
                self._allow("exit", EXIT_S)

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """The parent answers the worker, which waits (for the device, say): the worker's clocks, its step's
        and the evaluation's budget, stop until the answer is given (for `ANSWER_CAP_S` at most), as they
        did not run while an evaluation waited for the device before its worker started."""
        began = time.monotonic()
        left = self.deadline.at - began
        self.deadline.at = began + ANSWER_CAP_S
        try:
            yield
        finally:
            now = time.monotonic()
            waited = now - began
            self._cap = self._cap + waited if self._cap is not None else None
            self._budget_at = self._budget_at + waited if self._budget_at is not None else None
            caps = [c for c in (self._cap, self._budget_at) if c is not None]
            self.deadline.at = min([now + left, *caps])

    def _allow(self, step: str, seconds: float) -> None:
        self.step, self.allowed = step, seconds
        caps = [c for c in (self._cap, self._budget_at) if c is not None]
        self.deadline.at = min([time.monotonic() + seconds, *caps])

    def explain(self) -> str:
        """Why the worker was stopped, for the verdict's message."""
        if self._budget_at is not None and self.deadline.at >= self._budget_at:
            return f"its budget of {self.budget_s:.0f} s ran out during {self.step}"
        if self._cap is not None and self.deadline.at >= self._cap:
            return f"the evaluation's budget of {self.limits.eval_timeout_s:.0f} s ran out during {self.step}"
        if self.step == "exit":
            return f"the worker reported all its work done but did not exit within {self.allowed:.0f} s"
        return (
            f"{self.step} did not finish within its bound of {self.allowed:.0f} s "
            f"(max({self.limits.call_timeout_min_s:g} s, {self.limits.call_timeout_factor:g}× the reference's "
            f"time) per call, plus {self.setup_s:g} s for its data); a kernel that never returns ends here"
        )
