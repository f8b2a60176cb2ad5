"""Where an evaluation's seconds go, from the times the parent saw each worker message arrive.

The names, in order (seconds on the evaluation's critical path; they add up to `BenchResult.seconds`
up to `other`):
  setup             environment facts, static checks, job folder, plan
  truth_wait        warm: waiting for truth prepared ahead of time (0 when it was ready)
  truth_start       truth worker: process start and imports (cold), or request latency (warm)
  truth_cases       inputs, weights and float64 truth of the correctness cases
  truth_timing      the same for the timing shapes' input sets, and the fp32 reference's own error
  reference_timing  timing the reference (0 when its time is cached)
  truth_exit        truth worker shutdown, parent reading the truth into memory
  candidate_start   candidate worker: process start and imports (cold) or fork (warm)
  cuda_init         CUDA context creation in the candidate worker
  compile_import    importing the candidate (its load_inline builds, a cache hit when compiled before)
  cases             running and judging the correctness cases
  timing            timing every shape, re-check outputs written, profiling
  candidate_exit    worker exit, sweep of leftover processes
  judge             the parent's re-check of timed outputs and its verdict
  remeasure         the shapes whose clocks disagreed, timed again in a fresh worker (rare)
  reference_check   the reference timed again briefly, to check its cached median (tools/judge/_paired.py)
  other             the remainder
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tools import wire
from tools.supervise import ChildOutcome


def _last(outcome: ChildOutcome, events: Iterable[str]) -> float | None:
    wanted = set(events)
    times = [t for e, t in outcome.arrivals if e in wanted]
    return times[-1] if times else None


def truth_phases(outcome: ChildOutcome) -> dict[str, float]:
    ready = outcome.at("ready") or 0.0
    cases_end = _last(outcome, ["case_ready"]) or ready
    done = outcome.at("done")
    ref = sum(m.reference_seconds for m in outcome.all(wire.TimingReady))
    end = done if done is not None else outcome.seconds
    return {
        "truth_start": ready,
        "truth_cases": max(0.0, cases_end - ready),
        "truth_timing": max(0.0, end - cases_end - ref),
        "reference_timing": ref,
        "truth_exit": max(0.0, outcome.seconds - end),
    }


def candidate_phases(outcome: ChildOutcome) -> dict[str, float]:
    ready = outcome.at("ready")
    if ready is None:
        return {"candidate_start": outcome.seconds}
    cuda = outcome.at("cuda_ready")
    imported = outcome.at("imported") or outcome.at("import_failed")
    cases_done = outcome.at("cases_done")
    end = outcome.at("done") or _last(outcome, ["timing_done", "failed", "cases_done", "imported"]) or ready
    return {
        "candidate_start": ready,
        "cuda_init": (cuda - ready) if cuda is not None else 0.0,
        "compile_import": max(0.0, (imported or end) - (cuda if cuda is not None else ready)),
        "cases": max(0.0, (cases_done or end) - (imported or end)),
        "timing": max(0.0, end - cases_done) if cases_done is not None else 0.0,
        "candidate_exit": max(0.0, outcome.seconds - end),
    }


def finish(phases: dict[str, Any], total: float) -> dict[str, float]:
    """Rounded, with the remainder named `other`."""
    out = {k: round(float(v), 4) for k, v in phases.items()}
    out["other"] = round(max(0.0, total - sum(out.values())), 4)
    return out
