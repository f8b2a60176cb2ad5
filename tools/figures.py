"""The headline of an evaluation and the figures beside it (their data: tools/figure_data.py; what each means
and why: docs/ranking.md).

Per timing shape: the candidate's device time with its 95 % interval; its share of the speed-of-light floor
(tools/floor.py: floor ms / median ms); its speedup against the launch-free reference (the reference's forward
replayed from a CUDA graph, tools/worker/launch_free.py; on a CPU, or where capture failed, the eager one, said
so), with an interval from both spreads (tools/judge/_ratio.py); the eager speedup, labelled as such. Overall:
geometric means over the timing shapes. The headline, what ranks kernels, is the share of the floor where the
problem has one, else the launch-free speedup.

The faster-than-floor guard: a correct result whose median is below a shape's floor by more than the floor's
stated uncertainty (`PEAKS_ERROR` + `FLOOR_MARGIN` of it), or below the spec's own `floor_ms` at all, did work
the floor says cannot be done that fast: it is flagged `faster_than_floor`, made `suspect` (no speedup, never
the best) and the model is told why. The spec's hand-set `floor_ms` was the `below_floor` flag before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tools.figure_data import HEADLINE_LABELS, Figures, FloorStatus, HeadlineMetric, ShapeFigures
from tools.judge._ratio import Z95, speedup_interval
from tools.problem import Problem
from tools.results import BenchResult, Flag, ShapeFloor, ShapeTiming

# The measured peaks (tools/worker/peaks.py: a large copy, a long FMA loop, library matmuls) are what those
# loops reach, not the hardware's limit: a read-mostly kernel or a better-tuned loop may pass them by this
# share of the floor ...
PEAKS_ERROR = 0.10
# ... and the spec's FLOP and byte counts are a model of the work (operands kept in cache, fused FLOPs), which
# an honest kernel may beat by this much more.
FLOOR_MARGIN = 0.15
FASTER_LEAD = (
    "suspect: every output is correct, but it was measured faster than the floor allows (flag "
    "faster_than_floor); it earns no speedup and never becomes the best; "
)
MAX_LOG_HALF = 50.0  # an interval wider than e^±50 says "unknown" as well as any
OLD_RESULT_NOTE = "recorded before launch-free references: its speedup is against the eager reference"


def floor_uncertainty() -> float:
    return PEAKS_ERROR + FLOOR_MARGIN


def geomean(values: Sequence[float | None]) -> float | None:
    """The geometric mean, or None where any value is missing (or none is positive)."""
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values if v is not None) / len(values))


def launch_free_speedup(st: ShapeTiming) -> tuple[float | None, tuple[float, float] | None]:
    """The shape's speedup against its launch-free reference: the graph's replays where timed, else the eager."""
    lf, cand = st.launch_free, st.candidate
    if cand is None or cand.median_ms <= 0:
        return None, None
    if lf is not None and lf.mode == "graph" and lf.stats is not None:
        return lf.stats.median_ms / cand.median_ms, speedup_interval(lf.stats, cand)
    return st.eager_speedup, st.eager_interval


def with_floor_figures(st: ShapeTiming) -> ShapeFloor | None:
    """The shape's floor with its uncertainty and the candidate's share of it (timed, correct or not)."""
    f, cand = st.floor, st.candidate
    if f is None or f.ms is None:
        return f
    fraction = f.ms / cand.median_ms if cand is not None and cand.median_ms > 0 else None
    return f.model_copy(update={"uncertainty": floor_uncertainty(), "fraction": fraction})


def faster_than_floor(problem: Problem, timings: list[ShapeTiming]) -> list[str]:
    """Why each shape's median is below what its floor allows ([] where none is)."""
    bounds = {t.name: t.floor_ms for t in problem.spec.timing}
    why = []
    for st in timings:
        cand = st.candidate
        if cand is None:
            continue
        stated = bounds.get(st.name)
        if stated is not None and cand.median_ms < stated:
            why.append(
                f"{st.name}: {cand.median_ms:.4g} ms is below the spec's stated floor_ms {stated:g} ms"
            )
        f = st.floor
        if f is not None and f.ms is not None and cand.median_ms < f.ms * (1 - f.uncertainty):
            why.append(
                f"{st.name}: {cand.median_ms:.4g} ms is {f.ms / cand.median_ms:.0%} of the floor's speed: floor "
                f"{f.ms:.4g} ms = max(compute {f.compute_ms:.4g} ms, memory {f.memory_ms:.4g} ms) at this host's "
                f"measured peaks, less its uncertainty of {f.uncertainty:.0%}; the timed calls cannot have done "
                "the whole computation (work skipped where the correctness cases cannot see, or a clock not "
                "measuring the work)"
            )
    return why


