"""`benchmark(problem, kernel_code, seed=None)`: correctness on every case, then timing at every shape.

Three processes: the truth worker (reference weights, inputs, float64 truth, reference timing), the
candidate worker (inputs and weights only), and this parent, which compares, decides and keeps statistics.
"""

from __future__ import annotations

import json
import platform
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tools import guard, phases
from tools.compare import compare
from tools.envinfo import collect_env
from tools.integrity import HARNESS, text_hash
from tools.jobs import Job, compile_result, describe_exit, kernel_hash, run_candidate
from tools.problem import Problem, TimingShape
from tools.refmod import derive_seed
from tools.results import (
    BenchResult,
    CaseResult,
    EnvInfo,
    Flag,
    KernelUsage,
    ShapeTiming,
    TimingStats,
)
from tools.sandbox import ChildOutcome, Deadline, cache_root, child_env, run_child, visible_gpu
from tools.static_checks import RULES, check_source
from tools.warm import Evaluator, evaluator_for
from tools.watchdog import call_bound

FAILURE_STATUS = {"oom": "oom", "cuda_error": "runtime_error", "exception": "runtime_error"}


@dataclass
class Plan:
    """Every case and shape of one evaluation, with its seed and the files that carry its data."""

    cases: list[dict[str, Any]]
    timing: list[dict[str, Any]]

    @classmethod
    def make(
        cls, problem: Problem, job: Job, master: int, refs: ReferenceTimes, refresh: bool = False
    ) -> Plan:
        cfg = problem.spec.timing_config
        cases = [
            {
                "name": c.name,
                "case": c.model_dump(),
                "sizes": {**problem.size_constants, **c.sizes},
                "seed": derive_seed(master, c.name),
                "data_path": str(job.shared / f"case_{i}.pt"),
                "truth_path": str(job.private / f"case_{i}.truth.pt"),
                "out_path": str(job.work / f"case_{i}.out.pt"),
            }
            for i, c in enumerate(problem.spec.correctness)
        ]
        timing = [
            {
                "name": t.name,
                "sizes": {**problem.size_constants, **t.sizes},
                "seed": derive_seed(master, t.name),
                "sets": cfg.input_sets,
                "data_path": str(job.shared / f"timing_{i}.pt"),
                "truth_path": str(job.private / f"timing_{i}.truth.pt"),
                "out_path": str(job.work / f"timing_{i}.out.pt"),
                "time_reference": refresh or refs.get(t) is None,
                "profile": t.primary or len(problem.spec.timing) == 1,
                "cfg": {k: v for k, v in cfg.model_dump().items() if k != "input_sets"},
            }
            for i, t in enumerate(problem.spec.timing)
        ]
        return cls(cases, timing)

    def relocate(self, old: Path, new: Path) -> None:
        """The job moved from `old` to `new`: every path in the plan follows it."""
        for item in self.cases + self.timing:
            for key in ("data_path", "truth_path", "out_path"):
                rel = Path(item[key]).relative_to(old)
                item[key] = str(new / rel)

    def candidate_request(self) -> dict[str, Any]:
        """Only what the candidate needs: where its inputs are and where to put outputs (no seeds, no truth)."""
        keep = ("name", "data_path", "out_path", "profile", "cfg")
        return {
            "mode": "bench",
            "cases": [{k: c[k] for k in keep if k in c} for c in self.cases],
            "timing": [{k: t[k] for k in keep if k in t} for t in self.timing],
        }

    def secrets(self, master: int) -> list[str]:
        """Values that must never reach the candidate (short user-given seeds are not checkable as text)."""
        values = [str(master)] + [str(item["seed"]) for item in self.cases + self.timing]
        return [v for v in values if len(v) >= 8]

    def take_truth(self) -> dict[str, Any]:
        """Truth moves into the parent's memory and off the disk before the candidate starts: a process
        of the same user could read any file, but it cannot see this one (its own PID namespace)."""
        truths: dict[str, Any] = {}
        for item in self.cases + self.timing:
            path = Path(item["truth_path"])
            if path.is_file():
                truths[item["name"]] = torch.load(path, weights_only=True)
                path.unlink()
        return truths

    def attach_reference_errors(self, truth_messages: list[dict[str, Any]]) -> None:
        """The fp32 reference's own error per case/set, which widens the tolerance where honest fp32 drifts."""
        by_name = {(m["event"], m.get("name")): m for m in truth_messages}
        for item in self.cases:
            msg = by_name.get(("case_ready", item["name"]), {})
            item["ref_err"] = {k: msg[k] for k in ("ref_max_abs_err", "ref_rel_l2_err") if k in msg}
            item["ref_call_s"] = msg.get("ref_call_s")
        for item in self.timing:
            item["ref_errors"] = by_name.get(("timing_ready", item["name"]), {}).get("ref_errors", [])
            calls = [e["ref_call_s"] for e in item["ref_errors"] if e.get("ref_call_s")]
            item["ref_call_s"] = min(calls) if calls else None

    def call_bounds(
        self, problem: Problem, refs: ReferenceTimes, fresh: dict[str, Any]
    ) -> dict[tuple[str, str], float]:
        """Per case and shape, how long one call of the candidate may take (tools/watchdog.py): scaled from
        the reference's median where it is known (`fresh`: timed in this evaluation), else from its one
        call while the truth was made."""
        limits = problem.spec.limits
        bounds = {("case", c["name"]): call_bound(limits, c.get("ref_call_s")) for c in self.cases}
        for item, shape in zip(self.timing, problem.spec.timing, strict=True):
            median = _stats(fresh.get(shape.name)) or refs.get(shape)
            ref_s = median.median_ms / 1e3 if median is not None else item.get("ref_call_s")
            bounds[("timing", item["name"])] = call_bound(limits, ref_s)
        return bounds

    def retime_request(self, names: set[str]) -> dict[str, Any]:
        """A fresh worker times these shapes again, with twice the iterations (no cases, no profile)."""
        request = self.candidate_request()
        items = []
        for item in request["timing"]:
            if item["name"] in names:
                cfg = dict(item["cfg"])
                cfg["min_iters"] = max(2 * int(cfg.get("min_iters", 10)), 20)
                cfg["max_iters"] = max(2 * int(cfg.get("max_iters", 100)), cfg["min_iters"])
                items.append({**item, "cfg": cfg, "profile": False})
        return {"mode": "retime", "cases": [], "timing": items}


