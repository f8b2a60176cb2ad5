"""A run's limits (`--max-turns`, `--max-cost`, `--max-minutes`, `--target-speedup`, `--stop-at-floor`) and the one check
of them, used by a single run and by every trajectory of a parallel run alike."""

from __future__ import annotations

from pydantic import BaseModel

from agent.exits import AgentExit, CostLimit, FloorReached, TargetReached, TimeLimit, TurnLimit
from agent.runlog.events import TimedKernel


class Budget(BaseModel):
    max_turns: int | None = None
    max_cost_usd: float | None = None
    max_minutes: float | None = None
    target_speedup: float | None = None
    stop_at_floor: float | None = None


def over_budget(budget: Budget, turns: int, cost_usd: float, elapsed_s: float) -> AgentExit | None:
    """The exit a run must take before its next model call, if a limit is spent. In a parallel run
    `turns` are the trajectory's own; cost and time are the whole run's."""
    if budget.max_turns is not None and turns >= budget.max_turns:
        return TurnLimit(f"reached --max-turns {budget.max_turns}")
    if budget.max_cost_usd is not None and cost_usd >= budget.max_cost_usd:
        return CostLimit(f"spent ${cost_usd:.4f} of --max-cost ${budget.max_cost_usd:.2f}")
    if budget.max_minutes is not None and elapsed_s >= budget.max_minutes * 60:
        return TimeLimit(f"ran {elapsed_s / 60:.1f} min of --max-minutes {budget.max_minutes:g}")
    return None


def target_reached(budget: Budget, best_speedup: float | None) -> TargetReached | None:
    target = budget.target_speedup
    if target is None or best_speedup is None or best_speedup < target:
        return None
    return TargetReached(
        f"best speedup (launch-free ref) {best_speedup:.2f}× reached --target-speedup {target:g}"
    )


def floor_reached(budget: Budget, best: TimedKernel | None) -> FloorReached | None:
    """The best kernel at `--stop-at-floor` F of the speed-of-light floor or closer (its headline: the geomean
    over the timing shapes; an older log's best: the primary shape's)."""
    stop = budget.stop_at_floor
    fraction = best.floor_fraction if best is not None else None
    if stop is None or fraction is None or fraction < stop:
        return None
    return FloorReached(
        f"best kernel at {fraction:.1%} of the speed-of-light floor reached --stop-at-floor {stop:g}"
    )
