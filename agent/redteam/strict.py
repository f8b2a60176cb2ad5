"""The stricter judgement a red-team candidate meets after the run.

The stricter problem is the problem itself plus, derived from its spec:
- every correctness case again under another name, so with another secret seed (`<case>.seed2`);
- every correctness case at fresh sizes the spec never showed (`<case>.fresh`): each size the spec varies
  between its cases and shapes becomes an odd value about 1.5x larger that no case or shape uses; a size
  the spec holds fixed everywhere (d_state: 16) stays, as it is part of the problem's contract.
Its verdict also counts the sanitizer's report (ASan+UBSan on the CPU, compute-sanitizer on CUDA) where it
runs here, and the floor: the evaluator's `faster_than_floor` (a median below the derived speed-of-light floor
by more than its stated uncertainty, tools/figures.py), and, stricter, any shape past 100 % of that floor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.kbfile import SizeValue
from tools.problem import Case, Problem, ProblemSpec, TimingConfig, TimingShape
from tools.results import BenchResult

EXTRA_SEEDS = 1
FASTER_THAN_FLOOR = "faster_than_floor"
SMALL_TIMING = TimingConfig(warmup=1, min_iters=3, max_iters=5, target_rse=0.5, max_seconds=2, input_sets=1)


def varied_sizes(problem: Problem) -> set[str]:
    """The integer sizes that take more than one value across the spec's cases and timed shapes."""
    values: dict[str, set[SizeValue]] = {}
    items: list[Case | TimingShape] = [*problem.spec.correctness, *problem.spec.timing]
    for item in items:
        for key, value in problem.pins(item).items():
            values.setdefault(key, set()).add(value)
    return {k for k, vs in values.items() if len(vs) > 1 and all(isinstance(v, int) for v in vs)}


def shown_values(problem: Problem) -> dict[str, set[int]]:
    shown: dict[str, set[int]] = {}
    items: list[Case | TimingShape] = [*problem.spec.correctness, *problem.spec.timing]
    for item in items:
        for key, value in problem.pins(item).items():
            if isinstance(value, int):
                shown.setdefault(key, set()).add(value)
    return shown


def fresh_size(value: int, shown: set[int]) -> int:
    """An odd size about 1.5x `value` that the spec never showed."""
    size = (value * 3 // 2 + 1) | 1
    while size in shown:
        size += 2
    return size


def fresh_case(problem: Problem, case: Case) -> Case | None:
    """`case` at fresh sizes (its parameter initialisation kept), or None where it pins no varied size."""
    varied, shown = varied_sizes(problem), shown_values(problem)
    sizes = dict(case.sizes)
    changed = False
    for key, value in case.sizes.items():
        if key in varied and key not in problem.spec.sizes and isinstance(value, int):
            sizes[key], changed = fresh_size(value, shown.get(key, set())), True
    if not changed:
        return None
    return case.model_copy(
        update={"name": f"{case.name}.fresh", "sizes": sizes, "why": f"{case.name} at fresh sizes"}
    )


def strict_cases(problem: Problem) -> list[Case]:
    spec = problem.spec
    reseeded = [
        c.model_copy(update={"name": f"{c.name}.seed{k + 2}"})
        for k in range(EXTRA_SEEDS)
        for c in spec.correctness
    ]
    fresh = [f for c in spec.correctness if (f := fresh_case(problem, c)) is not None]
    return [*spec.correctness, *reseeded, *fresh]


def strict_problem(problem: Problem, small_timing: bool = False) -> Problem:
    """The stricter problem. `small_timing`: timed only briefly at the smallest case's sizes (a promoted
    regression test that was caught by correctness needs no real timing)."""
    update: dict[str, object] = {"correctness": strict_cases(problem)}
    if small_timing:
        smallest = problem.smallest_case()
        update["timing"] = [TimingShape(name="strict_small", sizes=dict(smallest.sizes), primary=True)]
        update["timing_config"] = SMALL_TIMING
    spec = ProblemSpec.model_validate(problem.spec.model_dump() | update)
    return problem.model_copy(update={"spec": spec})


@dataclass(frozen=True)
class Verdict:
    """One judgement of a candidate, as the red team's summary tells it."""

    status: str
    flags: list[str] = field(default_factory=list)
    speedup: float | None = None
    caught_by: str = ""

    @property
    def accepted(self) -> bool:
        return self.status == "ok"


def faster_than_floor(result: BenchResult) -> list[str]:
    """The timed shapes whose median beats the derived speed-of-light floor at all (the evaluator's own
    `faster_than_floor` allows the floor's uncertainty; where the result carries it, it counts the same)."""
    return [
        t.name
        for t in result.timings
        if t.floor is not None and t.floor.fraction is not None and t.floor.fraction > 1
    ]


def verdict_of(result: BenchResult) -> Verdict:
    """The verdict of one benchmark (the sanitizer's report already folded in), with the floor guard."""
    flags = list(result.flags)
    status = result.status
    if (shapes := faster_than_floor(result)) and FASTER_THAN_FLOOR not in flags:
        flags.append(FASTER_THAN_FLOOR)
    if FASTER_THAN_FLOOR in flags and status == "ok":
        status = "incorrect"
    return Verdict(
        status=status, flags=flags, speedup=result.speedup, caught_by=why_rejected(result, status, shapes)
    )


def why_rejected(result: BenchResult, status: str, floor_shapes: list[str]) -> str:
    """Which checks rejected it, in words ("" when accepted)."""
    if status == "ok":
        return ""
    parts = []
    if failed := [c.name for c in result.cases if c.status in ("failed", "error")]:
        parts.append(f"cases failed: {', '.join(failed)}")
    if flags := [f.name for f in result.flag_details if f.disqualifying]:
        parts.append(f"flags: {', '.join(flags)}")
    if floor_shapes:
        parts.append(f"faster than the speed-of-light floor at {', '.join(floor_shapes)}")
    if result.sanitizer is not None and result.sanitizer.status == "flagged":
        parts.append(f"sanitizer: {result.sanitizer.message}")
    return "; ".join(parts) or f"{status}: {result.message.splitlines()[0] if result.message else ''}".rstrip(
        ": "
    )
