"""`sanitize(problem, kernel_code)`: the candidate at its problem's smallest correctness case under a sanitizer,
each finding a flag (`with_sanitizer` folds the report into a benchmark's result).

- CUDA problems: NVIDIA compute-sanitizer, one run per tool (memcheck, racecheck, initcheck; synccheck on
  request). The candidate worker runs as compute-sanitizer's child inside the usual containment (a cold
  worker: `tools.supervise.run_candidate(wrapper=...)`), with `--error-exitcode` and `--log-file` in a
  folder the candidate's guard refuses to read. A finding needs the tool's own word: its exit code or its
  log's `ERROR SUMMARY`; the candidate's output is never read for it.
- CPU problems: the candidate's C++ built with ASan and UBSan (`tools.worker.instrument.ASAN_CFLAGS`, a cache key
  of its own) and run with the ASan runtime preloaded into the worker (a Python host is not instrumented, so
  the runtime must come first); the build's own processes run without it.

Each tool has a budget (its import and the build included): running out is `timeout`, data. Where no
sanitizer can run here the report says `unavailable` and why; that is established by a trusted probe (the
tool on a one-line torch program, once per process), never by what a candidate's run printed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import secrets
import time
from pathlib import Path
from typing import Any

from tools import orders, wire
from tools.cache.reference_times import ReferenceTimes
from tools.envinfo import collect_env
from tools.host import timing_threads
from tools.judge._plan import Plan, run_truth, truth_servers
from tools.judge._sanitizer_output import Findings, NativeFindings, parse_compute_sanitizer, parse_native
from tools.judge._sanitizer_tools import (
    FOUND_EXIT,
    LOG_BYTES,
    NO_CACHING,
    NO_PADDING,
    _asan_env,
    _env_binary,
    _help,
    asan_runtime,
    availability,
    compute_sanitizer,
    default_budget,
    default_tools,
    sanitizer_command,
)
from tools.problem import Problem
from tools.results import (
    BenchResult,
    Flag,
    SanitizerReport,
    SanitizerRun,
)
from tools.supervise import (
    ChildOutcome,
    Deadline,
    DeviceTurns,
    Job,
    WarmPool,
    describe_exit,
    idle_mode,
    pool_for,
    run_candidate,
    visible_gpu,
)
from tools.worker.instrument import SANITIZE_BUILD_ENV, kernel_names


def _read_logs(logs: Path, prefix: str) -> str:
    """The tool's log files (bounded): what it wrote, whoever wrote it; exit codes decide too."""
    parts = []
    for path in sorted(logs.glob(f"{prefix}*")):
        with contextlib.suppress(OSError), path.open("rb") as fh:
            parts.append(fh.read(LOG_BYTES).decode(errors="replace"))
    return "\n".join(parts)


def _limited(problem: Problem, budget_s: float) -> Problem:
    """The problem with its import and evaluation bounds set to one tool's budget."""
    limits = problem.spec.limits.model_copy(
        update={"compile_timeout_s": budget_s, "eval_timeout_s": budget_s, "call_timeout_min_s": budget_s}
    )
    return problem.model_copy(update={"spec": problem.spec.model_copy(update={"limits": limits})})


def _stop_after_cases(msg: wire.WorkerMessage) -> str | None:
    return "stop" if isinstance(msg, wire.CasesDone) else None


def _where_it_ended(outcome: ChildOutcome) -> str:
    failed = outcome.first(wire.Failed)
    if failed is not None:
        return f"{failed.error} in case {failed.name}: {failed.message[-300:]}"
    tail = " | ".join(line.strip() for line in outcome.output.strip().splitlines()[-3:])
    return f"{describe_exit(outcome)}{f'; {tail}' if tail else ''}"[:500]


# Library kernels (cuBLAS, torch's own) can trip these honestly: their findings count only where one names
# a kernel of the candidate's own source. Every memcheck finding counts (a library kernel that reads out of
# bounds was handed a bad pointer or size).
ATTRIBUTED = ("racecheck", "initcheck")


def is_own(kernel: str, own: frozenset[str]) -> bool:
    """Whether a finding's kernel (qualified, templated) is one the candidate's source defines."""
    return any(word in own for word in re.findall(r"\w+", kernel))


