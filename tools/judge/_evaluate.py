"""One candidate's evaluation once its plan and truth are made (tools/judge/_plan.py): the candidate
worker's run, the verdict, and a re-measurement where the clocks disagreed. `benchmark`
(tools/benchmark.py) calls `evaluate`.

Three processes: the truth worker (reference weights, inputs, float64 truth, reference timing), the
candidate worker (inputs and weights only), and this parent, which compares, decides and keeps statistics.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from tools import orders, wire
from tools.cache.reference_times import ReferenceTimes
from tools.judge import _phases as phases
from tools.judge._compile import compile_result
from tools.judge._kept import TruthLost
from tools.judge._launch_free import launch_free_references, with_launch_free
from tools.judge._paired import check_cached_reference
from tools.judge._plan import Prepared
from tools.judge._static_checks import RULES
from tools.judge._turns import CandidateTurns
from tools.judge._verdicts import (
    Verdicts,
    case_results,
    checks_a_constant_passes,
    failure_lead,
    load_notices,
    overall_status,
    summary,
    timing_results,
    usage_guards,
    where_it_stopped,
)
from tools.problem import Problem
from tools.results import BenchResult, CompileResult, EnvInfo, Flag, TimingStats
from tools.supervise import (
    HARNESS,
    ChildOutcome,
    DeviceTurns,
    Job,
    WarmPool,
    describe_exit,
    idle_mode,
    run_candidate,
    text_hash,
)


def evaluate(
    problem: Problem,
    kernel_code: str,
    prepared: Prepared,
    flags: list[Flag],
    base: dict[str, Any],
    ev: WarmPool | None,
    clock: dict[str, float],
    turns: DeviceTurns | None = None,
) -> tuple[BenchResult, bool]:
    """The candidate's run and the verdict; also whether its worker side must be replaced. `turns`: the
    evaluation's hold on a warm pool's device, `idle_mode` on entry: exclusive for each of the candidate's
    timing loops (the wait is the parent's, not counted against the worker's bounds:
    tools/supervise/jobs.py), a re-measurement and the paired check; shared for the rest of the candidate's
    life (its cases) and the truth server's re-check; `idle_mode` between them."""
    alone = (lambda: turns.holding("exclusive")) if turns is not None else contextlib.nullcontext
    job, plan, truth = prepared.job, prepared.plan, prepared.truth
    base = {**base, "seed": prepared.master}
    launch: dict[str, Any] = {"launcher": ev.launch_candidate, "secret_dirs": [ev.staging]} if ev else {}
    no_device = truth.first(wire.NoDevice) is not None
    if no_device or truth.first(wire.Done) is None:
        if turns is not None:
            turns.to("shared")  # its import may run device work
        outcome = run_candidate(job, problem, orders.COMPILE, **launch)
        comp = compile_result(outcome, base["kernel_hash"], no_device=no_device)
        base["env"] = _with_containment(base["env"], outcome.containment)
        if no_device:
            message = "benchmark needs a CUDA GPU and none is visible here; " + (
                "the kernel compiled." if comp.ok or comp.status == "no_device" else comp.message
            )
            return BenchResult(
                status="no_device", correct=False, speedup=None, message=message, compile=comp, **base
            ), _suspicious(outcome, comp.status in ("ok", "no_device", "compile_error", "import_error"))
        err = truth.first(wire.TruthError)
        detail = err.message if err else _where_truth_failed(truth)
        return BenchResult(
            status="harness_error", correct=False, speedup=None, compile=comp, output=truth.output,
            message=f"the reference/truth worker failed: {detail}", **base,
        ), True  # fmt: skip
    # timed in this evaluation; not those timed ahead, now cached (checked beside the candidate as any cached one)
    ref_msgs = (
        {} if prepared.references_cached else {m.name: m.reference for m in truth.all(wire.TimingReady)}
    )
    rechecker = prepared.kept.recheck if prepared.kept is not None else None
    verdicts = Verdicts(problem=problem, plan=plan, truths=prepared.truths, rechecker=rechecker)
    for f in flags:
        verdicts.flags[f.name] = f
    watched = {problem.reference_path: text_hash(problem.reference_source)}
    changed_before = set(HARNESS.changed(watched))
    launch["call_bounds"] = plan.call_bounds(problem, ReferenceTimes(problem, base["env"]), ref_msgs)
    launch["secrets"] = plan.secrets(prepared.master)
    # A CUDA worker's start (CUDA, cuBLAS, the profiler: trusted code) holds nothing: it asks for the device
    # before it imports the candidate (tools/worker/device_turn.py). A CPU worker's start is host work, timed.
    gated = turns is not None and problem.spec.device == "cuda"
    if turns is not None:
        profiled = frozenset(t.name for t in plan.timing if t.profile)
        verdicts.turns = CandidateTurns(turns.to, idle_mode(problem.spec.device), profiled)
        if not gated:
            turns.to("shared")  # the candidate's process, live, may run device work at any time
    request = plan.candidate_request().model_copy(update={"device_gated": gated})
    outcome = run_candidate(job, problem, request, on_message=verdicts.handle, **launch)
    if turns is not None:
        turns.to(idle_mode(problem.spec.device))  # it has exited (or died in a loop it never ended)
    clock.update(phases.candidate_phases(outcome))
    judging = time.monotonic()
    result = _verdict(problem, outcome, verdicts, ref_msgs, base, watched, changed_before)
    result.env = _with_containment(result.env, outcome.containment)
    result.notices += outcome.notices  # how the worker ran where that was not the default, what it staged
    clock["judge"] = time.monotonic() - judging
    suspicious = _suspicious(outcome, result.status in CLEAN_STATUSES and not result.flags)
    if result.status == "ok" and verdicts.disagreements:
        remeasuring = time.monotonic()
        with alone():
            result, again = _remeasure(problem, job, verdicts, result, ref_msgs, launch)
        clock["remeasure"] = time.monotonic() - remeasuring
        suspicious = suspicious or _suspicious(again, result.status in CLEAN_STATUSES and not result.flags)
    if result.status == "ok":
        checking = time.monotonic()
        # the truth server takes the device alone for the reference's loop (wire.DeviceWanted)
        own = prepared.kept.server if prepared.kept is not None else None
        result = check_cached_reference(problem, plan, job, ev, result, turns, own)
        clock["reference_check"] = time.monotonic() - checking
    result = with_launch_free(result, launch_free_references(problem, base["env"], truth))
    return result, suspicious


