"""`agent check PROBLEM`: the spec validates, and the reference runs on its smallest case (in a child)."""

from __future__ import annotations

import time

from pydantic import BaseModel

from tools import orders, wire
from tools.kbfile import SizeValue
from tools.problem import Case, Problem
from tools.supervise import ChildOutcome, Deadline, Job, child_env, run_child
from tools.worker.refmod import derive_seed


class CheckResult(BaseModel):
    ok: bool
    problem: str
    case: str
    sizes: dict[str, SizeValue]
    device: str | None = None
    """Where the reference ran: the spec's device, or `cpu` for a CUDA problem on a machine without a GPU."""
    output_shape: list[int] | None = None
    seconds: float
    message: str
    reference_failed: bool = False
    """The reference itself raised (a bad problem), as opposed to the harness failing to run it."""
    not_checked: list[str] = []
    """What this machine could not check (the reference on a GPU, where none is visible)."""


def check_problem(problem: Problem) -> CheckResult:
    case = problem.smallest_case()
    sizes = problem.sizes_of(case)
    start = time.monotonic()
    device: orders.Device = problem.spec.device
    not_checked: list[str] = []
    pins = problem.pins(case)
    outcome = run_reference(problem, case, pins, device)
    no_device = outcome.first(wire.NoDevice)
    if no_device is not None:
        # A valid spec is still worth checking without a GPU: the reference runs on the CPU instead.
        device = "cpu"
        not_checked.append(f"the reference on a CUDA GPU ({no_device.message}): it ran on the CPU instead")
        outcome = run_reference(problem, case, pins, device)
    common = {
        "problem": problem.name, "case": case.name, "sizes": sizes, "device": device,
        "seconds": time.monotonic() - start, "not_checked": not_checked,
    }  # fmt: skip
    ready = outcome.first(wire.CaseReady)
    if outcome.first(wire.Done) is None or ready is None:
        err = outcome.first(wire.TruthError)
        detail = err.message if err else outcome.output.strip()[-500:]
        if no_device is not None and err is not None:
            # It may fail on the CPU only because it needs its GPU: say so, and do not fail the spec.
            not_checked[0] = f"the reference ({no_device.message}; on the CPU it failed: {detail})"
            return CheckResult(
                ok=True, message="spec valid; the reference could not be run here (no CUDA GPU)", **common
            )
        return CheckResult(
            ok=False, reference_failed=err is not None,
            message=f"spec valid, but the reference failed: {detail}", **common,
        )  # fmt: skip
    shape = ready.shape
    where = " on the CPU (no CUDA GPU here)" if not_checked else ""
    return CheckResult(
        ok=True, output_shape=shape,
        message=f"spec valid; reference ran{where} on {case.name} {sizes} → output {tuple(shape)} (float64 truth)",
        **common,
    )  # fmt: skip


def run_reference(
    problem: Problem, case: Case, pins: dict[str, SizeValue], device: orders.Device
) -> ChildOutcome:
    """The truth worker on one case, without timing: the reference's float64 output on `device`, with the
    constants `pins` fixes (the others derived from them in the worker)."""
    with Job.create("") as job:
        item = orders.TruthCase(
            name=case.name,
            case=case,
            sizes=pins,
            pins=pins,
            seed=derive_seed(0, case.name),
            data_path=str(job.shared / "case.pt"),
            truth_path=str(job.private / "case.truth.pt"),
        )
        request = orders.TruthRequest(reference_source=problem.reference_source, device=device, cases=[item])
        path = job.private / "request.json"
        path.write_text(request.model_dump_json())
        return run_child(
            "tools.worker.truth", [str(path)], cwd=job.work, env=child_env(job.work),
            deadline=Deadline(problem.spec.limits.eval_timeout_s),
        )  # fmt: skip
