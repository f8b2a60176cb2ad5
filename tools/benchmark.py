"""The `benchmark` tool, whole: what the model is told (`SPEC`), the call (`benchmark`; `prepare_ahead`
makes a run's first evaluation ready as it starts), its result (`BenchResult`, in tools/results.py) and
the text the model reads back (`text`, `headline`).

A call is correctness on every case, then timing at every shape. The judge plans it (seed, cases,
shapes; truth made now or ahead: tools/judge/_plan.py), has the truth made and the candidate run in
contained workers (tools.supervise, tools.worker), and decides the verdict (tools/judge/_evaluate.py,
_verdicts.py). Three processes: the truth worker (reference weights, inputs, float64 truth, reference
timing), the candidate worker (inputs and weights only), and this parent, which compares and decides.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Protocol

from tools.cache.peaks import host_peaks
from tools.compile_kernel import head_tail
from tools.compile_kernel import text as compile_text
from tools.envinfo import collect_env
from tools.figure_data import Figures, format_metric
from tools.figures import figures_of, finish
from tools.floor import floor_text, with_floors
from tools.host import timing_threads
from tools.judge import _phases as phases
from tools.judge._ahead import made_beside, obtain, prefetch, reference_cached
from tools.judge._evaluate import compile_failure, evaluate, integrity_notices
from tools.judge._plan import worker_kind
from tools.judge._ratio import too_wide
from tools.judge._share import share_enabled, shares_of
from tools.judge._static_checks import check_source
from tools.orders import MAX_PREPARED
from tools.problem import Problem
from tools.results import (
    BenchResult,
    CaseResult,
    CompileResult,
    SanitizerReport,
    SanitizerRun,
    ShapeTiming,
    TimingStats,
)
from tools.supervise import DeviceTurns, WarmPool, idle_mode, kernel_hash, pool_for, visible_gpu
from tools.supervise.pool import evaluations_per_gpu
from tools.toolspec import ToolSpec

__all__ = [
    "SPEC",
    "BenchResult",
    "BestSoFar",
    "benchmark",
    "headline",
    "needs_evaluation",
    "not_compiled",
    "prepare_ahead",
    "text",
]

SPEC = ToolSpec(
    name="benchmark",
    description=(
        "Compile, check against float64 ground truth on every correctness case (fresh random seed each "
        "call), then time the timed shapes against the reference. Returns failing cases with their "
        "errors, timings with their spread, the headline (% of the speed-of-light floor where the problem has "
        "one, else the speedup against the reference replayed without launch overhead), the eager speedup, "
        "and the best kernel so far."
    ),
    brief="correctness on every case, then timings and the speedup.",
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
    ev = pool if pool is not None else pool_for(gpu, timing_threads(problem))
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
        ev.prepare_worker(worker_kind(problem), workers_ahead(worker_kind(problem), ev.running))
    waiting = time.monotonic()
    # Another candidate's input set in use now, where sharing is on (tools/judge/_share.py); else one made
    # ahead, taken before the device lock: a prefetch still running holds that lock until it is done.
    shares = shares_of(ev) if ev and seed is None and not refresh_reference and share_enabled() else None
    shared = shares.take(problem.content_hash, base["kernel_hash"], ev.jobs_dir) if shares and ev else None
    fresh = ev and seed is None and not refresh_reference and shared is None
    ready = ev.take_prefetched(problem.data_hash) if ev and fresh else None
    turns = DeviceTurns(ev.device) if ev is not None else None
    with visible_gpu(gpu) if ev is None else ev.evaluating():
        try:
            if turns is not None:  # device work beside others' (shared), a timed loop alone, else idle
                turns.to(idle_mode(problem.spec.device))
            clock["truth_wait"] = time.monotonic() - waiting  # a prefetch finishing, or the device busy
            prepared = shared or obtain(problem, env, seed, refresh_reference, ev, ready, clock, turns)
            if shared is not None and shared.kept is not None:
                shared.kept.turns = turns  # its re-check on this evaluation's turns
            elif shares is not None:
                shares.offer(prepared, problem.content_hash, base["kernel_hash"])
            base["truth_source"] = truth_source(prepared, shared, ready)
            if ev is not None:
                ev.expect_kept(prepared.kept_bytes)
            if ev is not None and prefetch_next and seed is None and not refresh_reference:
                if made_beside(problem, ev.running):  # the next truth beside this candidate and another
                    prefetch(problem, env, ev)
            try:
                prepared.job.write_kernel(kernel_code)
                result, suspicious = evaluate(problem, kernel_code, prepared, flags, base, ev, clock, turns)
            finally:
                prepared.discard()
            if problem.spec.floor is not None:  # measured once per host, with the device ours alone
                with turns.holding("exclusive") if turns is not None else contextlib.nullcontext():
                    peaks = host_peaks(problem.spec.device, env, timing_threads(problem))
                    result = with_floors(problem, result, peaks)
        finally:
            if turns is not None:
                turns.close()
    result = finish(problem, result)  # the launch-free speedups, the faster-than-floor guard, the headline
    result.notices += integrity_notices(problem)
    if ev is not None:
        if suspicious:
            ev.replace_zygote()
        if prefetch_next:
            prefetch(problem, env, ev)
    result.seconds = time.monotonic() - start
    result.phases = phases.finish(clock, result.seconds)
    return result


def truth_source(prepared: Any, shared: Any, ready: Any) -> str:
    """Where an evaluation's input set and truth came from (`BenchResult.truth_source`)."""
    if prepared is shared:
        return "shared"
    return "made_ahead" if prepared is ready else "made_now"