CLEAN_STATUSES = ("ok", "incorrect", "compile_error", "import_error")


def _remeasure(
    problem: Problem,
    job: Job,
    verdicts: Verdicts,
    result: BenchResult,
    ref_msgs: dict[str, TimingStats | None],
    launch: dict[str, Any],
) -> tuple[BenchResult, ChildOutcome]:
    """The clocks disagreed on some shape of an otherwise correct candidate: time those shapes again in a
    fresh worker with more iterations. A disagreement that persists makes the result `suspect` (no
    speedup, never the best); one that does not was the host's, and the second measurement stands."""
    first = dict(verdicts.disagreements)
    verdicts.disagreements.clear()
    for name in first:
        verdicts.batch_clock.pop(name, None)
        verdicts.calls.pop(name, None)  # the fresh worker's loop gets a schedule of its own
    request = verdicts.plan.retime_request(set(first))
    outcome = run_candidate(job, problem, request, on_message=verdicts.handle, **launch)
    refs = ReferenceTimes(problem, result.env)
    try:
        again, _ = timing_results(verdicts, outcome, problem, refs, ref_msgs, only=set(first))
    except TruthLost as exc:
        failed = result.model_copy(
            update={"status": "harness_error", "correct": False, "speedup": None,
                    "message": f"the harness failed while judging a re-measurement: {exc}"}
        )  # fmt: skip
        return failed, outcome
    retimed = {t.name: t for t in again}
    for name in first:
        if retimed.get(name) is None or retimed[name].candidate is None:
            why = where_it_stopped(verdicts, outcome) if outcome.returncode else "it was not timed"
            verdicts.disagreements[name] = f"{first[name]}; the re-measurement failed ({why})"
    timings = [retimed.get(t.name) or t for t in result.timings]
    notes = [
        f"{name}: re-measured in a fresh worker with more iterations, because {why}; the second "
        f"measurement's clocks agree, and it stands"
        for name, why in first.items()
        if name not in verdicts.disagreements
    ]
    if verdicts.disagreements:
        persisting = "; ".join(verdicts.disagreements.values())
        verdicts.flag(
            "timing_mismatch", f"{persisting} (and again when re-measured in a fresh worker)", False
        )
    flags = list(verdicts.flags.values())
    status = "ok"
    if any(f.disqualifying for f in flags):
        status = "incorrect"
    elif verdicts.disagreements:
        status = "suspect"
    primary = next((t for t in timings if t.primary), None)
    updated = result.model_copy(
        update={
            "status": status,
            "correct": status == "ok",
            "speedup": primary.eager_speedup
            if status == "ok" and primary
            else None,  # tools/figures.py: the headline's
            "timings": timings,
            "flags": [f.name for f in flags],
            "flag_details": flags,
            "notices": result.notices + notes,
            "env": _with_containment(result.env, result.env.containment + outcome.containment),
        }
    )
    lead = SUSPECT_LEAD if status == "suspect" else ""
    updated.message = lead + summary(updated, problem)
    return updated, outcome


SUSPECT_LEAD = (
    "suspect: every output is correct, but the clocks disagree about how long it ran, twice; a result whose "
    "timing cannot be trusted earns no speedup and never becomes the best; "
)


