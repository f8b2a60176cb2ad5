"""The plan of one evaluation (its seed, cases and timing shapes, where their data goes) and the truth made
for it by the truth worker (`prepare`; made ahead of time while the model thinks: tools/judge/_ahead.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from tools import orders, wire
from tools.cache.reference_times import ReferenceTimes
from tools.host import timing_threads
from tools.judge import _phases as phases
from tools.judge._kept import KeptTruth
from tools.kbfile import SizeValue
from tools.problem import Problem
from tools.results import EnvInfo, TimingStats
from tools.supervise import (
    ChildOutcome,
    Deadline,
    DeviceTurns,
    Job,
    WarmPool,
    call_bound,
    child_env,
    cpu_env,
    run_child,
)
from tools.supervise.pool import truth_servers_most
from tools.worker.outputs import staging_bytes
from tools.worker.refmod import derive_seed

REFERENCE_WARMUP = 1  # the reference's warm-up calls: trusted code, whose lazy set-up one call does


def timing_cfgs(problem: Problem) -> tuple[orders.LoopSettings, orders.LoopSettings]:
    """The timing loop's settings for the candidate, and for the reference (bounded in seconds, and one
    warm-up: the selective scan's three at its 0.3 s shape cost a new host's first evaluation ~1 s)."""
    cfg = problem.spec.timing_config
    candidate = orders.LoopSettings.model_validate(
        {
            **cfg.model_dump(exclude={"input_sets", "reference_max_seconds", "threads"}),
            "warmup": max(1, cfg.warmup),
        }
    )  # one warm-up at least: the first timed call never pays a shape's lazy set-up
    reference = candidate.model_copy(
        update={"max_seconds": min(cfg.max_seconds, cfg.reference_max_seconds), "warmup": REFERENCE_WARMUP}
    )
    return candidate, reference


class _Planned(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlannedCase(_Planned):
    """One correctness case as the judge sees it: the truth worker's order, the candidate's, and what the
    truth worker said of the fp32 reference on it (`ref_error`, once the truth is made)."""

    truth: orders.TruthCase
    out_path: str
    derived: bool  # added by the harness (input_variants): not judged where the reference is not finite on it
    ref_error: wire.ReferenceError_ | None = None

    @property
    def name(self) -> str:
        return self.truth.name

    @property
    def sizes(self) -> dict[str, SizeValue]:
        return self.truth.sizes

    def for_candidate(self) -> orders.CandidateCase:
        return orders.CandidateCase(name=self.name, data_path=self.truth.data_path, out_path=self.out_path)


class PlannedShape(_Planned):
    """One timing shape as the judge sees it: the truth worker's order, the candidate's loop settings, and
    the fp32 reference's own error on each checked call's inputs (once the truth is made)."""

    truth: orders.TruthShape
    out_path: str
    profile: bool
    cfg: orders.LoopSettings
    ref_errors: list[wire.ReferenceError_] = Field(default_factory=list)
    shifted: list[tuple[int, int]] = Field(default_factory=list, description="wire.TimingReady's, once made")
    # wire.TimingReady's facts of the truth, once made (the truth itself may stay in the truth server):
    truth_finite: bool = True
    truth_varies: bool = True
    constant_passes: bool = False

    @property
    def name(self) -> str:
        return self.truth.name

    @property
    def sizes(self) -> dict[str, SizeValue]:
        return self.truth.sizes

    @property
    def ref_call_s(self) -> float | None:
        return min((e.ref_call_s for e in self.ref_errors), default=None)

    def for_candidate(
        self, cfg: orders.LoopSettings | None = None, profile: bool | None = None
    ) -> orders.CandidateShape:
        return orders.CandidateShape(
            name=self.name, data_path=self.truth.data_path, out_path=self.out_path,
            profile=self.profile if profile is None else profile, cfg=cfg or self.cfg,
        )  # fmt: skip


def _moved(path: str, old: Path, new: Path) -> str:
    return str(new / Path(path).relative_to(old))


class Plan(_Planned):
    """Every case and shape of one evaluation, with its seed and the files that carry its data."""

    cases: list[PlannedCase]
    timing: list[PlannedShape]

    @classmethod
    def make(
        cls, problem: Problem, job: Job, master: int, refs: ReferenceTimes, refresh: bool = False
    ) -> Plan:
        candidate_cfg, reference_cfg = timing_cfgs(problem)
        cases = [
            PlannedCase(
                truth=orders.TruthCase(
                    name=c.name,
                    case=c,
                    sizes=problem.sizes_of(c),
                    pins=problem.pins(c),
                    seed=derive_seed(master, c.name),
                    data_path=str(job.shared / f"case_{i}.pt"),
                    truth_path=str(job.private / f"case_{i}.truth.pt"),
                ),
                out_path=str(job.work / f"case_{i}.out.pt"),
                derived=i >= len(problem.spec.correctness),
            )
            for i, c in enumerate(problem.correctness_cases)
        ]
        timing = [
            PlannedShape(
                truth=orders.TruthShape(
                    name=t.name,
                    sizes=problem.sizes_of(t),
                    pins=problem.pins(t),
                    seed=derive_seed(master, t.name),
                    # The checked calls' offsets (tools/worker/fresh.py): secret, like the seed; every other
                    # call's offset is drawn while the candidate runs (tools/judge/_calls.py).
                    truth_offsets=[
                        derive_seed(master, f"{t.name}/checked{k}")
                        for k in range(problem.spec.timing_config.input_sets)
                    ],
                    data_path=str(job.shared / f"timing_{i}.pt"),
                    truth_path=str(job.private / f"timing_{i}.truth.pt"),
                    time_reference=refresh or refs.get(t) is None,
                    reference_cfg=reference_cfg,
                    time_launch_free=problem.spec.device == "cuda"
                    and (refresh or refs.launch_free(t) is None),
                ),
                out_path=str(job.work / f"timing_{i}.out.pt"),
                profile=t.primary or len(problem.spec.timing) == 1,
                cfg=candidate_cfg,
            )
            for i, t in enumerate(problem.spec.timing)
        ]
        return cls(cases=cases, timing=timing)

    def retuned(self, problem: Problem) -> Plan:
        """Timed with `problem`'s settings: a plan made ahead for the same data serves a longer timing."""
        candidate_cfg, reference_cfg = timing_cfgs(problem)
        timing = [
            t.model_copy(
                update={
                    "cfg": candidate_cfg,
                    "truth": t.truth.model_copy(update={"reference_cfg": reference_cfg}),
                }
            )
            for t in self.timing
        ]
        return self.model_copy(update={"timing": timing})

    def relocated(self, old: Path, new: Path) -> Plan:
        """The job moved from `old` to `new`: every path in the plan follows it."""

        def move(item: PlannedCase | PlannedShape) -> dict[str, object]:
            truth = item.truth.model_copy(
                update={
                    "data_path": _moved(item.truth.data_path, old, new),
                    "truth_path": _moved(item.truth.truth_path, old, new),
                }
            )
            return {"truth": truth, "out_path": _moved(item.out_path, old, new)}

        cases = [c.model_copy(update=move(c)) for c in self.cases]
        timing = [t.model_copy(update=move(t)) for t in self.timing]
        return self.model_copy(update={"cases": cases, "timing": timing})

    def only_case(self, name: str) -> Plan:
        """One correctness case and no timing shape (the sanitizers' run)."""
        return self.model_copy(update={"cases": [c for c in self.cases if c.name == name], "timing": []})

    def candidate_request(self) -> orders.CandidateRequest:
        """Only what the candidate needs: where its inputs are and where to put outputs (no seeds, no truth)."""
        return orders.CandidateRequest(
            mode="bench",
            cases=[c.for_candidate() for c in self.cases],
            timing=[t.for_candidate() for t in self.timing],
        )

    def truth_request(self, problem: Problem, keep_as: str | None = None) -> orders.TruthRequest:
        """`keep_as`: the warm truth server keeps the timing shapes' truth under this name."""
        return orders.TruthRequest(
            reference_source=problem.reference_source,
            device=problem.spec.device,
            cases=[c.truth for c in self.cases],
            timing=[t.truth for t in self.timing],
            keep_as=keep_as,
            tolerance=problem.spec.tolerance,
            threads=timing_threads(problem),
        )

    def secrets(self, master: int) -> list[str]:
        """Values that must never reach the candidate (short user-given seeds are not checkable as text)."""
        values = [str(master)] + [str(item.truth.seed) for item in self.cases + self.timing]
        values += [str(offset) for item in self.timing for offset in item.truth.truth_offsets]
        return [v for v in values if len(v) >= 8]

    def take_truth(self) -> dict[str, Any]:
        """Truth moves into the parent's memory and off the disk before the candidate starts: a process
        of the same user could read any file, but it cannot see this one (its own PID namespace)."""
        truths: dict[str, Any] = {}
        for item in self.cases + self.timing:
            path = Path(item.truth.truth_path)
            if path.is_file():
                truths[item.name] = torch.load(path, weights_only=True)
                path.unlink()
        return truths

    def with_reference_errors(self, truth: ChildOutcome) -> Plan:
        """The fp32 reference's own error per case/set, which widens the tolerance where honest fp32 drifts."""
        cases = {m.name: m for m in truth.all(wire.CaseReady)}
        shapes = {m.name: m for m in truth.all(wire.TimingReady)}

        def case_error(name: str) -> wire.ReferenceError_ | None:
            msg = cases.get(name)
            return (
                wire.ReferenceError_.model_validate(msg.model_dump(include=REFERENCE_ERROR)) if msg else None
            )

        planned = [c.model_copy(update={"ref_error": case_error(c.name)}) for c in self.cases]

        def shape_update(t: PlannedShape) -> dict[str, Any]:
            msg = shapes.get(t.name)
            if msg is None:
                return {"ref_errors": []}
            return {
                "ref_errors": list(msg.ref_errors), "shifted": msg.shifted, "truth_finite": msg.truth_finite,
                "truth_varies": msg.truth_varies, "constant_passes": msg.constant_passes,
            }  # fmt: skip

        timing = [t.model_copy(update=shape_update(t)) for t in self.timing]
        return self.model_copy(update={"cases": planned, "timing": timing})

    def call_bounds(
        self, problem: Problem, refs: ReferenceTimes, fresh: dict[str, TimingStats | None]
    ) -> dict[tuple[str, str], float]:
        """Per case and shape, how long one call of the candidate may take (tools/supervise/watchdog.py): scaled from
        the reference's median where it is known (`fresh`: timed in this evaluation), else from its one
        call while the truth was made."""
        limits = problem.spec.limits
        bounds = {
            ("case", c.name): call_bound(limits, c.ref_error.ref_call_s if c.ref_error else None)
            for c in self.cases
        }
        for item, shape in zip(self.timing, problem.spec.timing, strict=True):
            median = fresh.get(shape.name) or refs.get(shape)
            ref_s = median.median_ms / 1e3 if median is not None else item.ref_call_s
            bounds[("timing", item.name)] = call_bound(limits, ref_s)
        return bounds

    def retime_request(self, names: set[str]) -> orders.CandidateRequest:
        """A fresh worker times these shapes again, with twice the iterations (no cases, no profile)."""
        timing = []
        for item in self.timing:
            if item.name in names:
                min_iters = max(2 * item.cfg.min_iters, 20)
                cfg = item.cfg.model_copy(
                    update={"min_iters": min_iters, "max_iters": max(2 * item.cfg.max_iters, min_iters)}
                )
                timing.append(item.for_candidate(cfg=cfg, profile=False))
        return orders.CandidateRequest(mode="retime", timing=timing)