# A cached reference median this unsteady (a loaded host, a few long samples) would set every later speedup:
# such an entry is not served, so the next evaluation times the reference again.
MAX_CACHED_REFERENCE_RSE = 0.2


class ReferenceTimes:
    """Reference medians cached per problem hash, shape, host, device and torch version."""

    def __init__(self, problem: Problem, env: EnvInfo) -> None:
        self.path = cache_root() / "reference_times.json"
        self.prefix = f"{problem.content_hash}|{platform.node()}|{env.gpu or 'cpu'}|torch {env.torch}"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def get(self, shape: TimingShape) -> TimingStats | None:
        raw = self.data.get(f"{self.prefix}|{shape.name}")
        stats = TimingStats.model_validate(raw) if raw else None
        return stats if stats is not None and stats.rse <= MAX_CACHED_REFERENCE_RSE else None

    def put(self, shape: TimingShape, stats: TimingStats) -> None:
        current = json.loads(self.path.read_text()) if self.path.is_file() else {}
        current[f"{self.prefix}|{shape.name}"] = stats.model_dump()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(current, indent=1))
        tmp.replace(self.path)
        self.data = current


@dataclass
class Verdicts:
    """What the parent decided while the candidate ran (cases are judged before timing is allowed)."""

    problem: Problem
    plan: Plan
    truths: dict[str, Any] = field(default_factory=dict)
    cases: dict[str, CaseResult] = field(default_factory=dict)
    flags: dict[str, Flag] = field(default_factory=dict)
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: list[tuple[str, str]] = field(default_factory=list)
    batch_clock: dict[str, dict[str, float]] = field(default_factory=dict)  # shape -> begin/end, our clock
    disagreements: dict[str, str] = field(default_factory=dict)  # shape -> why its clocks disagree

    def flag(self, name: str, message: str, disqualifying: bool = True) -> None:
        self.flags.setdefault(name, Flag(name=name, message=message, disqualifying=disqualifying))

    def handle(self, msg: dict[str, Any]) -> str | None:
        event = msg["event"]
        if event == "start":
            self.started.append((str(msg.get("kind")), str(msg.get("name"))))
        elif event == "case_done":
            self._judge_case(msg)
        elif event == "failed":
            self.failures[f"{msg.get('kind')}:{msg.get('name')}"] = msg
        elif event in ("batch_begin", "batch_end"):
            self.batch_clock.setdefault(str(msg.get("name")), {})[event[6:]] = time.monotonic()
        elif event == "cases_done":
            return "time" if self.all_cases_pass() else "stop"

        elif event == "violation":
            self._violation(msg)
        return None

    def _violation(self, msg: dict[str, Any]) -> None:
        """The runtime guard's report; only the flag names the guard can give are accepted from the child."""
        name = str(msg.get("flag"))
        if name in guard.FLAG_FOR.values():
            self.flag(name, f"{RULES[name].explanation} (seen at run time: {str(msg.get('detail'))[:200]})")

    def _judge_case(self, msg: dict[str, Any]) -> None:
        item = next((c for c in self.plan.cases if c["name"] == msg.get("name")), None)
        if item is None:
            return
        self._note_guards(msg)
        try:
            out = torch.load(item["out_path"], weights_only=True)
            truth = self.truths[item["name"]]
        except Exception as exc:
            self.cases[item["name"]] = CaseResult(
                name=item["name"], status="error", message=f"unreadable output: {exc}"
            )
            return
        if not isinstance(out, torch.Tensor):
            self.cases[item["name"]] = CaseResult(
                name=item["name"], status="error", message="output is not a tensor"
            )
            return
        result = compare(
            item["name"], out, truth, self.problem.spec.tolerance, item["sizes"], item.get("ref_err")
        )
        result.seconds = float(msg.get("seconds", 0.0))
        self.cases[item["name"]] = result

    def _note_guards(self, msg: dict[str, Any]) -> None:
        if msg.get("mutated"):
            self.flag(
                "input_mutation", "forward modified its input tensors; inputs must be left as they were"
            )
        if msg.get("timers"):
            self.flag(
                "timer_tampering",
                f"timing functions were replaced ({', '.join(msg['timers'])}); do not patch timers",
            )

    def parent_batch_ms(self, name: str) -> float | None:
        edges = self.batch_clock.get(name, {})
        if "begin" not in edges or "end" not in edges:
            return None
        return (edges["end"] - edges["begin"]) * 1e3

    def all_cases_pass(self) -> bool:
        passed = all(
            self.cases.get(c["name"]) and self.cases[c["name"]].status == "passed" for c in self.plan.cases
        )
        return passed and not any(f.disqualifying for f in self.flags.values())