def _suspicious(outcome: ChildOutcome, clean: bool) -> bool:
    """Whether the warm side is replaced: any fault, timeout, flag, forged message or leftover process."""
    return not clean or outcome.timed_out or bool(outcome.swept) or outcome.bad_messages > 0


def compile_failure(comp: CompileResult, base: dict[str, Any], flags: list[Flag], output: str) -> BenchResult:
    """The verdict on a kernel that did not compile or import: its compile's status and message; nothing ran."""
    return BenchResult(
        status=comp.status if comp.status != "ok" else "import_error", correct=False, speedup=None,
        message=comp.message, compile=comp, output=output, flags=[f.name for f in flags], flag_details=flags,
        **base,
    )  # fmt: skip


def _verdict(
    problem: Problem,
    outcome: ChildOutcome,
    verdicts: Verdicts,
    ref_msgs: dict[str, TimingStats | None],
    base: dict[str, Any],
    watched: dict[Path, str],
    changed_before: set[str],
) -> BenchResult:
    env = base["env"]
    if tampered := sorted(set(HARNESS.changed(watched)) - changed_before):
        verdicts.flag(
            "harness_tampering",
            f"{RULES['harness_tampering'].explanation} (changed while it ran: {', '.join(tampered)[:300]})",
        )
    if outcome.cache_tampering:
        changed = "; ".join(outcome.cache_tampering[:3])
        verdicts.flag("cache_tampering", f"{RULES['cache_tampering'].explanation} ({changed})"[:600])
    comp = compile_result(outcome, base["kernel_hash"])
    if outcome.handler_errors:
        return _harness_failed(outcome.handler_errors[0], comp, outcome, base)
    if outcome.first(wire.Imported) is None or comp.status != "ok":
        return compile_failure(comp, base, list(verdicts.flags.values()), outcome.output)
    cases = case_results(verdicts, outcome)
    try:
        timings, usage = timing_results(verdicts, outcome, problem, ReferenceTimes(problem, env), ref_msgs)
    except TruthLost as exc:
        return _harness_failed(str(exc), comp, outcome, base)
    usage_guards(verdicts, problem, usage)
    constant_passes_at, checks = checks_a_constant_passes(verdicts)
    if checks and len(constant_passes_at) == checks:
        verdicts.flag(
            "constant_output_passes",
            "a constant output would pass every check of this problem (each case's and shape's truth is "
            "constant within the tolerance): no kernel can be judged correct on it; give the problem inputs "
            "or parameters whose outputs vary",
        )
    status = overall_status(cases, timings, verdicts, outcome)
    if status != "ok" and verdicts.disagreements:  # already not counted: say so, no re-measure needed
        verdicts.flag("timing_mismatch", "; ".join(verdicts.disagreements.values()), disqualifying=False)
    correct = status == "ok"
    primary = next((t for t in timings if t.primary), None)
    result = BenchResult(
        status=status,
        correct=correct,
        speedup=primary.eager_speedup if correct and primary else None,  # the headline's: tools/figures.py
        flags=[f.name for f in verdicts.flags.values()],
        flag_details=list(verdicts.flags.values()),
        message="",
        cases=cases,
        timings=timings,
        compile=comp,
        usage=usage,
        output=outcome.output,
        **base,
    )
    result.message = failure_lead(status, outcome, verdicts) + summary(result, problem)
    result.notices += load_notices(timings)
    if constant_passes_at and len(constant_passes_at) < checks:
        result.notices.append(
            f"a constant output would pass {', '.join(constant_passes_at)} (its truth is constant within the "
            "tolerance): those checks cannot tell a kernel from a constant; the others can"
        )
    return result


def _harness_failed(
    why: str, comp: CompileResult, outcome: ChildOutcome, base: dict[str, Any]
) -> BenchResult:
    return BenchResult(
        status="harness_error", correct=False, speedup=None, compile=comp, output=outcome.output,
        message=f"the harness failed while judging: {why}", **base,
    )  # fmt: skip


def _with_containment(env: EnvInfo, containment: list[str]) -> EnvInfo:
    """A copy of `env` (the plan's caches share it) with what contained this evaluation's candidate workers:
    each entry once, so a guard missing in any of them is said."""
    return env.model_copy(update={"containment": list(dict.fromkeys(containment))})


def integrity_notices(problem: Problem) -> list[str]:
    """Harness or reference files that differ on disk from what this process read at load time."""
    changed = HARNESS.changed({problem.reference_path: text_hash(problem.reference_source)})
    if not changed:
        return []
    return [
        f"files changed on disk since the harness loaded them (no effect: evaluations use the copies read at "
        f"load time): {', '.join(changed)[:400]}"
    ]


def _where_truth_failed(outcome: ChildOutcome) -> str:
    tail = outcome.output.strip().splitlines()[-3:]
    return f"{describe_exit(outcome)}; {' | '.join(tail)}"
