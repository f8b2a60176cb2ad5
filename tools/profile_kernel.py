"""The `profile_kernel` tool, whole: what the model is told (`SPEC`), the call (`profile_kernel`), its result
(`ProfileResult`, in tools/profile_results.py) and the text the model reads back (`text`, `headline`).

A call runs Nsight Compute on the candidate at the problem's primary shape in a fresh contained worker
(tools/judge/_profile.py) and digests it per kernel: duration, compute and memory throughput as % of peak,
achieved occupancy and what limits it, the top warp-stall reasons, registers, spills, shared memory, and
the share of the time in the candidate's kernels against library kernels. It judges nothing: a profile
is never a benchmark, and the best kernel is only ever what `benchmark` timed.
"""

from __future__ import annotations

from tools.judge._profile import profile, unavailable
from tools.problem import Problem
from tools.profile_results import KernelProfile, ProfileResult
from tools.supervise import WarmPool
from tools.toolspec import ToolSpec

__all__ = ["SPEC", "ProfileResult", "headline", "profile_kernel", "text", "unavailable"]

SPEC = ToolSpec(
    name="profile_kernel",
    description=(
        "Run Nsight Compute (ncu) on the module at the primary timed shape, one forward call, and return per "
        "kernel: duration, compute (SM) and memory (DRAM) throughput as % of peak, achieved occupancy and its "
        "limiter, the top warp-stall reasons, registers, spills and shared memory, plus the share of time in "
        "your kernels versus library kernels. Costs about as much as a benchmark; judges nothing."
    ),
    brief="Nsight Compute per kernel at the primary shape (CUDA problems): throughput as % of peak, "
    "occupancy and its limiter, warp stalls, registers, spills, shared memory; your kernels' share of the time.",
)


def profile_kernel(
    problem: Problem, kernel_code: str, *, gpu: int | None = None, pool: WarmPool | None = None
) -> ProfileResult:
    """Profile one candidate. `gpu`, `pool`: as for `benchmark`."""
    return profile(problem, kernel_code, gpu=gpu, pool=pool)


# --- what the model reads back ---------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if value is not None else "n/a"


def _occupancy(k: KernelProfile) -> str:
    achieved = f"occupancy {_pct(k.achieved_occupancy_pct)} achieved of {_pct(k.theoretical_occupancy_pct)}"
    if k.occupancy_limiter and k.blocks_per_sm is not None:
        return f"{achieved}, limited by {k.occupancy_limiter} ({k.blocks_per_sm:g} blocks/SM)"
    return achieved


def _resources(k: KernelProfile) -> str:
    parts = [f"{k.registers} registers/thread" if k.registers is not None else "registers n/a"]
    if k.spill_stores is not None or k.spill_loads is not None:
        parts.append(f"spills {k.spill_stores or 0} B stored, {k.spill_loads or 0} B loaded")
    if k.shared_bytes is not None:
        parts.append(f"{k.shared_bytes} B shared/block")
    if k.grid or k.block:
        parts.append(f"grid {k.grid} block {k.block}")
    return ", ".join(parts)


def kernel_lines(k: KernelProfile) -> list[str]:
    """One kernel's digest in a few lines."""
    launches = f" ×{k.launches}" if k.launches > 1 else ""
    duration = f"{k.duration_us:.1f} µs" if k.duration_us is not None else "duration n/a"
    lines = [
        f"- [{k.kind}] {k.name[:140]}{launches}: {duration}; SM {_pct(k.sm_pct)}, memory {_pct(k.memory_pct)}, "
        f"DRAM {_pct(k.dram_pct)} of peak",
        f"  {_occupancy(k)}; {_resources(k)}",
    ]
    if k.stalls:
        said = ", ".join(
            f"{s.reason} {s.share * 100:.0f}% ({s.cycles_per_issue:.1f} cycles/issue)" for s in k.stalls
        )
        lines.append(f"  top stalls: {said}")
    lines += [f"  ncu: {hint}" for hint in k.advice[:2]]
    return lines


def headline(result: ProfileResult) -> str:
    if result.status == "ok":
        own = (
            f"{result.own_share * 100:.0f}% of the time in your kernels"
            if result.own_share is not None
            else ""
        )
        total = f"{result.total_us:.1f} µs of device time" if result.total_us is not None else ""
        return f"profile_kernel OK at {result.shape}: " + ", ".join(x for x in (total, own) if x) + "."
    return f"profile_kernel {result.status.upper()}: {result.message}"


def text(result: ProfileResult) -> str:
    """The tool result the model reads: the headline, the shares, then each kernel, costliest first."""
    lines = [headline(result)]
    if result.status == "ok":
        library = ", ".join(
            f"{kind} {share * 100:.0f}%" for kind, share in sorted(result.library_share.items())
        )
        if library:
            lines.append(f"Library kernels: {library}.")
        lines.append("Kernels (Nsight Compute, the GPU's own clocks, one forward call):")
        for k in result.kernels:
            lines += kernel_lines(k)
    elif result.compile is not None and not result.compile.ok:
        lines.append(result.compile.message)
    if result.measurable_here:
        lines.append(f"What can be measured {result.measurable_here}.")
    return "\n".join(lines)