def _truth_request(problem: Problem, plan: Plan) -> dict[str, Any]:
    request = {"reference_source": problem.reference_source, "device": problem.spec.device}
    return request | {"cases": plan.cases, "timing": plan.timing}


def _run_truth(job: Job, problem: Problem, plan: Plan) -> ChildOutcome:
    path = job.private / "truth_request.json"
    path.write_text(json.dumps(_truth_request(problem, plan)))
    workdir = job.private / "truth_work"
    workdir.mkdir()
    env = child_env(workdir, harness=job.harness)
    deadline = Deadline(problem.spec.limits.eval_timeout_s)
    return run_child("tools.worker_truth", [str(path)], cwd=workdir, env=env, deadline=deadline)


@dataclass
class Prepared:
    """One evaluation's job, plan, truth worker outcome and truth, made before its candidate is known."""

    job: Job
    plan: Plan
    master: int
    truth: ChildOutcome
    truths: dict[str, Any]
    phases: dict[str, float]

    @property
    def ok(self) -> bool:
        return any(m["event"] == "done" for m in self.truth.messages)

    def discard(self) -> None:
        self.truths.clear()
        self.job.cleanup()


def prepare(
    problem: Problem,
    env: EnvInfo,
    master: int,
    *,
    refresh_reference: bool = False,
    evaluator: Evaluator | None = None,
    parent: Path | None = None,
) -> Prepared:
    """Data and truth of one evaluation: by a cold truth worker, or the evaluator's warm one."""
    job = Job.create(None, parent)
    try:
        plan = Plan.make(problem, job, master, ReferenceTimes(problem, env), refresh_reference)
        if evaluator is None:
            truth = _run_truth(job, problem, plan)
        else:
            deadline = Deadline(problem.spec.limits.eval_timeout_s)
            truth = evaluator.run_truth(problem.content_hash, _truth_request(problem, plan), deadline)
        truths: dict[str, Any] = {}
        if any(m["event"] == "done" for m in truth.messages):
            plan.attach_reference_errors(truth.messages)
            truths = plan.take_truth()
    except BaseException:
        job.cleanup()
        raise
    return Prepared(job, plan, master, truth, truths, phases.truth_phases(truth))


