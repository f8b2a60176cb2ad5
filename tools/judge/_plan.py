"""The plan of one evaluation (its seed, cases and timing shapes, where their data goes), the truth made
for it by the truth worker, and evaluations prepared ahead of time while the model thinks."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tools import wire
from tools.cache.reference_times import ReferenceTimes
from tools.judge import _phases as phases
from tools.problem import Problem
from tools.results import (
    EnvInfo,
    TimingStats,
)
from tools.supervise import ChildOutcome, Deadline, Job, WarmPool, call_bound, child_env, run_child
from tools.worker.refmod import derive_seed


def timing_cfgs(problem: Problem) -> tuple[dict[str, Any], dict[str, Any]]:
    """The timing loop's settings for the candidate, and for the reference (bounded in seconds)."""
    cfg = problem.spec.timing_config
    candidate = cfg.model_dump(exclude={"input_sets", "reference_max_seconds"})
    return candidate, {**candidate, "max_seconds": min(cfg.max_seconds, cfg.reference_max_seconds)}


@dataclass
class Plan:
    """Every case and shape of one evaluation, with its seed and the files that carry its data."""

    cases: list[dict[str, Any]]
    timing: list[dict[str, Any]]

    @classmethod
    def make(
        cls, problem: Problem, job: Job, master: int, refs: ReferenceTimes, refresh: bool = False
    ) -> Plan:
        candidate_cfg, reference_cfg = timing_cfgs(problem)
        cases = [
            {
                "name": c.name,
                "case": c.model_dump(),
                "sizes": problem.sizes_of(c),
                "pins": problem.pins(c),
                "seed": derive_seed(master, c.name),
                "data_path": str(job.shared / f"case_{i}.pt"),
                "truth_path": str(job.private / f"case_{i}.truth.pt"),
                "out_path": str(job.work / f"case_{i}.out.pt"),
                # added by the harness (input_variants): not judged where the reference is not finite on it
                "derived": i >= len(problem.spec.correctness),
            }
            for i, c in enumerate(problem.correctness_cases)
        ]
        timing = [
            {
                "name": t.name,
                "sizes": problem.sizes_of(t),
                "pins": problem.pins(t),
                "seed": derive_seed(master, t.name),
                # The checked calls' offsets (tools/worker/fresh.py): secret, like the seed; every other
                # call's offset is drawn while the candidate runs (tools/judge/_calls.py).
                "truth_offsets": [
                    derive_seed(master, f"{t.name}/checked{k}")
                    for k in range(problem.spec.timing_config.input_sets)
                ],
                "data_path": str(job.shared / f"timing_{i}.pt"),
                "truth_path": str(job.private / f"timing_{i}.truth.pt"),
                "out_path": str(job.work / f"timing_{i}.out.pt"),
                "time_reference": refresh or refs.get(t) is None,
                "profile": t.primary or len(problem.spec.timing) == 1,
                "cfg": candidate_cfg,
                "reference_cfg": reference_cfg,
            }
            for i, t in enumerate(problem.spec.timing)
        ]
        return cls(cases, timing)

    def retune(self, problem: Problem) -> None:
        """Time with `problem`'s settings: a plan made ahead for the same data serves a longer timing."""
        candidate_cfg, reference_cfg = timing_cfgs(problem)
        for item in self.timing:
            item["cfg"], item["reference_cfg"] = dict(candidate_cfg), dict(reference_cfg)

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
        values += [str(offset) for item in self.timing for offset in item["truth_offsets"]]
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

    def attach_reference_errors(self, truth: ChildOutcome) -> None:
        """The fp32 reference's own error per case/set, which widens the tolerance where honest fp32 drifts."""
        cases = {m.name: m for m in truth.all(wire.CaseReady)}
        shapes = {m.name: m for m in truth.all(wire.TimingReady)}
        for item in self.cases:
            msg = cases.get(item["name"])
            item["ref_err"] = msg.model_dump(include={"ref_max_abs_err", "ref_rel_l2_err"}) if msg else {}
            item["ref_call_s"] = msg.ref_call_s if msg else None
        for item in self.timing:
            errors = shapes[item["name"]].ref_errors if item["name"] in shapes else []
            item["ref_errors"] = [e.model_dump() for e in errors]
            item["ref_call_s"] = min((e.ref_call_s for e in errors), default=None)

    def call_bounds(
        self, problem: Problem, refs: ReferenceTimes, fresh: dict[str, TimingStats | None]
    ) -> dict[tuple[str, str], float]:
        """Per case and shape, how long one call of the candidate may take (tools/supervise/watchdog.py): scaled from
        the reference's median where it is known (`fresh`: timed in this evaluation), else from its one
        call while the truth was made."""
        limits = problem.spec.limits
        bounds = {("case", c["name"]): call_bound(limits, c.get("ref_call_s")) for c in self.cases}
        for item, shape in zip(self.timing, problem.spec.timing, strict=True):
            median = fresh.get(shape.name) or refs.get(shape)
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