def needs_evaluation(compiled: CompileResult) -> bool:
    """Whether `benchmark` goes past this compile: it compiled (or did, with no GPU here to run it on: the
    evaluation then says `no_device`). An executor that compiles first under a compile lease asks this."""
    return compiled.ok or compiled.status == "no_device"


def not_compiled(problem: Problem, kernel_code: str, compiled: CompileResult) -> BenchResult:
    """What `benchmark` says of a kernel whose compile failed (`needs_evaluation` false), without running it
    again: the judge's verdict on a failed import, with the source checks' flags."""
    flags, _ = check_source(kernel_code)
    base = {
        "problem": problem.name,
        "problem_hash": problem.content_hash,
        "kernel_hash": compiled.kernel_hash,
    }
    return compile_failure(compiled, base, flags, compiled.output)


SPARE_CORES = 8  # from this many, a worker starting beside the reference's timing has a core of its own


def cores_to_spare() -> bool:
    """Whether the candidate's worker may start while the reference is timed (the first evaluation on a
    host: 4.8 s of worker start after 20 s of truth and reference on the H200, 2026-12-01)."""
    try:
        return len(os.sched_getaffinity(0)) >= SPARE_CORES
    except AttributeError:  # not Linux
        return (os.cpu_count() or 1) >= SPARE_CORES


def workers_ahead(kind: str, running: int) -> int:
    """How many workers an evaluation starting now asks the zygote to hold made or being made: its own and,
    for a CUDA evaluation on a host with cores to spare, one for the evaluation after it and one for each
    other evaluation in flight. A CUDA worker's start (context, cuBLAS, the profiler: ~4 s on the H200) then
    runs beside this evaluation instead of after it: back to back, each evaluation waited 4.7 s for it (H200,
    2026-12-02). A CUDA timing reads the device's clock, which another process's start does not move (its two
    warm-up kernels are microseconds); a CPU timing reads the host's, so a CPU worker is made only after.
    The others in flight are as many as a GPU takes (`evaluations_per_gpu`) less this one: when they were
    capped at two, 11 of 16 evaluations at four trajectories waited 0.6-6.2 s to start a worker (H100, 4fc9179)."""
    if kind != "cuda" or not cores_to_spare():
        return 1
    return min(2 + min(running, evaluations_per_gpu() - 1), MAX_PREPARED)


def prepare_ahead(problem: Problem, *, gpu: int | None = None, pool: WarmPool | None = None) -> bool:
    """Start making `problem`'s next evaluation in the background, as every evaluation does for the one
    after it: its worker, its data and truth and, where this host has no reference medians yet, those
    (used only where the host was quiet). A run calls this as it starts, so that its first benchmark finds
    them made while the model wrote the kernel
    (H200 gate, 2026-12-01: a run's first benchmark waited 5.7 s for its compile's zygote, then 12.7 s for
    its truth). `gpu`, `pool`: as for `benchmark`. False where warm workers are off: nothing is made ahead
    there."""
    ev = pool if pool is not None else pool_for(gpu, timing_threads(problem))
    if ev is None:
        return False
    prefetch(problem, collect_env(problem), ev, first=True)
    return True


# --- what the model reads back ---------------------------------------------------------------------------