def judge_cuda_run(
    tool: str, outcome: ChildOutcome, log_text: str, budget_s: float, own: frozenset[str] = frozenset()
) -> SanitizerRun:
    """One compute-sanitizer run's verdict: its exit code and its log, never the candidate's output.
    `own`: the candidate's kernel names (`__global__` functions in its source)."""
    found = parse_compute_sanitizer(log_text)
    base: dict[str, Any] = {"tool": tool, "flag": f"sanitizer_{tool}", "seconds": outcome.seconds}
    base["budget_s"] = budget_s
    if (found.errors or 0) > 0 and tool in ATTRIBUTED and own and found.shown:
        mine = tuple(f for f in found.shown if is_own(f.kernel, own))
        if not mine:  # every finding it showed is in library code: said, not flagged
            names = ", ".join(sorted({f.kernel or "a CUDA API call" for f in found.shown}))[:300]
            why = f"{found.errors} findings, all in kernels not of the candidate's source ({names}): not flagged"
            return SanitizerRun(status="clean", errors=found.errors, message=why, **base)
        found = dataclasses.replace(found, shown=mine)
    if (found.errors or 0) > 0 or outcome.returncode == FOUND_EXIT:
        return _errors_run(base, found)
    if outcome.timed_out:
        why = f"compute-sanitizer {tool} did not finish: {outcome.timeout_reason or describe_exit(outcome)}"
        return SanitizerRun(status="timeout", message=why, errors=found.errors, **base)
    if found.tool_failure or outcome.first(wire.NoDevice) is not None:
        why = found.tool_failure or "the worker under the tool saw no CUDA device"
        return SanitizerRun(status="unavailable", message=f"compute-sanitizer could not run: {why}", **base)
    if found.errors is None or outcome.returncode != 0 or outcome.first(wire.CaseDone) is None:
        why = "its log has no ERROR SUMMARY" if found.errors is None else "the case did not finish"
        return SanitizerRun(status="failed", message=f"{why}: {_where_it_ended(outcome)}", **base)
    return SanitizerRun(status="clean", errors=0, **base)


def _errors_run(base: dict[str, Any], found: Findings) -> SanitizerRun:
    first = found.first or "(its exit code says it found errors; its log names none)"
    return SanitizerRun(status="errors", errors=found.errors, kernel=found.kernel, first=first, **base)


def judge_asan_run(outcome: ChildOutcome, log_text: str, budget_s: float) -> SanitizerRun:
    """The ASan/UBSan run's verdict: its runtimes' exit code and logs."""
    found: NativeFindings = parse_native(log_text)
    if not found.errors and outcome.returncode == FOUND_EXIT:
        # UBSan beside ASan reports on stderr whatever its log_path (gcc 12): the worker's output names
        # the finding; the exit code, not that text, is what found it
        found = parse_native(outcome.output)
    base: dict[str, Any] = {"tool": "asan", "seconds": outcome.seconds, "budget_s": budget_s}
    if found.errors or outcome.returncode == FOUND_EXIT:
        first = found.first or "(the ASan/UBSan exit code says it found errors; its log names none)"
        return SanitizerRun(
            status="errors", errors=found.errors or None, flag=f"sanitizer_{found.kind}",
            kernel=found.function, first=first, **base,
        )  # fmt: skip
    base["flag"] = "sanitizer_asan"
    if outcome.timed_out:
        why = f"the ASan build and run did not finish: {outcome.timeout_reason or describe_exit(outcome)}"
        return SanitizerRun(status="timeout", message=why, **base)
    imported = outcome.first(wire.Imported)
    if imported is None or imported.failed_build:
        failure = outcome.first(wire.ImportFailed)
        detail = failure.message[-400:] if failure else _where_it_ended(outcome)
        return SanitizerRun(status="failed", message=f"the ASan build or import failed: {detail}", **base)
    if outcome.returncode != 0 or outcome.first(wire.CaseDone) is None:
        return SanitizerRun(
            status="failed", message=f"the case did not finish: {_where_it_ended(outcome)}", **base
        )
    return SanitizerRun(status="clean", errors=0, **base)


# --- the whole report --------------------------------------------------------------------------------------