def _prefetch_usable(item: Prepared, problem: Problem, env: EnvInfo) -> bool:
    """A prepared evaluation serves only where it times nothing anew and its truth is complete."""
    refs = ReferenceTimes(problem, env)
    cached = all(refs.get(t) is not None for t in problem.spec.timing)
    return item.ok and cached and not any(t["time_reference"] for t in item.plan.timing)


def _obtain(
    problem: Problem,
    env: EnvInfo,
    seed: int | None,
    refresh_reference: bool,
    evaluator: Evaluator | None,
    ready: Prepared | None,
    clock: dict[str, float],
) -> Prepared:
    """The evaluation prepared ahead of time where it fits; otherwise data and truth made now."""
    if evaluator is not None and ready is not None:
        if _prefetch_usable(ready, problem, env):
            old = ready.job.move_to(evaluator.jobs_dir)
            ready.plan.relocate(old, ready.job.root)
            return ready
        ready.discard()
    master = seed if seed is not None else secrets.randbits(62)
    parent = evaluator.jobs_dir if evaluator is not None else None
    item = prepare(
        problem, env, master, refresh_reference=refresh_reference, evaluator=evaluator, parent=parent
    )
    clock.update(item.phases)
    return item


def _reference_cached(problem: Problem, env: EnvInfo) -> bool:
    refs = ReferenceTimes(problem, env)
    return all(refs.get(t) is not None for t in problem.spec.timing)


def _prefetch(problem: Problem, env: EnvInfo, evaluator: Evaluator) -> None:
    """After an evaluation: make the next one's fresh-seeded data and truth, and its worker (on a CUDA
    problem with its context, cuBLAS and profiler started), while the caller thinks."""

    def make() -> Prepared:
        return prepare(problem, env, secrets.randbits(62), evaluator=evaluator, parent=evaluator.staging)

    # The reference is timed only on the critical path, never beside other work: no truth made ahead then.
    truth = make if _reference_cached(problem, env) else None
    evaluator.start_prefetch(problem.content_hash, truth, worker=_worker_kind(problem))


def _worker_kind(problem: Problem) -> str:
    return "cuda" if problem.spec.device == "cuda" else "cpu"


def _stats(raw: dict[str, Any] | None) -> TimingStats | None:
    return TimingStats.model_validate(raw) if raw else None


def _where_it_stopped(verdicts: Verdicts, outcome: ChildOutcome) -> str:
    last = verdicts.started[-1] if verdicts.started else None
    where = f" during {last[0]} {last[1]}" if last else ""
    return f"{describe_exit(outcome)}{where}"


def _case_results(verdicts: Verdicts, outcome: ChildOutcome) -> list[CaseResult]:
    results: list[CaseResult] = []
    died = False
    for item in verdicts.plan.cases:
        name = item["name"]
        if name in verdicts.cases:
            results.append(verdicts.cases[name])
        elif (fail := verdicts.failures.get(f"case:{name}")) is not None:
            results.append(
                CaseResult(name=name, status="error", message=f"{fail.get('error')}: {fail.get('message', '')}",
                           sizes=item["sizes"])
            )  # fmt: skip
        elif not died and ("case", name) in verdicts.started:
            died = True
            results.append(
                CaseResult(
                    name=name,
                    status="error",
                    message=_where_it_stopped(verdicts, outcome),
                    sizes=item["sizes"],
                )
            )
        else:
            results.append(CaseResult(name=name, status="skipped", message="not run", sizes=item["sizes"]))
    return results


