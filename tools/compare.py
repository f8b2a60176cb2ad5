"""The verdict on one output: float64 truth, elementwise atol/rtol AND relative-L2, with the worst element.

Shared by the parent (correctness cases; timed outputs on the cold path) and the warm truth server, which
judges timed outputs where their truth is, on the device (tools/worker/truth.py)."""

from __future__ import annotations

import torch

from tools.kbfile import SizeValue
from tools.problem import Tolerance
from tools.results import CaseResult
from tools.wire import ReferenceError_


def _index(flat: int, shape: torch.Size) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim)
        flat //= dim
    return list(reversed(idx))


def _rel_l2(diff_norm: float, truth_norm: float) -> float:
    return diff_norm / truth_norm if truth_norm > 0 else diff_norm


def _widened(spec_tol: Tolerance, ref_err: ReferenceError_ | None) -> Tolerance:
    """The tolerance widened to the fp32 reference's own error, where it is known."""
    if ref_err is None:
        return spec_tol.widened(None, None)
    return spec_tol.widened(ref_err.ref_max_abs_err, ref_err.ref_rel_l2_err)


def compare(
    name: str,
    out: torch.Tensor,
    truth: torch.Tensor,
    spec_tol: Tolerance,
    sizes: dict[str, SizeValue],
    ref_err: ReferenceError_ | None = None,
) -> CaseResult:
    tol = _widened(spec_tol, ref_err)
    base = {
        "name": name,
        "sizes": sizes,
        "numel": truth.numel(),
        "atol": tol.atol,
        "rel_l2_bound": tol.rel_l2,
        "ref_max_abs_err": ref_err.ref_max_abs_err if ref_err else None,
        "ref_rel_l2_err": ref_err.ref_rel_l2_err if ref_err else None,
    }
    if tuple(out.shape) != tuple(truth.shape):
        return CaseResult(
            status="failed",
            message=f"output shape {tuple(out.shape)} != expected {tuple(truth.shape)}",
            **base,
        )
    if out.dtype != torch.float32:
        return CaseResult(
            status="failed", message=f"output dtype {out.dtype} != expected torch.float32", **base
        )
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        bad = (~finite).flatten()
        first = int(bad.nonzero()[0])
        return CaseResult(
            status="failed",
            message=f"{int(bad.sum()):,} NaN/Inf values in the output, first at {_index(first, out.shape)} "
            "(outputs are poisoned with NaN before each call, and on a GPU shared memory too: an element never "
            "written, or computed from shared memory the kernel never wrote, shows as NaN)",
            worst_index=_index(first, out.shape),
            mismatched=int(bad.sum()),
            **base,
        )
    # One float64 buffer, reused in place: these outputs reach hundreds of MB at the timing shapes.
    diff = out.to(torch.float64).sub_(truth)
    rel_l2 = _rel_l2(float(torch.linalg.vector_norm(diff)), float(torch.linalg.vector_norm(truth)))
    err = diff.abs_()
    max_abs = float(err.max())
    excess = err.sub_(truth.abs().mul_(tol.rtol).add_(tol.atol)).flatten()  # > 0: outside the bound
    worst = int(torch.argmax(excess))
    mismatched = int(torch.count_nonzero(excess > 0))
    fields = {
        "max_abs_err": max_abs,
        "rel_l2_err": rel_l2,
        "worst_index": _index(worst, out.shape),
        "worst_value": float(out.flatten()[worst]),
        "worst_expected": float(truth.flatten()[worst]),
        "mismatched": mismatched,
    }
    problems = []
    if mismatched:
        problems.append(
            f"{mismatched:,} of {truth.numel():,} elements outside atol={tol.atol:g}+rtol={tol.rtol:g}·|truth|; "
            f"worst at {fields['worst_index']}: got {fields['worst_value']:.6g}, expected {fields['worst_expected']:.6g}"
        )
    if rel_l2 > tol.rel_l2:
        problems.append(f"relative L2 error {rel_l2:.3g} > {tol.rel_l2:g}")
    if problems:
        return CaseResult(status="failed", message="; ".join(problems), **fields, **base)
    return CaseResult(
        status="passed",
        message=f"max abs err {fields['max_abs_err']:.3g}, rel-L2 {rel_l2:.3g}",
        **fields,
        **base,
    )


def constant_passes(truth: torch.Tensor, spec_tol: Tolerance, ref_err: ReferenceError_ | None = None) -> bool:
    """Whether one value everywhere (the truth's mean) would pass against `truth`: a check that cannot tell
    a kernel from a constant (KernelBench has references whose output is constant, e.g. a softmax over a
    dimension of size 1). A range wider than twice the widest bound rules it out without a comparison."""
    if truth.numel() == 0:
        return True
    t = truth.to(torch.float64)
    tol = _widened(spec_tol, ref_err)
    low, high = float(t.min()), float(t.max())
    if high - low > 2 * (tol.atol + tol.rtol * max(abs(low), abs(high))):
        return False
    constant = torch.full(t.shape, float(t.mean()), dtype=torch.float32, device=t.device)
    return compare("constant", constant, t, spec_tol, {}, ref_err).status == "passed"


def compare_calls(
    name: str,
    outs: object,
    truths: list[torch.Tensor],
    kept: dict[int, int],
    spec_tol: Tolerance,
    sizes: dict[str, SizeValue],
    ref_errors: list[ReferenceError_ | None],
) -> list[CaseResult]:
    """A timing shape's checked calls: `outs` (what the candidate wrote, slot -> output) against the truth
    of each slot's inputs, on the truth's device; `kept` maps each slot to the call it came from."""
    if not isinstance(outs, dict):
        return [CaseResult(name=f"{name}/timed", status="error", message="unreadable outputs: not a dict")]
    errors = [*ref_errors] or [None] * len(truths)
    results = []
    for slot, call in sorted(kept.items()):
        label = f"{name}/call{call}"
        out = outs.get(slot)
        if not isinstance(out, torch.Tensor) or not 0 <= slot < len(truths):
            results.append(
                CaseResult(name=label, status="error", message="the checked call's output is missing")
            )
            continue
        truth = truths[slot]
        results.append(compare(label, out.to(truth.device), truth, spec_tol, sizes, errors[slot]))
    return results


def truths_vary(truths: list[torch.Tensor]) -> bool:
    """Whether the checked calls' true outputs differ (a problem whose output ignores where values sit,
    a sum over everything say, gives one output for every shift: a repeat is honest there)."""
    return len(truths) < 2 or any(not torch.equal(truths[0], t) for t in truths[1:])
