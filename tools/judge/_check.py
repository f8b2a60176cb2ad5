"""`agent check PROBLEM`: the spec validates, and the reference runs on its smallest case (in a child)."""

from __future__ import annotations

import json
import time

from pydantic import BaseModel

from tools import wire
from tools.problem import Problem
from tools.supervise import Deadline, Job, child_env, run_child
from tools.worker.refmod import derive_seed


class CheckResult(BaseModel):
    ok: bool
    problem: str
    case: str
    sizes: dict[str, int]
    output_shape: list[int] | None = None
    seconds: float
    message: str


def check_problem(problem: Problem) -> CheckResult:
    case = problem.smallest_case()
    sizes = {**problem.size_constants, **case.sizes}
    start = time.monotonic()
    with Job.create("") as job:
        item = {
            "case": case.model_dump(),
            "sizes": sizes,
            "seed": derive_seed(0, case.name),
            "data_path": str(job.shared / "case.pt"),
            "truth_path": str(job.private / "case.truth.pt"),
        }
        request = {"reference_source": problem.reference_source, "device": problem.spec.device}
        path = job.private / "request.json"
        path.write_text(json.dumps(request | {"cases": [item], "timing": []}))
        outcome = run_child(
            "tools.worker.truth", [str(path)], cwd=job.work, env=child_env(job.work),
            deadline=Deadline(problem.spec.limits.eval_timeout_s),
        )  # fmt: skip
    common = {"problem": problem.name, "case": case.name, "sizes": sizes, "seconds": time.monotonic() - start}
    if (no_device := outcome.first(wire.NoDevice)) is not None:
        return CheckResult(ok=False, message=f"spec valid; {no_device.message}", **common)
    ready = outcome.first(wire.CaseReady)
    if outcome.first(wire.Done) is None or ready is None:
        err = outcome.first(wire.TruthError)
        detail = err.message if err else outcome.output.strip()[-500:]
        return CheckResult(ok=False, message=f"spec valid, but the reference failed: {detail}", **common)
    shape = ready.shape
    return CheckResult(
        ok=True, output_shape=shape,
        message=f"spec valid; reference ran on {case.name} {sizes} → output {tuple(shape)} (float64 truth)",
        **common,
    )  # fmt: skip