def _timing_results(
    verdicts: Verdicts,
    outcome: ChildOutcome,
    problem: Problem,
    refs: ReferenceTimes,
    ref_msgs: dict[str, Any],
    only: set[str] | None = None,
) -> tuple[list[ShapeTiming], KernelUsage | None]:
    done = {m["name"]: m for m in outcome.messages if m["event"] == "timing_done"}
    shapes: list[ShapeTiming] = []
    usage: KernelUsage | None = None
    for item, shape in zip(verdicts.plan.timing, problem.spec.timing, strict=True):
        if only is not None and shape.name not in only:
            continue
        cached = refs.get(shape)
        fresh = _stats(ref_msgs.get(shape.name))
        if fresh is not None:
            refs.put(shape, fresh)
        reference = fresh or cached
        st = ShapeTiming(
            name=shape.name, primary=shape is problem.primary, sizes=item["sizes"], reference=reference,
            reference_cached=fresh is None and cached is not None,
        )  # fmt: skip
        msg = done.get(shape.name)
        if msg is None:
            fail = verdicts.failures.get(f"timing:{shape.name}")
            st.message = f"{fail.get('error')}: {fail.get('message')}" if fail else "not timed"
            shapes.append(st)
            continue
        st.candidate = _stats(msg.get("stats"))
        if st.candidate is not None:
            st.candidate.parent_batch_ms = verdicts.parent_batch_ms(shape.name)
        st.rechecked = _recheck(verdicts, item, problem)
        if msg.get("inconsistent"):
            verdicts.flag(
                "timed_output_mismatch",
                f"{shape.name}: {msg['inconsistent']} of {msg.get('checked')} timed calls returned an output that "
                "differs from the output for the same inputs earlier: results cached by pointer, id or shape",
            )
        verdicts._note_guards(msg)
        _timing_guards(verdicts, shape, st)
        if msg.get("usage"):
            usage = KernelUsage.model_validate(msg["usage"])
        if st.candidate and reference:
            st.speedup = reference.median_ms / st.candidate.median_ms
        shapes.append(st)
    return shapes, usage


def _recheck(verdicts: Verdicts, item: dict[str, Any], problem: Problem) -> list[CaseResult]:
    try:
        outs = torch.load(item["out_path"], weights_only=True)
        truths = verdicts.truths[item["name"]]
    except Exception as exc:
        return [
            CaseResult(name=f"{item['name']}/timed", status="error", message=f"unreadable outputs: {exc}")
        ]
    ref_errors = item.get("ref_errors") or [None] * len(truths)
    results = [
        compare(f"{item['name']}/set{k}", out, truth, problem.spec.tolerance, item["sizes"], ref_errors[k])
        for k, (out, truth) in enumerate(zip(outs, truths, strict=False))
    ]
    if len(outs) != len(truths) or any(r.status != "passed" for r in results):
        bad = next((r for r in results if r.status != "passed"), None)
        detail = f" ({bad.name}: {bad.message})" if bad else ""
        verdicts.flag(
            "timed_output_mismatch",
            "outputs of timed calls did not match the truth for their inputs: work skipped, cached or deferred "
            f"while timed{detail}",
        )
    return results


def _timing_guards(verdicts: Verdicts, shape: TimingShape, st: ShapeTiming) -> None:
    cand = st.candidate
    if cand is None:
        return
    if shape.floor_ms is not None and cand.median_ms < shape.floor_ms:
        verdicts.flag(
            "below_floor",
            f"{shape.name}: {cand.median_ms:.4f} ms is below the physical floor {shape.floor_ms} ms for this shape; "
            "the measured work cannot be the whole computation",
        )
    if why := clock_disagreement(shape.name, cand):
        verdicts.disagreements[shape.name] = why


# The parent's stamps of the timed loop carry a pipe hop and a thread wake-up each (well under a millisecond
# on a quiet host; a few GIL switch intervals on a busy one): allow for those before calling a disagreement
# a faked clock. The slack must stay small next to a real timed loop (~100 ms on the H200's scan), or a
# 10x-slow clock would hide inside it.
PARENT_CLOCK_RATIO = 1.5
PARENT_CLOCK_SLACK_MS = 25.0
# Work the CUDA events did not bracket (tools/timing.py, `escaped`): an honest call leaves ~5 us on the H200,
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


def _usage_guards(verdicts: Verdicts, problem: Problem, usage: KernelUsage | None) -> None:
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
    if usage.method == "cuda_profiler" and share > policy.max_other_library_share:
        kinds = ", ".join(f"{k} {v:.0%}" for k, v in sorted(disallowed.items(), key=lambda kv: -kv[1]))
        verdicts.flag(
            "library_policy",
            f"{share:.0%} of device time is in library kernels outside the allowed ({kinds}); "
            f"policy: {policy.summary.strip()}",
        )


