"""What `profile_kernel` returns: Nsight Compute's figures for each kernel of a candidate's forward."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tools.results import CompileResult, Model


class StallReason(Model):
    """One warp-stall reason: warp cycles per issued instruction spent in it (ncu's WarpStateStats)."""

    reason: str
    cycles_per_issue: float
    share: float = Field(description="of all stall cycles of the kernel")


class KernelProfile(Model):
    """One kernel as Nsight Compute measured it at the primary shape (launches of one name added up)."""

    name: str
    kind: str = Field(description="own (the candidate's source defines it), gemm, elementwise, copy, ...")
    launches: int = 1
    duration_us: float | None = None
    sm_pct: float | None = Field(None, description="compute (SM) throughput, % of peak")
    memory_pct: float | None = Field(None, description="memory throughput (the busiest unit), % of peak")
    dram_pct: float | None = Field(None, description="DRAM throughput, % of peak")
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    occupancy_limiter: str = Field(
        "", description="what caps the blocks per SM: registers, shared memory, ..."
    )
    blocks_per_sm: float | None = Field(None, description="the limiter's blocks per SM")
    registers: int | None = Field(None, description="per thread")
    shared_bytes: int | None = Field(None, description="static + dynamic shared memory per block")
    spill_stores: int | None = Field(None, description="ptxas, bytes per thread (own kernels)")
    spill_loads: int | None = None
    grid: str = ""
    block: str = ""
    stalls: list[StallReason] = Field(default_factory=list, description="the top warp-stall reasons")
    advice: list[str] = Field(default_factory=list, description="ncu's own optimisation hints, shortened")


ProfileStatus = Literal["ok", "unavailable", "compile_error", "import_error", "failed", "timeout"]


class ProfileResult(Model):
    """`profile_kernel`: Nsight Compute on the candidate at the problem's primary shape (tools/profile_kernel.py)."""

    status: ProfileStatus
    message: str
    shape: str = ""
    sizes: dict[str, int] = Field(default_factory=dict)
    kernels: list[KernelProfile] = Field(default_factory=list, description="by device time, costliest first")
    own_share: float | None = Field(
        None, description="of the profiled device time, in the candidate's kernels"
    )
    library_share: dict[str, float] = Field(default_factory=dict)
    total_us: float | None = None
    tool: str = Field("", description="the ncu used, and its version")
    measurable_here: str = Field("", description="where ncu cannot run: what can be measured here instead")
    compile: CompileResult | None = None
    output: str = ""
    seconds: float = 0.0
    kernel_hash: str = ""