def truth_request(problem: Problem, plan: Plan) -> dict[str, Any]:
    request = {"reference_source": problem.reference_source, "device": problem.spec.device}
    return request | {"cases": plan.cases, "timing": plan.timing}


def run_truth(job: Job, problem: Problem, plan: Plan) -> ChildOutcome:
    path = job.private / "truth_request.json"
    path.write_text(json.dumps(truth_request(problem, plan)))
    workdir = job.private / "truth_work"
    workdir.mkdir()
    env = child_env(workdir, harness=job.harness)
    deadline = Deadline(problem.spec.limits.eval_timeout_s)
    return run_child("tools.worker.truth", [str(path)], cwd=workdir, env=env, deadline=deadline)


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
        return self.truth.first(wire.Done) is not None

    def discard(self) -> None:
        self.truths.clear()
        self.job.cleanup()


def prepare(
    problem: Problem,
    env: EnvInfo,
    master: int,
    *,
    refresh_reference: bool = False,
    pool: WarmPool | None = None,
    parent: Path | None = None,
) -> Prepared:
    """Data and truth of one evaluation: by a cold truth worker, or the evaluator's warm one."""
    job = Job.create(None, parent)
    try:
        plan = Plan.make(problem, job, master, ReferenceTimes(problem, env), refresh_reference)
        if pool is None:
            truth = run_truth(job, problem, plan)
        else:
            deadline = Deadline(problem.spec.limits.eval_timeout_s)
            truth = pool.run_truth(problem.data_hash, truth_request(problem, plan), deadline)
        truths: dict[str, Any] = {}
        if truth.first(wire.Done) is not None:
            plan.attach_reference_errors(truth)
            truths = plan.take_truth()
    except BaseException:
        job.cleanup()
        raise
    return Prepared(job, plan, master, truth, truths, phases.truth_phases(truth))


def prefetch_usable(item: Prepared, problem: Problem, env: EnvInfo) -> bool:
    """A prepared evaluation serves only where it times nothing anew and its truth is complete."""
    refs = ReferenceTimes(problem, env)
    cached = all(refs.get(t) is not None for t in problem.spec.timing)
    return item.ok and cached and not any(t["time_reference"] for t in item.plan.timing)


def obtain(
    problem: Problem,
    env: EnvInfo,
    seed: int | None,
    refresh_reference: bool,
    pool: WarmPool | None,
    ready: Prepared | None,
    clock: dict[str, float],
) -> Prepared:
    """The evaluation prepared ahead of time where it fits; otherwise data and truth made now."""
    if pool is not None and ready is not None:
        if prefetch_usable(ready, problem, env):
            old = ready.job.move_to(pool.jobs_dir)
            ready.plan.relocate(old, ready.job.root)
            ready.plan.retune(problem)
            return ready
        ready.discard()
    master = seed if seed is not None else secrets.randbits(62)
    parent = pool.jobs_dir if pool is not None else None
    item = prepare(problem, env, master, refresh_reference=refresh_reference, pool=pool, parent=parent)
    clock.update(item.phases)
    return item


def reference_cached(problem: Problem, env: EnvInfo) -> bool:
    refs = ReferenceTimes(problem, env)
    return all(refs.get(t) is not None for t in problem.spec.timing)


def prefetch(problem: Problem, env: EnvInfo, pool: WarmPool) -> None:
    """After an evaluation: make the next one's fresh-seeded data and truth, and its worker (on a CUDA
    problem with its context, cuBLAS and profiler started), while the caller thinks."""

    def make() -> Prepared:
        return prepare(problem, env, secrets.randbits(62), pool=pool, parent=pool.staging)

    # The reference is timed only on the critical path, never beside other work: no truth made ahead then.
    truth = make if reference_cached(problem, env) else None
    pool.start_prefetch(problem.data_hash, truth, worker=worker_kind(problem))


def worker_kind(problem: Problem) -> str:
    return "cuda" if problem.spec.device == "cuda" else "cpu"
