"""The view of a `profile_kernel` result (`ProfileResult`): the verdict line, the time shares, one row per
kernel (what Nsight Compute measured), then its top stalls and hints where `full`."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from agent.views.fmt import BAD_STYLE, DIM, OK_STYLE
from tools.profile_kernel import headline
from tools.profile_results import KernelProfile, ProfileResult

PROFILE_COLUMNS = ("kernel", "kind", "µs", "SM", "memory", "DRAM", "occupancy", "limiter", "regs", "smem B")


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if value is not None else "–"


def profile_row(k: KernelProfile) -> list[str]:
    launches = f" ×{k.launches}" if k.launches > 1 else ""
    return [
        k.name[:48] + launches,
        k.kind,
        f"{k.duration_us:.1f}" if k.duration_us is not None else "–",
        _pct(k.sm_pct),
        _pct(k.memory_pct),
        _pct(k.dram_pct),
        f"{_pct(k.achieved_occupancy_pct)} of {_pct(k.theoretical_occupancy_pct)}",
        k.occupancy_limiter or "–",
        str(k.registers) if k.registers is not None else "–",
        str(k.shared_bytes) if k.shared_bytes is not None else "–",
    ]


def profile_table(kernels: list[KernelProfile]) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style=DIM)
    for column in PROFILE_COLUMNS:
        table.add_column(column, justify="left" if column in ("kernel", "kind", "limiter") else "right")
    for k in kernels:
        table.add_row(*profile_row(k))
    return table


def profile_view(
    result: ProfileResult, kernel_path: str | None, full: bool = False
) -> Iterator[RenderableType]:
    """`kernel_path` is unused: a profile names kernels, not lines of the candidate's file."""
    del kernel_path
    yield Text(headline(result), style=OK_STYLE if result.status == "ok" else BAD_STYLE)
    if result.library_share:
        shares = ", ".join(f"{kind} {share:.0%}" for kind, share in sorted(result.library_share.items()))
        yield Text(f"library kernels: {shares}", style=DIM)
    if result.kernels:
        yield profile_table(result.kernels)
    for k in result.kernels if full else []:
        if k.stalls:
            said = ", ".join(f"{s.reason} {s.share:.0%}" for s in k.stalls)
            yield Text(f"{k.name[:60]}: stalls {said}", style=DIM)
        for hint in k.advice:
            yield Text(f"{k.name[:60]}: ncu: {hint}", style=DIM)
    if result.measurable_here:
        yield Text(f"what can be measured {result.measurable_here}", style="yellow")