class BestSoFar(Protocol):
    """The run's best kernel as the model is told it (the agent's `TimedKernel` is one)."""

    @property
    def turn(self) -> int: ...
    @property
    def kernel_path(self) -> str: ...
    @property
    def speedup(self) -> float: ...
    @property
    def median_ms(self) -> float: ...
    @property
    def rse(self) -> float: ...


def _stats(s: TimingStats | None) -> str:
    return f"{s.median_ms:.3f} ms ± {s.rse * 100:.1f}%" if s else "n/a"


def host_note(s: TimingStats | None) -> str:
    """Where the host, not the device, set a CUDA candidate's figure: most calls took longer to issue than
    their kernels ran (tools/worker/hold.py); or where the hold left much of the host's path on the clock."""
    if s is None or s.clock != "cuda_event" or s.launch_median_ms is None or s.event_median_ms is None:
        return ""
    if s.host_bound_calls and 2 * s.host_bound_calls >= s.n:
        return (
            f" [host-bound: issuing a call took {s.launch_median_ms:.3f} ms, its device work "
            f"{s.event_median_ms:.3f} ms; the figure is the host's]"
        )
    exposed = s.exposed_launch_median_ms or 0.0
    if exposed > 0.1 * s.median_ms:
        return f" [{exposed:.3f} ms of the host's path to the launches inside the clock]"
    return ""


def _interval_text(t: ShapeTiming) -> str:
    if t.speedup is None or t.speedup_interval is None:
        return ""
    low, high = t.speedup_interval
    wide = ": too wide to rank against a kernel inside it" if too_wide(t.speedup_interval) else ""
    eager_ref = t.launch_free is None or t.launch_free.mode == "eager"
    if wide and eager_ref and t.reference is not None and t.reference.windows:  # the width is the reference's
        wide = ": the reference's windows on this host vary this much; rank kernels by their own times"
    return f" (95% {low:.2f}–{high:.2f}×{wide})"


def _timing_line(t: ShapeTiming) -> str:
    """One shape: yours, the launch-free reference and the headline speedup, the eager one, the floor."""
    speed = f"{t.speedup:.2f}×" if t.speedup is not None else "no speedup"
    speed += _interval_text(t)
    lf = t.launch_free
    if lf is not None and lf.mode == "graph":
        eager = f"{t.eager_speedup:.2f}×" if t.eager_speedup is not None else "n/a"
        against = f"reference replayed from a CUDA graph {_stats(lf.stats)} -> {speed}; eager reference {_stats(t.reference)} -> {eager}"
    else:
        against = f"reference {_stats(t.reference)} (eager) -> {speed}"
    note = f" ({t.message})" if t.message else ""
    floor = f"; {floor_text(t)}" if floor_text(t) else ""
    yours = f"{_stats(t.candidate)}{host_note(t.candidate)}"
    return f"  {t.name}{' [primary]' if t.primary else ''}: yours {yours} vs {against}{floor}{note}"


def figures_line(f: Figures) -> str:
    """Which figure is which, in a line: the headline first (what ranks kernels), then the others."""
    head = (
        "% of floor (the floor's ms / your median; 100% = at the speed-of-light floor)"
        if f.metric == "floor_fraction"
        else "speedup (launch-free ref)"
    )
    ref = (
        "the reference replayed from a CUDA graph (no launch overhead)"
        if f.reference_mode != "eager"
        else f"the reference run eagerly ({f.reference_note or 'no graph'})"
    )
    floor = "" if f.floor_status == "derived" else f"; {f.floor_note}"
    return (
        f"Figures: the headline, which ranks kernels, is {head}, {f.overall}; speedup (launch-free ref) divides "
        f"{ref}; eager speedup divides PyTorch's eager reference (launch-bound, secondary){floor}."
    )


def _case_line(c: CaseResult) -> str:
    errs = []
    if c.max_abs_err is not None:
        errs.append(f"max_abs_err {c.max_abs_err:.3g}")
    if c.rel_l2_err is not None:
        errs.append(f"rel_l2 {c.rel_l2_err:.3g}")
    if c.worst_index is not None:
        errs.append(f"worst at {c.worst_index}: got {c.worst_value!r}, expected {c.worst_expected!r}")
    if c.mismatched is not None and c.numel:
        errs.append(f"{c.mismatched}/{c.numel} elements out of tolerance")
    detail = "; ".join(errs)
    msg = c.message.strip()
    return (
        f"  {c.name} {c.status.upper()} ({', '.join(f'{k}={v}' for k, v in c.sizes.items())}): "
        + "; ".join(x for x in (msg, detail) if x)
    )