def _summary(result: BenchResult, problem: Problem) -> str:
    failing = [c for c in result.cases if c.status != "passed"]
    parts = []
    if failing:
        first = failing[0]
        parts.append(
            f"{len(failing)} of {len(result.cases)} cases failed; first: {first.name}: {first.message}"
        )
    else:
        parts.append(f"all {len(result.cases)} correctness cases passed")
    for f in result.flag_details:
        parts.append(f"flag {f.name}: {f.message}")
    prim = result.primary_timing
    if prim and prim.candidate and prim.reference:
        parts.append(
            f"{prim.name}: {prim.candidate.median_ms:.4g} ms (RSE {prim.candidate.rse:.1%}) vs reference "
            f"{prim.reference.median_ms:.4g} ms → speedup {prim.reference.median_ms / prim.candidate.median_ms:.2f}×"
        )
    return "; ".join(parts)


def _overall_status(
    cases: list[CaseResult], timings: list[ShapeTiming], verdicts: Verdicts, outcome: ChildOutcome
) -> str:
    if outcome.timed_out:
        return "timeout"
    for fail in verdicts.failures.values():
        if fail.get("error") in FAILURE_STATUS:
            return FAILURE_STATUS[fail["error"]]
    if outcome.returncode != 0:
        return "crashed"
    clean = not any(f.disqualifying for f in verdicts.flags.values())
    timed = all(t.candidate is not None for t in timings)
    if clean and timed and all(c.status == "passed" for c in cases):
        return "ok"
    return "incorrect"


def benchmark(
    problem: Problem,
    kernel_code: str,
    seed: int | None = None,
    *,
    refresh_reference: bool = False,
    gpu: int | None = None,
    evaluator: Evaluator | None = None,
) -> BenchResult:
    """Evaluate one candidate. `refresh_reference` re-times the reference instead of using the cached time
    (a final re-check does this: on a busy host the cached figure may come from other conditions).
    `gpu`: the only GPU the evaluation's child processes see (default: those visible to this process).
    `evaluator`: the warm workers to use (tools/warm.py); default: that device's, unless
    KERNEL_AGENT_WARM=0 asks for the cold path (fresh processes for everything)."""
    start = time.monotonic()
    ev = evaluator if evaluator is not None else evaluator_for(gpu)
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
    if ev is not None and not refresh_reference and _reference_cached(problem, env):
        # A zygote not yet running starts now, beside the truth worker, unless that worker times the
        # reference: a torch import beside it on a few cores would slow the reference and inflate speedups.
        ev.zygote()
        ev.prepare_worker(_worker_kind(problem))
    waiting = time.monotonic()
    # Taken before the device lock: a prefetch still running holds that lock until it is done.
    ready = (
        ev.take_prefetched(problem.content_hash) if ev and seed is None and not refresh_reference else None
    )
    with ev.device if ev is not None else visible_gpu(gpu):
        clock["truth_wait"] = time.monotonic() - waiting  # a prefetch finishing, or the device busy
        prepared = _obtain(problem, env, seed, refresh_reference, ev, ready, clock)
        prepared.job.write_kernel(kernel_code)
        try:
            result, suspicious = _evaluate(problem, kernel_code, prepared, flags, base, ev, clock)
        finally:
            prepared.discard()
    result.notices += _integrity_notices(problem)
    if ev is not None:
        if suspicious:
            ev.replace_zygote()
        _prefetch(problem, env, ev)
    result.seconds = time.monotonic() - start
    result.phases = phases.finish(clock, result.seconds)
    return result


def _evaluate(
    problem: Problem,
    kernel_code: str,
    prepared: Prepared,
    flags: list[Flag],
    base: dict[str, Any],
    ev: Evaluator | None,
    clock: dict[str, float],
) -> tuple[BenchResult, bool]:
    """The candidate's run and the verdict; also whether its worker side must be replaced."""
    job, plan, truth = prepared.job, prepared.plan, prepared.truth
    base = {**base, "seed": prepared.master}
    launch: dict[str, Any] = {"launcher": ev.launch_candidate, "secret_dirs": [ev.staging]} if ev else {}
    truth_msgs = {m["event"]: m for m in truth.messages}
    no_device = "no_device" in truth_msgs
    if no_device or "done" not in truth_msgs:
        outcome = run_candidate(job, problem, {"mode": "compile", "cases": [], "timing": []}, **launch)
        comp = compile_result(outcome, base["kernel_hash"], no_device=no_device)
        if no_device:
            message = "benchmark needs a CUDA GPU and none is visible here; " + (
                "the kernel compiled." if comp.ok or comp.status == "no_device" else comp.message
            )
            return BenchResult(
                status="no_device", correct=False, speedup=None, message=message, compile=comp, **base
            ), _suspicious(outcome, comp.status in ("ok", "no_device", "compile_error", "import_error"))
        err = truth_msgs.get("error", {})
        detail = err.get("message") or _where_truth_failed(truth)
        return BenchResult(
            status="harness_error", correct=False, speedup=None, compile=comp, output=truth.output,
            message=f"the reference/truth worker failed: {detail}", **base,
        ), True  # fmt: skip
    ref_msgs = {m["name"]: m.get("reference") for m in truth.messages if m["event"] == "timing_ready"}
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
    clock["judge"] = time.monotonic() - judging
    suspicious = _suspicious(outcome, result.status in CLEAN_STATUSES and not result.flags)
    if result.status == "ok" and verdicts.disagreements:
        remeasuring = time.monotonic()
        result, again = _remeasure(problem, job, verdicts, result, ref_msgs, launch)
        clock["remeasure"] = time.monotonic() - remeasuring
        suspicious = suspicious or _suspicious(again, result.status in CLEAN_STATUSES and not result.flags)
    return result, suspicious


