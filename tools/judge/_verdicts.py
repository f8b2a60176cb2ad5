"""What the judge decides while a candidate runs and after: each case against the float64 truth, the
runtime guard's flags, the re-check of timed outputs, the clocks, library usage, and the overall status."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from tools import orders, wire
from tools.cache.reference_times import ReferenceTimes
from tools.compare import compare, compare_calls, constant_passes
from tools.judge._calls import CallSchedule
from tools.judge._device_guards import device_disagreement, l2_notes
from tools.judge._kept import Rechecker, Rechecks
from tools.judge._plan import Plan, PlannedShape
from tools.judge._ratio import speedup_interval
from tools.judge._static_checks import RULES
from tools.judge._turns import CandidateTurns
from tools.problem import Problem, TimingShape
from tools.results import (
    NOT_APPLICABLE,
    BenchResult,
    CaseResult,
    Flag,
    KernelUsage,
    ShapeTiming,
    TimingStats,
)
from tools.supervise import ChildOutcome, describe_exit
from tools.worker import guard
from tools.worker.outputs import read_kept

FAILURE_STATUS = {"oom": "oom", "cuda_error": "runtime_error", "exception": "runtime_error"}


@dataclass
class Verdicts:
    """What the parent decided while the candidate ran (cases are judged before timing is allowed)."""

    problem: Problem
    plan: Plan
    truths: dict[str, Any] = field(default_factory=dict)
    cases: dict[str, CaseResult] = field(default_factory=dict)
    flags: dict[str, Flag] = field(default_factory=dict)
    failures: dict[str, wire.Failed] = field(default_factory=dict)  # "kind:name" -> the worker's report
    started: list[tuple[str, str]] = field(default_factory=list)
    batch_clock: dict[str, dict[str, float]] = field(default_factory=dict)  # shape -> begin/end, our clock
    disagreements: dict[str, str] = field(default_factory=dict)  # shape -> why its clocks disagree
    calls: dict[str, CallSchedule] = field(default_factory=dict)  # shape -> its timing loop's offsets
    not_applicable: set[str] = field(default_factory=set)  # added cases the reference is not finite on
    rechecker: Rechecker | None = None  # where the truth server kept the timing shapes' truth
    turns: CandidateTurns | None = None  # its turns on the device, where the evaluation takes them

    def flag(self, name: str, message: str, disqualifying: bool = True) -> None:
        self.flags.setdefault(name, Flag(name=name, message=message, disqualifying=disqualifying))

    def handle(self, msg: wire.WorkerMessage) -> str | None:
        """Each message as it arrives (the reader thread); a string returned is the answer on stdin, given
        once `turns` holds the device as the message asks (a loop's clock stamped before any wait)."""
        first_call = isinstance(msg, wire.NextCall) and msg.name not in self.calls
        answer: str | None = None
        match msg:
            case wire.Start():
                self.started.append((msg.kind, msg.name))
            case wire.CaseDone():
                self._judge_case(msg)
            case wire.Failed():
                self.failures[f"{msg.kind}:{msg.name}"] = msg
            case wire.DeviceWanted():
                answer = "granted"
            case wire.BatchBegin() | wire.BatchEnd():
                edge = "begin" if isinstance(msg, wire.BatchBegin) else "end"
                self.batch_clock.setdefault(msg.name, {})[edge] = time.monotonic()
            case wire.CasesDone():
                answer = "time" if self.all_cases_pass() else "stop"
            case wire.NextCall():
                answer = self.schedule(msg.name).answer(msg.index, msg.wants_stop)
            case wire.Violation():
                self._violation(msg)
        if self.turns is not None:
            self.turns.on(msg, first_call)
        return answer

    def schedule(self, name: str) -> CallSchedule:
        """The shape's call schedule, made when its loop first asks (a re-measurement gets a new one)."""
        if name not in self.calls:
            item = next(t for t in self.plan.timing if t.name == name)
            self.calls[name] = CallSchedule(list(item.truth.truth_offsets), item.cfg.min_iters, item.shifted)
        return self.calls[name]

    def _violation(self, msg: wire.Violation) -> None:
        """The runtime guard's report; only the flag names the guard can give are accepted from the child."""
        if msg.flag in guard.FLAG_FOR.values():
            self.flag(msg.flag, f"{RULES[msg.flag].explanation} (seen at run time: {msg.detail[:200]})")

    def _judge_case(self, msg: wire.CaseDone) -> None:
        item = next((c for c in self.plan.cases if c.name == msg.name), None)
        if item is None:
            return
        self.note_guards(msg)
        try:
            out = torch.load(item.out_path, weights_only=True)
            truth = self.truths[item.name]
        except Exception as exc:
            self.cases[item.name] = CaseResult(
                name=item.name, status="error", message=f"unreadable output: {exc}"
            )
            return
        if not isinstance(out, torch.Tensor):
            self.cases[item.name] = CaseResult(
                name=item.name, status="error", message="output is not a tensor"
            )
            return
        if item.derived and not bool(torch.isfinite(truth).all()):
            self.not_applicable.add(item.name)
            self.cases[item.name] = CaseResult(
                name=item.name, status="skipped", sizes=item.sizes,
                message=f"{NOT_APPLICABLE}: the reference's output is not finite on these inputs",
            )  # fmt: skip
            return
        result = compare(item.name, out, truth, self.problem.spec.tolerance, item.sizes, item.ref_error)
        result.seconds = msg.seconds
        self.cases[item.name] = result

    def note_guards(self, msg: wire.CaseDone | wire.TimingDone) -> None:
        if msg.mutated:
            self.flag(
                "input_mutation", "forward modified its input tensors; inputs must be left as they were"
            )
        if msg.timers:
            self.flag(
                "timer_tampering",
                f"timing functions were replaced ({', '.join(msg.timers)}); do not patch timers",
            )

    def parent_batch_ms(self, name: str) -> float | None:
        edges = self.batch_clock.get(name, {})
        if "begin" not in edges or "end" not in edges:
            return None
        return (edges["end"] - edges["begin"]) * 1e3

    def all_cases_pass(self) -> bool:
        passed = all(
            self.cases.get(c.name)
            and (self.cases[c.name].status == "passed" or c.name in self.not_applicable)
            for c in self.plan.cases
        )
        return passed and not any(f.disqualifying for f in self.flags.values())


def where_it_stopped(verdicts: Verdicts, outcome: ChildOutcome) -> str:
    last = verdicts.started[-1] if verdicts.started else None
    where = f" during {last[0]} {last[1]}" if last else ""
    return f"{describe_exit(outcome)}{where}"


def case_results(verdicts: Verdicts, outcome: ChildOutcome) -> list[CaseResult]:
    results: list[CaseResult] = []
    died = False
    for item in verdicts.plan.cases:
        name = item.name
        if name in verdicts.cases:
            results.append(verdicts.cases[name])
        elif (fail := verdicts.failures.get(f"case:{name}")) is not None:
            results.append(
                CaseResult(name=name, status="error", message=f"{fail.error}: {fail.message}", sizes=item.sizes)
            )  # fmt: skip
        elif not died and ("case", name) in verdicts.started:
            died = True
            stopped = where_it_stopped(verdicts, outcome)
            results.append(CaseResult(name=name, status="error", message=stopped, sizes=item.sizes))
        else:
            results.append(CaseResult(name=name, status="skipped", message="not run", sizes=item.sizes))
    return results


def timing_results(
    verdicts: Verdicts,
    outcome: ChildOutcome,
    problem: Problem,
    refs: ReferenceTimes,
    ref_msgs: dict[str, TimingStats | None],
    only: set[str] | None = None,
) -> tuple[list[ShapeTiming], KernelUsage | None]:
    """Each shape's timing and its checked calls' verdict; `TruthLost` (tools/judge/_kept.py) where the truth
    server that kept a shape's truth could not judge them (a harness failure, not the candidate's)."""
    done = {m.name: m for m in outcome.all(wire.TimingDone)}
    remote: Rechecks = {}
    if verdicts.rechecker is not None:
        asked = [t for t in verdicts.plan.timing if t.name in done and (only is None or t.name in only)]
        if asked:
            remote = verdicts.rechecker([recheck_order(verdicts, t) for t in asked])
    shapes: list[ShapeTiming] = []
    usage: KernelUsage | None = None
    for item, shape in zip(verdicts.plan.timing, problem.spec.timing, strict=True):
        if only is not None and shape.name not in only:
            continue
        cached = refs.get(shape)
        fresh = ref_msgs.get(shape.name)
        if fresh is not None:
            refs.put(shape, fresh)
            if shape is problem.primary and only is None:  # a shape timed again adds no window
                refs.add_window(shape, fresh)
        reference = fresh or cached
        st = ShapeTiming(
            name=shape.name, primary=shape is problem.primary, sizes=item.sizes, reference=reference,
            reference_cached=fresh is None and cached is not None,
        )  # fmt: skip
        msg = done.get(shape.name)
        if msg is None:
            fail = verdicts.failures.get(f"timing:{shape.name}")
            st.message = f"{fail.error}: {fail.message}" if fail else "not timed"
            shapes.append(st)
            continue
        st.candidate = msg.stats.model_copy(update={"parent_batch_ms": verdicts.parent_batch_ms(shape.name)})
        st.rechecked = recheck(verdicts, item, problem, remote)
        if msg.repeated and item.truth_varies:
            verdicts.flag(
                "timed_output_mismatch",
                f"{shape.name}: {msg.repeated} of {msg.checked} timed calls returned an output an earlier call "
                "had returned, although every call's inputs were new: results cached and handed back",
            )
        if msg.nonfinite and item.truth_finite:
            verdicts.flag(
                "timed_output_mismatch",
                f"{shape.name}: {msg.nonfinite} of {msg.checked} timed calls returned NaN or inf where the "
                "truth is finite: output left unwritten or work skipped while timed",
            )
        verdicts.note_guards(msg)
        timing_guards(verdicts, shape, st)
        usage = msg.usage or usage
        if st.candidate and reference:  # the headline's, vs the launch-free reference: tools/figures.py
            st.eager_speedup = reference.median_ms / st.candidate.median_ms
            st.eager_interval = speedup_interval(reference, st.candidate)
        shapes.append(st)
    return shapes, usage


def busy_note(name: str, who: str, stats: TimingStats) -> str | None:
    """The note for a loop that ran while other processes kept the host busy, or None."""
    if not stats.host_was_busy:
        return None
    return (
        f"{name}: other processes kept {stats.busy_elsewhere:.0%} of the host's CPUs busy while the {who} was "
        "timed: its time, and the speedup, may not be what a quiet machine gives"
    )


def load_notices(timings: list[ShapeTiming]) -> list[str]:
    """Where other processes kept the host busy while a loop ran: that time, and the speedup, are a loaded
    machine's (the CPU demo beside a busy process: 2.1x, where the same kernel benched 3.8-4.0x quiet). A
    cached reference median was timed some other time."""
    loops = [(t.name, "candidate", t.candidate) for t in timings]
    loops += [(t.name, "reference", t.reference) for t in timings if not t.reference_cached]
    notes = [busy_note(name, who, stats) for name, who, stats in loops if stats is not None]
    return [n for n in notes if n is not None] + l2_notes(timings)


def recheck_order(verdicts: Verdicts, item: PlannedShape) -> orders.RecheckShape:
    schedule = verdicts.calls.get(item.name)
    return orders.RecheckShape(
        name=item.name, out_path=item.out_path, kept=schedule.kept if schedule is not None else {},
        sizes=item.sizes, ref_errors=[*item.ref_errors],
    )  # fmt: skip


def recheck(verdicts: Verdicts, item: PlannedShape, problem: Problem, remote: Rechecks) -> list[CaseResult]:
    """The checked calls' outputs against the float64 truth for their inputs (tools/judge/_calls.py): here,
    where the truth came to this process, else as the truth server judged them where it kept the truth."""
    name = item.name
    if name in remote:
        results = remote[name]
    else:
        order = recheck_order(verdicts, item)
        try:
            truths = verdicts.truths[name]
            outs = read_kept(item.out_path, str(truths[0].device) if truths else "cpu")
        except Exception as exc:
            return [CaseResult(name=f"{name}/timed", status="error", message=f"unreadable outputs: {exc}")]
        tol = problem.spec.tolerance
        results = compare_calls(name, outs, truths, order.kept, tol, item.sizes, order.ref_errors)
    if not results or any(r.status != "passed" for r in results):
        bad = next((r for r in results if r.status != "passed"), None)
        detail = f" ({bad.name}: {bad.message})" if bad else " (no checked call was made)"
        verdicts.flag(
            "timed_output_mismatch",
            "outputs of timed calls did not match the truth for their inputs: work skipped, cached or deferred "
            f"while timed{detail}",
        )
    return results


def timing_guards(verdicts: Verdicts, shape: TimingShape, st: ShapeTiming) -> None:
    cand = st.candidate
    if cand is None:
        return
    # A median below the floor (the spec's `floor_ms`, or the one derived from its `floor`) is judged once the
    # floor is known, after the verdict: tools/figures.py, `faster_than_floor`.
    if why := clock_disagreement(shape.name, cand) or device_disagreement(shape.name, cand):
        verdicts.disagreements[shape.name] = why


# The parent's stamps of the timed loop carry a pipe hop and a thread wake-up each (well under a millisecond
# on a quiet host; a few GIL switch intervals on a busy one): allow for those before calling a disagreement
# a faked clock. The slack must stay small next to a real timed loop (~100 ms on the H200's scan), or a
# 10x-slow clock would hide inside it.
PARENT_CLOCK_RATIO = 1.5
PARENT_CLOCK_SLACK_MS = 25.0
# Work the CUDA events did not bracket (tools/worker/timing.py, `escaped`): an honest call leaves ~5 us on the H200,
# loaded host or not (bench/results/h200/); an unjoined side stream leaves its whole kernel time.
ESCAPED_RATIO = 0.25
ESCAPED_SLACK_MS = 0.05


def clock_disagreement(name: str, cand: TimingStats) -> str | None:
    """Why this shape's clocks disagree, or None. Two comparisons, each of like with like:
    - the timing process's clock against the evaluator's own over the same timed loop (a clock faked
      inside that process, by any route, makes its loop look shorter than the wall time we saw);
    - CUDA events against the host clock over what the events cannot see: the time from the end event's
      completion to the end of a device-wide synchronize, less an idle synchronize's cost (work that
      escaped the timed stream: a side stream not joined back, or background threads)."""
    if cand.parent_batch_ms is None or cand.batch_ms is None:
        return f"{name}: the timed loop was not bracketed for the evaluator's own clock"
    if cand.parent_batch_ms > PARENT_CLOCK_RATIO * cand.batch_ms + PARENT_CLOCK_SLACK_MS:
        return (
            f"{name}: the timed loop took {cand.parent_batch_ms:.1f} ms by the evaluator's clock but "
            f"{cand.batch_ms:.1f} ms by the clock in the candidate's process: that clock was faked"
        )
    escaped = cand.escaped_median_ms
    if cand.clock == "cuda_event" and escaped is not None:
        if escaped > ESCAPED_RATIO * cand.median_ms + ESCAPED_SLACK_MS:
            return (
                f"{name}: device work went on for {escaped:.3f} ms (median) after the timed stream's end event, "
                f"against {cand.median_ms:.3f} ms between the CUDA events: work escaped the timed stream (a side "
                "stream not joined back to the current stream, or background threads); join every stream you "
                "launch on before forward returns"
            )
    return None


# What a profiled call's shares are of: device time on a GPU, own-plus-library CPU time on the CPU.
PROFILED = {"cuda_profiler": "device time", "cpu_profiler": "CPU time"}


def usage_guards(verdicts: Verdicts, problem: Problem, usage: KernelUsage | None) -> None:
    policy = problem.spec.library_policy
    if usage is None:
        return
    if policy.own_kernel_required and not usage.own_calls_per_forward:
        verdicts.flag(
            "no_custom_kernel",
            "no kernel of your own extension ran during forward; the computation must use your kernel",
        )
    disallowed = {k: v for k, v in usage.library_share.items() if k not in policy.allowed_library}
    share = sum(disallowed.values())
    if usage.method in PROFILED and share > policy.max_other_library_share:
        kinds = ", ".join(f"{k} {v:.0%}" for k, v in sorted(disallowed.items(), key=lambda kv: -kv[1]))
        verdicts.flag(
            "library_policy",
            f"{share:.0%} of {PROFILED[usage.method]} is in library {'kernels' if usage.method == 'cuda_profiler' else 'calls'} "
            f"outside the allowed ({kinds}); policy: {policy.summary.strip()}",
        )


def cases_line(cases: list[CaseResult]) -> str:
    """How the correctness cases went. A case the candidate never reached (a timeout or crash stopped it
    first) is counted as not run, never as failed; an input variant the reference is not finite on is not
    applicable and counted apart."""
    moot = [c for c in cases if c.message.startswith(NOT_APPLICABLE)]
    cases = [c for c in cases if c not in moot]
    failing = [c for c in cases if c.status in ("failed", "error")]
    skipped = sum(c.status == "skipped" for c in cases)
    not_run = f", {skipped} not run" if skipped else ""
    if moot:
        not_run += f" ({len(moot)} not applicable)"
    if failing:
        first = failing[0]
        return f"{len(failing)} of {len(cases)} cases failed{not_run}; first: {first.name}: {first.message}"
    if skipped:
        return f"{skipped} of {len(cases)} cases not run{not_run[len(f', {skipped} not run') :]}"
    return f"all {len(cases)} correctness cases passed{f' ({len(moot)} not applicable)' if moot else ''}"


def summary(result: BenchResult, problem: Problem) -> str:
    parts = [cases_line(result.cases)]
    for f in result.flag_details:
        parts.append(f"flag {f.name}: {f.message}")
    prim = result.primary_timing
    if prim and prim.candidate and prim.reference:
        parts.append(
            f"{prim.name}: {prim.candidate.median_ms:.4g} ms (RSE {prim.candidate.rse:.1%}) vs eager reference "
            f"{prim.reference.median_ms:.4g} ms → eager speedup {prim.reference.median_ms / prim.candidate.median_ms:.2f}×"
        )
    return "; ".join(parts)


def overall_status(
    cases: list[CaseResult], timings: list[ShapeTiming], verdicts: Verdicts, outcome: ChildOutcome
) -> str:
    if outcome.timed_out:
        return "timeout"
    for fail in verdicts.failures.values():
        if fail.error in FAILURE_STATUS:
            return FAILURE_STATUS[fail.error]
    if outcome.returncode != 0:
        return "crashed"
    clean = not any(f.disqualifying for f in verdicts.flags.values())
    timed = all(t.candidate is not None for t in timings)
    if clean and timed and all(c.status == "passed" or c.name in verdicts.not_applicable for c in cases):
        return "ok"
    return "incorrect"


def failure_lead(status: str, outcome: ChildOutcome, verdicts: Verdicts) -> str:
    if status in ("timeout", "crashed"):
        return f"{status}: {where_it_stopped(verdicts, outcome)}; "
    if status in ("oom", "runtime_error"):
        fail = next(iter(verdicts.failures.values()), None)
        if fail:
            return f"{status} in {fail.kind} {fail.name}: {fail.message[-600:]}; "
    return ""


def checks_a_constant_passes(verdicts: Verdicts) -> tuple[list[str], int]:
    """The correctness cases and timing shapes whose truth a constant output would pass, and how many
    checks there are: where every one would, no verdict of this evaluation can be `correct`."""
    passing, total = [], 0
    for item in verdicts.plan.cases:
        truth = verdicts.truths.get(item.name)
        if isinstance(truth, torch.Tensor) and item.name not in verdicts.not_applicable:
            total += 1
            if constant_passes(truth, verdicts.problem.spec.tolerance, item.ref_error):
                passing.append(item.name)
    for shape in verdicts.plan.timing:
        if shape.ref_errors:  # its truth was made (the facts came with it)
            total += 1
            if shape.constant_passes:
                passing.append(shape.name)
    return passing, total
