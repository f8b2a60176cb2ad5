"""Each timing shape's launch-free reference (tools/worker/launch_free.py) for one result: timed with this
evaluation's truth, else cached for this host; on a CPU, and wherever none was timed, the eager reference
stands in and the result says why. A new timing goes to the cache (tools/cache/reference_times.py)."""

from __future__ import annotations

from tools import wire
from tools.cache.reference_times import ReferenceTimes
from tools.problem import Problem
from tools.results import BenchResult, EnvInfo, LaunchFreeReference
from tools.supervise import ChildOutcome
from tools.worker.launch_free import CPU_NOTE

NOT_TIMED = "not timed on this host yet (the next evaluation times it): the eager reference stands in"


def launch_free_references(
    problem: Problem, env: EnvInfo, truth: ChildOutcome
) -> dict[str, LaunchFreeReference]:
    if problem.spec.device != "cuda":
        return {t.name: LaunchFreeReference(mode="eager", note=CPU_NOTE) for t in problem.spec.timing}
    refs = ReferenceTimes(problem, env)
    fresh = {m.name: m.launch_free for m in truth.all(wire.TimingReady) if m.launch_free is not None}
    found: dict[str, LaunchFreeReference] = {}
    for shape in problem.spec.timing:
        now = fresh.get(shape.name)
        if now is not None:
            refs.put_launch_free(shape, now)
        found[shape.name] = (
            now or refs.launch_free(shape) or LaunchFreeReference(mode="eager", note=NOT_TIMED)
        )
    return found


def with_launch_free(result: BenchResult, found: dict[str, LaunchFreeReference]) -> BenchResult:
    timings = [t.model_copy(update={"launch_free": found.get(t.name)}) for t in result.timings]
    return result.model_copy(update={"timings": timings})