def _best_line(best: BestSoFar | None, improved: bool) -> str:
    if best is None:
        return "Best so far: none correct yet."
    mark = " (this kernel: new best)" if improved else ""
    metric = getattr(best, "headline_metric", None)
    value = getattr(best, "headline", None)
    share = f"{format_metric(metric, value)} of floor, " if metric == "floor_fraction" else ""
    return f"Best so far: {share}{best.speedup:.2f}× at {best.median_ms:.3f} ms ± {best.rse * 100:.1f}% ({best.kernel_path}, turn {best.turn}){mark}."


def sanitizer_text(report: SanitizerReport) -> str:
    """The sanitizer's verdict in one line: status, why, which tools at which case, seconds of its budget."""
    tools = ", ".join(r.tool for r in report.runs) or "no tool"
    where = f"{tools} at case {report.case}" if report.case else tools
    spent = f"; {report.seconds:.0f} s of a {report.budget_s:.0f} s budget" if report.budget_s else ""
    reused = "; reused: same kernel as before" if report.cached else ""
    return f"sanitizer {report.status}: {report.message} ({where}{spent}{reused})"


def sanitizer_run_text(run: SanitizerRun) -> str:
    count = f", {run.errors} errors" if run.errors else ""
    why = f": {run.message}" if run.message else ""
    return f"{run.tool}: {run.status}{count} ({run.seconds:.0f} s of {run.budget_s:.0f} s){why}"


def headline(result: BenchResult) -> str:
    """The first line of the text: status and the one number that matters; it has to stand alone (older
    results are cut down to it when the context is bounded)."""
    first = result.message.strip().splitlines()[0] if result.message.strip() else ""
    if result.correct and result.speedup is not None:
        f = result.figures or figures_of(result)
        eager = f", eager speedup {f.eager_speedup:.2f}×" if f.eager_speedup is not None else ""
        if f.metric == "floor_fraction" and f.value is not None:
            return (
                f"benchmark CORRECT: {f.value * 100:.0f}% of the speed-of-light floor (the headline); "
                f"speedup (launch-free ref) {result.speedup:.2f}×{eager}."
            )
        return f"benchmark CORRECT: speedup (launch-free ref) {result.speedup:.2f}× (the headline){eager}."
    if result.status == "suspect":
        why = next(
            (f.message for f in result.flag_details if f.name in ("timing_mismatch", "faster_than_floor")),
            result.message,
        )
        return f"benchmark SUSPECT: outputs correct, timing not trusted (no speedup counted): {why}"
    if result.status == "incorrect":
        failed = [c.name for c in result.cases if c.status in ("failed", "error")]
        what = f"{len(failed)} of {len(result.cases)} cases failed" if failed else "disqualified"
        return f"benchmark INCORRECT: {what}. {first}".strip()
    return f"benchmark FAILED ({result.status}): {first}"


def text(result: BenchResult, best: BestSoFar | None, improved: bool) -> str:
    """The tool result the model reads: the headline, what failed, the flags, the timings and the best so
    far (`improved`: this kernel is the new best)."""
    lines = [headline(result)]
    if result.compile is not None and not result.compile.ok:
        lines += compile_text(result.compile).splitlines()[1:]
    bad = [c for c in result.cases if c.status in ("failed", "error")]
    if bad:
        lines.append("Failing cases:")
        lines += [_case_line(c) for c in bad]
    passed = [c.name for c in result.cases if c.status == "passed"]
    if passed and bad:
        lines.append(f"Passed: {', '.join(passed)}")
    for flag in result.flag_details:
        lines.append(f"  flag {flag.name}{' (disqualifying)' if flag.disqualifying else ''}: {flag.message}")
    if result.sanitizer is not None:
        said = sanitizer_text(result.sanitizer)
        lines.append(said[0].upper() + said[1:])
    if result.timings:
        lines.append("Timings (median ± relative standard error):")
        lines += [_timing_line(t) for t in result.timings]
        if any(t.candidate is not None for t in result.timings):
            lines.append(figures_line(result.figures or figures_of(result)))
    if not result.correct and result.status not in ("ok", "incorrect") and result.output and not bad:
        lines.append(head_tail(result.output))
    elif result.status not in ("ok", "incorrect") and result.message.strip().count("\n"):
        lines.append(head_tail(result.message))
    lines += [f"Note: {notice}" for notice in result.notices]
    lines.append(_best_line(best, improved))
    return "\n".join(lines)