REFERENCE_ERROR = set(wire.ReferenceError_.model_fields)


def run_truth(job: Job, problem: Problem, plan: Plan) -> ChildOutcome:
    path = job.private / "truth_request.json"
    path.write_text(plan.truth_request(problem).model_dump_json())
    workdir = job.private / "truth_work"
    workdir.mkdir()
    env = child_env(workdir, cpu_env(timing_threads(problem)), harness=job.harness)
    deadline = Deadline(problem.spec.limits.eval_timeout_s)
    return run_child("tools.worker.truth", [str(path)], cwd=workdir, env=env, deadline=deadline)


@dataclass
class Prepared:
    """One evaluation's job, plan, truth worker outcome and truth, made before its candidate is known:
    the correctness cases' truth in `truths`, the timing shapes' there too or in the truth server (`kept`)."""

    job: Job
    plan: Plan
    master: int
    truth: ChildOutcome
    truths: dict[str, Any]
    phases: dict[str, float]
    kept: KeptTruth | None = None
    references_cached: bool = False  # the reference medians its truth timed are in the cache now
    on_discard: list[Callable[[], None]] = field(default_factory=list)  # a shared set closing (_share.py)

    @property
    def ok(self) -> bool:
        return self.truth.first(wire.Done) is not None

    @property
    def kept_bytes(self) -> int:
        """The pinned host memory its candidate's worker takes for a shape's kept outputs, at most: one output
        of the reference's size a checked call, in fp32 (one of another dtype is smaller, or grows the
        worker's buffer as before: tools/worker/outputs.py)."""
        checked = {t.truth.name: len(t.truth.truth_offsets) for t in self.plan.timing}
        sizes = [[m.out_numel * 4] * checked.get(m.name, 0) for m in self.truth.all(wire.TimingReady)]
        return max((staging_bytes(s) for s in sizes), default=0)

    def discard(self) -> None:
        for hook in self.on_discard:
            hook()
        self.on_discard.clear()
        self.truths.clear()
        if self.kept is not None:
            self.kept.forget()
            self.kept.unclaim()
        self.job.cleanup()