def _case_data(
    problem: Problem, case: str, job: Job, ev: WarmPool | None, turns: DeviceTurns | None = None
) -> tuple[list[orders.CandidateCase], list[str], str]:
    """The inputs and weights of one correctness case in `job` (its truth made and thrown away, on `turns`):
    the case's request items, the values that must not reach the candidate, and "" or why the data could
    not be made."""
    master = secrets.randbits(62)
    plan = Plan.make(problem, job, master, ReferenceTimes(problem, collect_env(problem))).only_case(case)
    if ev is None:
        truth = run_truth(job, problem, plan)
    else:
        deadline = Deadline(problem.spec.limits.eval_timeout_s)
        request = plan.truth_request(problem)
        truth = ev.run_truth(problem.data_hash, request, deadline, turns, truth_servers(problem))
    plan.take_truth().clear()  # off the disk: the sanitizer needs inputs only
    err = truth.first(wire.TruthError)
    why = (
        ""
        if truth.first(wire.Done)
        else f"the reference could not make the case's data: {err.message if err else describe_exit(truth)}"
    )
    return [c.for_candidate() for c in plan.cases], plan.secrets(master), why


def _run_tool(
    tool: str, problem: Problem, job: Job, items: list[orders.CandidateCase], hidden: list[str],
    budget_s: float, ev: WarmPool | None, own: frozenset[str],
) -> SanitizerRun:  # fmt: skip
    logs = job.root / f"sanitizer-{tool}"
    logs.mkdir(mode=0o700)
    request = orders.CandidateRequest(mode="bench", cases=items)
    launch: dict[str, Any] = {
        "on_message": _stop_after_cases,
        "secrets": hidden,
        "secret_dirs": [logs, *([ev.staging] if ev else [])],
        "call_bounds": {("case", item.name): budget_s for item in items},
        "budget_s": budget_s,
        "writable": [logs],  # the sanitizer writes its reports there, inside the worker's sealed filesystem
    }
    limited = _limited(problem, budget_s)
    if tool == "asan":
        runtime = asan_runtime() or "libasan.so"
        env = {SANITIZE_BUILD_ENV: "asan", **_asan_env(logs)}
        outcome = run_candidate(
            job, limited, request, wrapper=[_env_binary(), f"LD_PRELOAD={runtime}"], extra_env=env, **launch
        )
        return judge_asan_run(outcome, _read_logs(logs, ""), budget_s)
    binary = compute_sanitizer() or "compute-sanitizer"
    cmd = sanitizer_command(binary, tool, logs / f"{tool}.log", _help(binary))
    outcome = run_candidate(job, limited, request, wrapper=cmd, extra_env=NO_CACHING, **launch)
    run = judge_cuda_run(tool, outcome, _read_logs(logs, tool), budget_s, own)
    if tool == "memcheck" and "--padding" not in cmd and run.status == "clean":
        run = run.model_copy(update={"message": "; ".join(filter(None, [run.message, NO_PADDING]))})
    return run


def sanitize(
    problem: Problem,
    kernel_code: str,
    *,
    tools: tuple[str, ...] | None = None,
    budget_s: float | None = None,
    gpu: int | None = None,
    pool: WarmPool | None = None,
) -> SanitizerReport:
    """Run each sanitizer tool on the candidate at the problem's smallest correctness case. `tools`: default
    memcheck, racecheck, initcheck (CUDA) or asan (CPU); `budget_s`: per tool (default TOOL_BUDGET_S or
    ASAN_BUDGET_S); `gpu`, `pool`: as for `benchmark` (the device is held while the tools run)."""
    start = time.monotonic()
    names = tools or default_tools(problem)
    budgets = {t: budget_s or default_budget(t) for t in names}
    case = problem.smallest_case().name
    if why := availability(problem, gpu):
        runs = [SanitizerRun(tool=t, status="unavailable", message=why, budget_s=budgets[t]) for t in names]
        return report_of(runs, case, time.monotonic() - start)
    ev = pool if pool is not None else pool_for(gpu, timing_threads(problem))
    turns = DeviceTurns(ev.device) if ev is not None else None
    if turns is not None:
        turns.to(idle_mode(problem.spec.device))
    with visible_gpu(gpu):
        job = Job.create(kernel_code, ev.jobs_dir if ev else None)
        try:
            items, hidden, failed = _case_data(problem, case, job, ev, turns)
            if failed:
                runs = [
                    SanitizerRun(tool=t, status="failed", message=failed, budget_s=budgets[t]) for t in names
                ]
            else:
                own = frozenset(kernel_names(kernel_code))
                with turns.holding("exclusive") if turns is not None else contextlib.nullcontext():
                    runs = [_run_tool(t, problem, job, items, hidden, budgets[t], ev, own) for t in names]
        finally:
            if turns is not None:
                turns.close()
            job.cleanup()
    return report_of(runs, case, time.monotonic() - start)


