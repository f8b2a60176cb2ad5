"""`benchmark(problem, kernel_code, seed=None)`: correctness on every case, then timing at every shape.

Three processes: the truth worker (reference weights, inputs, float64 truth, reference timing), the
candidate worker (inputs and weights only), and this parent, which compares, decides and keeps statistics.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tools import wire
from tools.cache.reference_times import ReferenceTimes
from tools.envinfo import collect_env
from tools.judge import _phases as phases
from tools.judge._compile import compile_result
from tools.judge._paired import check_cached_reference
from tools.judge._plan import Prepared, obtain, prefetch, reference_cached, worker_kind
from tools.judge._static_checks import RULES, check_source
from tools.judge._verdicts import (
    Verdicts,
    case_results,
    checks_a_constant_passes,
    failure_lead,
    overall_status,
    summary,
    timing_results,
    usage_guards,
    where_it_stopped,
)
from tools.problem import Problem
from tools.results import BenchResult, EnvInfo, Flag, TimingStats
from tools.supervise import (
    HARNESS,
    ChildOutcome,
    Job,
    WarmPool,
    describe_exit,
    kernel_hash,
    pool_for,
    run_candidate,
    text_hash,
    visible_gpu,
)


def benchmark(
    problem: Problem,
    kernel_code: str,
    seed: int | None = None,
    *,
    refresh_reference: bool = False,
    gpu: int | None = None,
    pool: WarmPool | None = None,
    prefetch_next: bool = True,
) -> BenchResult:
    """Evaluate one candidate. `refresh_reference` re-times the reference instead of using the cached time
    (a final re-check does this: on a busy host the cached figure may come from other conditions).
    `gpu`: the only GPU the evaluation's child processes see (default: those visible to this process).
    `pool`: the warm workers to use (tools.supervise.pool); default: that device's, unless
    KERNEL_AGENT_WARM=0 asks for the cold path (fresh processes for everything).
    `prefetch_next=False`: no next evaluation is prepared afterwards (a one-shot `agent bench` has none, and
    its exit waited for that work)."""
    start = time.monotonic()
    ev = pool if pool is not None else pool_for(gpu)
    env = collect_env(problem)
    base: dict[str, Any] = {
        "problem": problem.name,
        "problem_hash": problem.content_hash,
        "kernel_hash": kernel_hash(kernel_code),
        "env": env,
        "workers": "warm" if ev is not None else "cold",
    }
    flags, syntax_error = check_source(kernel_code)
    if syntax_error:
        return BenchResult(
            status="import_error", correct=False, speedup=None, message=f"SyntaxError: {syntax_error}",
            seed=seed, **base,
        )  # fmt: skip
    clock: dict[str, float] = {"setup": time.monotonic() - start}
    if ev is not None and (cores_to_spare() or not refresh_reference and reference_cached(problem, env)):
        # A zygote not yet running starts now, beside the truth worker, unless that worker times the
        # reference on a few cores: a torch import beside it would slow the reference and inflate speedups.
        ev.zygote()
        ev.prepare_worker(worker_kind(problem))
    waiting = time.monotonic()
    # Taken before the device lock: a prefetch still running holds that lock until it is done.
    ready = ev.take_prefetched(problem.data_hash) if ev and seed is None and not refresh_reference else None
    with ev.device if ev is not None else visible_gpu(gpu):
        clock["truth_wait"] = time.monotonic() - waiting  # a prefetch finishing, or the device busy
        prepared = obtain(problem, env, seed, refresh_reference, ev, ready, clock)
        prepared.job.write_kernel(kernel_code)
        try:
            result, suspicious = _evaluate(problem, kernel_code, prepared, flags, base, ev, clock)
        finally:
            prepared.discard()
    result.notices += _integrity_notices(problem)
    if ev is not None:
        if suspicious:
            ev.replace_zygote()
        if prefetch_next:
            prefetch(problem, env, ev)
    result.seconds = time.monotonic() - start
    result.phases = phases.finish(clock, result.seconds)
    return result


SPARE_CORES = 8  # from this many, a worker starting beside the reference's timing has a core of its own


def cores_to_spare() -> bool:
    """Whether the candidate's worker may start while the reference is timed (the first evaluation on a
    host: 4.8 s of worker start after 20 s of truth and reference on the H200, 2026-12-01)."""
    try:
        return len(os.sched_getaffinity(0)) >= SPARE_CORES
    except AttributeError:  # not Linux
        return (os.cpu_count() or 1) >= SPARE_CORES


def prepare_ahead(problem: Problem, *, gpu: int | None = None, pool: WarmPool | None = None) -> bool:
    """Start making `problem`'s next evaluation in the background, as every evaluation does for the one
    after it: its worker and, where the reference is already timed on this host, its data and truth. A run
    calls this as it starts, so that its first benchmark finds them made while the model wrote the kernel
    (H200 gate, 2026-12-01: a run's first benchmark waited 5.7 s for its compile's zygote, then 12.7 s for
    its truth). `gpu`, `pool`: as for `benchmark`. False where warm workers are off: nothing is made ahead
    there."""
    ev = pool if pool is not None else pool_for(gpu)
    if ev is None:
        return False
    prefetch(problem, collect_env(problem), ev)
    return True


def _evaluate(
    problem: Problem,
    kernel_code: str,
    prepared: Prepared,
    flags: list[Flag],
    base: dict[str, Any],
    ev: WarmPool | None,
    clock: dict[str, float],
) -> tuple[BenchResult, bool]:
    """The candidate's run and the verdict; also whether its worker side must be replaced."""
    job, plan, truth = prepared.job, prepared.plan, prepared.truth
    base = {**base, "seed": prepared.master}
    launch: dict[str, Any] = {"launcher": ev.launch_candidate, "secret_dirs": [ev.staging]} if ev else {}
    no_device = truth.first(wire.NoDevice) is not None
    if no_device or truth.first(wire.Done) is None:
        outcome = run_candidate(job, problem, {"mode": "compile", "cases": [], "timing": []}, **launch)
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
    ref_msgs = {m.name: m.reference for m in truth.all(wire.TimingReady)}
    verdicts = Verdicts(problem=problem, plan=plan, truths=prepared.truths)
    for f in flags:
        verdicts.flags[f.name] = f
    watched = {problem.reference_path: text_hash(problem.reference_source)}
    changed_before = set(HARNESS.changed(watched))
    launch["call_bounds"] = plan.call_bounds(problem, ReferenceTimes(problem, base["env"]), ref_msgs)
    launch["secrets"] = plan.secrets(prepared.master)
    outcome = run_candidate(job, problem, plan.candidate_request(), on_message=verdicts.handle, **launch)
    clock.update(phases.candidate_phases(outcome))
    judging = time.monotonic()
    result = _verdict(problem, outcome, verdicts, ref_msgs, base, watched, changed_before)
    result.env = _with_containment(result.env, outcome.containment)
    clock["judge"] = time.monotonic() - judging
    suspicious = _suspicious(outcome, result.status in CLEAN_STATUSES and not result.flags)
    if result.status == "ok" and verdicts.disagreements:
        remeasuring = time.monotonic()
        result, again = _remeasure(problem, job, verdicts, result, ref_msgs, launch)
        clock["remeasure"] = time.monotonic() - remeasuring
        suspicious = suspicious or _suspicious(again, result.status in CLEAN_STATUSES and not result.flags)
    if result.status == "ok":
        checking = time.monotonic()
        result = check_cached_reference(problem, plan, job, ev, result)
        clock["reference_check"] = time.monotonic() - checking
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
    again, _ = timing_results(verdicts, outcome, problem, refs, ref_msgs, only=set(first))
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
            "speedup": primary.speedup if status == "ok" and primary else None,
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
    comp = compile_result(outcome, base["kernel_hash"])
    if outcome.handler_errors:
        return BenchResult(
            status="harness_error", correct=False, speedup=None, compile=comp, output=outcome.output,
            message=f"the harness failed while judging: {outcome.handler_errors[0]}", **base,
        )  # fmt: skip
    if outcome.first(wire.Imported) is None or comp.status != "ok":
        return BenchResult(
            status=comp.status if comp.status != "ok" else "import_error", correct=False, speedup=None,
            message=comp.message, compile=comp, output=outcome.output,
            flags=[f.name for f in verdicts.flags.values()], flag_details=list(verdicts.flags.values()), **base,
        )  # fmt: skip
    cases = case_results(verdicts, outcome)
    timings, usage = timing_results(verdicts, outcome, problem, ReferenceTimes(problem, env), ref_msgs)
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
        status=status,  # type: ignore[arg-type]
        correct=correct,
        speedup=primary.speedup if correct and primary else None,
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
    if constant_passes_at and len(constant_passes_at) < checks:
        result.notices.append(
            f"a constant output would pass {', '.join(constant_passes_at)} (its truth is constant within the "
            "tolerance): those checks cannot tell a kernel from a constant; the others can"
        )
    return result


def _with_containment(env: EnvInfo, containment: list[str]) -> EnvInfo:
    """A copy of `env` (the plan's caches share it) with what contained this evaluation's candidate workers:
    each entry once, so a guard missing in any of them is said."""
    return env.model_copy(update={"containment": list(dict.fromkeys(containment))})


def _integrity_notices(problem: Problem) -> list[str]:
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