def prepare(
    problem: Problem,
    env: EnvInfo,
    master: int,
    *,
    refresh_reference: bool = False,
    pool: WarmPool | None = None,
    parent: Path | None = None,
    ahead: bool = False,
    turns: DeviceTurns | None = None,
) -> Prepared:
    """Data and truth of one evaluation: by a cold truth worker, or the evaluator's warm one, which takes
    `turns` on the device for its device work (TruthServer.request). Made `ahead` of its evaluation, its
    server is not kept claimed while it waits (`KeptTruth.reclaim`)."""
    job = Job.create(None, parent)
    kept: KeptTruth | None = None
    try:
        plan = Plan.make(problem, job, master, ReferenceTimes(problem, env), refresh_reference)
        if pool is None:
            truth = run_truth(job, problem, plan)
        else:
            server = pool.truth_server(problem.data_hash, truth_servers(problem))
            kept = KeptTruth(server, uuid.uuid4().hex, problem.spec.tolerance, turns=turns)
            deadline = Deadline(problem.spec.limits.eval_timeout_s)
            truth = server.request(plan.truth_request(problem, keep_as=kept.handle), deadline, turns)
        truths: dict[str, Any] = {}
        if truth.first(wire.Done) is not None:
            plan = plan.with_reference_errors(truth)
            truths = plan.take_truth()
        if ahead and kept is not None:
            kept.unclaim()
    except BaseException:
        if kept is not None:
            kept.forget()
            kept.unclaim()
        job.cleanup()
        raise
    return Prepared(job, plan, master, truth, truths, phases.truth_phases(truth), kept)


def truth_servers(problem: Problem) -> int:
    """How many truth servers `problem` may have at once: a CUDA problem's parallel trajectories one each
    (their truths, re-checks and paired checks would otherwise queue at one) and one for the truth made
    beside them; a CPU problem's one (a second would only contend for the cores its loops are timed on)."""
    return truth_servers_most() if problem.spec.device == "cuda" else 1


def worker_kind(problem: Problem) -> orders.WorkerKind:
    return "cuda" if problem.spec.device == "cuda" else "cpu"