CLEAN_STATUSES = ("ok", "incorrect", "compile_error", "import_error")


def _remeasure(
    problem: Problem,
    job: Job,
    verdicts: Verdicts,
    result: BenchResult,
    ref_msgs: dict[str, Any],
    launch: dict[str, Any],
) -> tuple[BenchResult, ChildOutcome]:
    """The clocks disagreed on some shape of an otherwise correct candidate: time those shapes again in a
    fresh worker with more iterations. A disagreement that persists makes the result `suspect` (no
    speedup, never the best); one that does not was the host's, and the second measurement stands."""
    first = dict(verdicts.disagreements)
    verdicts.disagreements.clear()
    for name in first:
        verdicts.batch_clock.pop(name, None)
    request = verdicts.plan.retime_request(set(first))
    outcome = run_candidate(job, problem, request, on_message=verdicts.handle, **launch)
    refs = ReferenceTimes(problem, result.env)
    again, _ = _timing_results(verdicts, outcome, problem, refs, ref_msgs, only=set(first))
    retimed = {t.name: t for t in again}
    for name in first:
        if retimed.get(name) is None or retimed[name].candidate is None:
            why = _where_it_stopped(verdicts, outcome) if outcome.returncode else "it was not timed"
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
        }
    )
    lead = SUSPECT_LEAD if status == "suspect" else ""
    updated.message = lead + _summary(updated, problem)
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
    ref_msgs: dict[str, Any],
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
    if not any(m["event"] == "imported" for m in outcome.messages) or comp.status != "ok":
        return BenchResult(
            status=comp.status if comp.status != "ok" else "import_error", correct=False, speedup=None,
            message=comp.message, compile=comp, output=outcome.output,
            flags=[f.name for f in verdicts.flags.values()], flag_details=list(verdicts.flags.values()), **base,
        )  # fmt: skip
    cases = _case_results(verdicts, outcome)
    timings, usage = _timing_results(verdicts, outcome, problem, ReferenceTimes(problem, env), ref_msgs)
    _usage_guards(verdicts, problem, usage)
    status = _overall_status(cases, timings, verdicts, outcome)
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
    result.message = _failure_lead(status, outcome, verdicts) + _summary(result, problem)
    return result


def _integrity_notices(problem: Problem) -> list[str]:
    """Harness or reference files that differ on disk from what this process read at load time."""
    changed = HARNESS.changed({problem.reference_path: text_hash(problem.reference_source)})
    if not changed:
        return []
    return [
        f"files changed on disk since the harness loaded them (no effect: evaluations use the copies read at "
        f"load time): {', '.join(changed)[:400]}"
    ]


def _failure_lead(status: str, outcome: ChildOutcome, verdicts: Verdicts) -> str:
    if status in ("timeout", "crashed"):
        return f"{status}: {_where_it_stopped(verdicts, outcome)}; "
    if status in ("oom", "runtime_error"):
        fail = next(iter(verdicts.failures.values()), None)
        if fail:
            return (
                f"{status} in {fail.get('kind')} {fail.get('name')}: {str(fail.get('message', ''))[-600:]}; "
            )
    return ""


def _where_truth_failed(outcome: ChildOutcome) -> str:
    tail = outcome.output.strip().splitlines()[-3:]
    return f"{describe_exit(outcome)}; {' | '.join(tail)}"