def finish(problem: Problem, result: BenchResult) -> BenchResult:
    """`result` (after its floors, tools/floor.py `with_floors`) with each shape's launch-free speedup, the
    faster-than-floor guard, the overall speedups (geomeans) and its `figures`."""
    timings = []
    for st in result.timings:
        speedup, interval = launch_free_speedup(st)
        floor = with_floor_figures(st)
        timings.append(
            st.model_copy(update={"speedup": speedup, "speedup_interval": interval, "floor": floor})
        )
    update: dict[str, object] = {"timings": timings}
    why = faster_than_floor(problem, timings) if result.correct else []
    if why:
        flag = Flag(name="faster_than_floor", message="; ".join(why), disqualifying=False)
        update.update(
            status="suspect", correct=False, flags=[*result.flags, flag.name],
            flag_details=[*result.flag_details, flag], message=FASTER_LEAD + result.message,
        )  # fmt: skip
    finished = result.model_copy(update=update)
    correct = finished.correct
    finished.speedup = geomean([t.speedup for t in timings]) if correct else None
    finished.eager_speedup = geomean([t.eager_speedup for t in timings]) if correct else None
    finished.figures = figures_of(finished)
    return finished


def _interval(st: ShapeTiming) -> tuple[float, float] | None:
    cand = st.candidate
    if cand is None or not math.isfinite(cand.rse):
        return None
    half = min(
        Z95 * cand.rse, MAX_LOG_HALF
    )  # a loop with a wild spread (a warm-up detector's) must not overflow
    return cand.median_ms * math.exp(-half), cand.median_ms * math.exp(half)


def shape_figures(st: ShapeTiming) -> ShapeFigures:
    old = st.launch_free is None  # an older result: its `speedup` was the eager one
    f = st.floor
    return ShapeFigures(
        name=st.name,
        device_ms=st.candidate.median_ms if st.candidate else None,
        device_interval=_interval(st),
        floor_ms=f.ms if f is not None else None,
        floor_fraction=f.fraction if f is not None else None,
        faster_than_floor=f is not None
        and f.ms is not None
        and f.fraction is not None
        and f.fraction * (1 - f.uncertainty) > 1
        and f.uncertainty > 0,
        speedup=st.speedup,
        speedup_interval=st.speedup_interval,
        reference_mode=st.launch_free.mode if st.launch_free is not None else "eager",
        eager_speedup=st.speedup if old else st.eager_speedup,
        eager_interval=st.speedup_interval if old else st.eager_interval,
    )


def floor_status(result: BenchResult) -> tuple[FloorStatus, str]:
    floors = [t.floor for t in result.timings if t.floor is not None]
    if not floors:
        return (
            "no_floor",
            "no floor: none in this result (the problem's spec states no `floor:`, its work per call)",
        )
    missing = next((f.message for f in floors if f.ms is None), None)
    if missing is not None or len(floors) < len(result.timings):
        return "unavailable", f"no floor here: {missing or 'not derived for every timing shape'}"
    peaks = result.peaks
    where = f"{peaks.device} peaks measured on this host ({peaks.key})" if peaks is not None else "peaks"
    return "derived", f"derived from the spec's `floor:` at the {where}"


def figures_of(result: BenchResult) -> Figures:
    """The headline and its figures, from the result's own data alone (an older result's too)."""
    shapes = [shape_figures(t) for t in result.timings]
    status, note = floor_status(result)
    metric: HeadlineMetric = "floor_fraction" if status == "derived" else "launch_free_speedup"
    correct = result.correct
    fraction = geomean([s.floor_fraction for s in shapes]) if correct and status == "derived" else None
    speedup = geomean([s.speedup for s in shapes]) if correct else None
    modes = {s.reference_mode for s in shapes}
    notes = dict.fromkeys(
        t.launch_free.note for t in result.timings if t.launch_free and t.launch_free.mode == "eager"
    )
    if any(t.launch_free is None for t in result.timings):
        notes[OLD_RESULT_NOTE] = None
    lows = [s.speedup_interval[0] if s.speedup_interval else None for s in shapes]
    highs = [s.speedup_interval[1] if s.speedup_interval else None for s in shapes]
    low, high = geomean(lows), geomean(highs)
    return Figures(
        metric=metric,
        label=HEADLINE_LABELS[metric],
        value=fraction if metric == "floor_fraction" else speedup,
        floor_status=status,
        floor_note=note,
        floor_uncertainty=floor_uncertainty() if status == "derived" else None,
        floor_fraction=fraction,
        speedup=speedup,
        speedup_interval=(low, high) if correct and low is not None and high is not None else None,
        eager_speedup=geomean([s.eager_speedup for s in shapes]) if correct else None,
        reference_mode=modes.pop() if len(modes) == 1 else "mixed" if modes else "eager",
        reference_note="; ".join(notes),
        overall=f"geometric mean over {len(shapes)} timing shape{'s' if len(shapes) != 1 else ''}",
        shapes=shapes,
    )