def finding_text(run: SanitizerRun) -> str:
    """A finding in one line: the tool, the count, the kernel, the first lines of its report."""
    count = f"{run.errors} error{'s' * (run.errors != 1)}" if run.errors is not None else "errors"
    where = f" in {run.kernel}" if run.kernel else ""
    first = " | ".join(line.strip() for line in run.first.splitlines() if line.strip())
    return f"{run.tool} found {count}{where}: {first}"[:700]


def report_of(runs: list[SanitizerRun], case: str, seconds: float) -> SanitizerReport:
    budget = sum(r.budget_s for r in runs)
    fields: dict[str, Any] = {"case": case, "runs": runs, "seconds": seconds, "budget_s": budget}
    flagged = [r for r in runs if r.status == "errors"]
    if flagged:
        message = "; ".join(finding_text(r) for r in flagged)
        return SanitizerReport(status="flagged", message=message, **fields)
    if runs and all(r.status == "unavailable" for r in runs):
        return SanitizerReport(status="unavailable", message=f"not sanitized: {runs[0].message}", **fields)
    missing = [r for r in runs if r.status != "clean"]
    if missing:
        why = "; ".join(f"{r.tool} {r.status}: {r.message}" for r in missing)
        return SanitizerReport(status="incomplete", message=f"not fully sanitized: {why}"[:900], **fields)
    notes = "; ".join(f"{r.tool}: {r.message}" for r in runs if r.message)  # library findings, not flagged
    return SanitizerReport(status="clean", message=f"no errors{f' ({notes})' if notes else ''}", **fields)


def unavailable_report(why: str, tools: tuple[str, ...] = ()) -> SanitizerReport:
    """A report for a sanitizer that was not run at all (no tool here, or an executor that cannot)."""
    runs = [SanitizerRun(tool=t, status="unavailable", message=why) for t in tools]
    return SanitizerReport(status="unavailable", message=f"not sanitized: {why}", runs=runs)


# --- into the benchmark's verdict --------------------------------------------------------------------------

SANITIZED_STATUSES = ("ok", "suspect")  # a finding turns these into `incorrect`; other verdicts stand


def sanitizer_flags(report: SanitizerReport) -> list[Flag]:
    """Each tool's findings as a disqualifying flag; a tool out of time as `sanitizer_timeout` (not
    disqualifying: a slow honest kernel is not wrong, and the report says it was not checked)."""
    flags = [
        Flag(name=r.flag, message=f"{finding_text(r)} (case {report.case})")
        for r in report.runs
        if r.status == "errors"
    ]
    flags += [
        Flag(name="sanitizer_timeout", message=r.message, disqualifying=False)
        for r in report.runs
        if r.status == "timeout"
    ]
    return flags


def with_sanitizer(result: BenchResult, report: SanitizerReport) -> BenchResult:
    """`result` with the sanitizer's report, its flags, and (a finding) the verdict `incorrect`."""
    flags = [f for f in sanitizer_flags(report) if f.name not in result.flags]
    disqualified = any(f.disqualifying for f in flags)
    update: dict[str, Any] = {
        "sanitizer": report,
        "flags": [*result.flags, *(f.name for f in flags)],
        "flag_details": [*result.flag_details, *flags],
    }
    if report.status in ("unavailable", "incomplete"):
        update["notices"] = [*result.notices, f"sanitizer: {report.message}"]
    if disqualified and result.status in SANITIZED_STATUSES:
        update |= {"status": "incorrect", "correct": False, "speedup": None}
        update["message"] = f"sanitizer: {report.message}; {result.message}"
    return result.model_copy(update=update)
