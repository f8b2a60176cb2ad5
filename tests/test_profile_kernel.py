"""`profile_kernel`: the Nsight Compute digest read from real ncu output (the H200's, committed under
bench/results/h200/2026-12-01/), the raw page's stall reasons, launches merged per kernel, the shares of
time, the text the model reads, the view, and a clear answer where ncu cannot run."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agent.views.profile import profile_view
from tools import profile_kernel
from tools.judge._ncu_output import digest, merge_by_name, parse_launches
from tools.judge._profile import base_name, digest_report, ncu_command, shares
from tools.problem import load_problem
from tools.profile_kernel import text
from tools.profile_results import ProfileResult
from tools.results import KernelResources

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "bench" / "results" / "h200" / "2026-12-01"
GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"

# The raw page's layout (`ncu --import R --csv --page raw --print-units base`), written by hand: a header of
# column names, a row of units (its ID cell empty), then one row per launch (IDs 5 and 6).
RAW = (REPO / "tests" / "fixtures" / "ncu_raw_page.csv").read_text()


def test_the_digest_of_the_h200s_section_csv() -> None:
    """SpeedOfLight, Occupancy and WarpStateStats on a cuBLAS GEMM (details page, ncu 2025.3.1)."""
    launches = parse_launches((H200 / "ncu_gemm_sections.csv").read_text())
    assert [launch.name for launch in launches] == [GEMM]
    k = digest(launches[0], "gemm")
    assert (k.duration_us, k.sm_pct, k.memory_pct, k.dram_pct) == (pytest.approx(60.672), 66.17, 57.49, 1.46)
    assert (k.achieved_occupancy_pct, k.theoretical_occupancy_pct) == (6.25, 12.5)
    assert (k.occupancy_limiter, k.blocks_per_sm) == ("registers", 2.0)
    assert (k.grid, k.block) == ("(8, 16, 1)", "(128, 1, 1)")
    assert len(k.advice) == 1  # the missing-metric note is ncu's own, not advice
    assert k.advice[0].startswith("The 2.00 theoretical warps per scheduler")
    assert k.advice[0].endswith("(ncu estimates up to 88% faster)")


def test_a_page_with_one_section_gives_what_it_has() -> None:
    """The network-namespace probe collected SpeedOfLight only: occupancy stays unknown, not zero."""
    k = digest(parse_launches((H200 / "ncu_gemm_netns.csv").read_text())[0], "gemm")
    assert (k.duration_us, k.sm_pct, k.dram_pct) == (pytest.approx(60.672), 66.17, 1.46)
    assert (k.achieved_occupancy_pct, k.occupancy_limiter, k.registers, k.stalls) == (None, "", None, [])


def test_the_raw_page_gives_stalls_registers_and_shared_memory_merged_per_kernel() -> None:
    profiles = [digest(launch, "own") for launch in parse_launches(RAW)]
    first = profiles[0]
    assert (first.duration_us, first.registers, first.shared_bytes) == (pytest.approx(1.5), 64, 8192)
    assert [s.reason for s in first.stalls] == [
        "long_scoreboard",
        "barrier",
        "math_pipe_throttle",
    ]  # not `selected`
    assert first.stalls[0].share == pytest.approx(6.0 / 8.0)
    (merged,) = merge_by_name(profiles)
    assert (merged.launches, merged.duration_us) == (2, pytest.approx(2.0))
    assert merged.sm_pct == pytest.approx((41.2 * 1.5 + 81.2 * 0.5) / 2.0)  # weighted by duration


def test_own_kernels_get_ptxas_spills_and_the_shares_split_own_from_library() -> None:
    pages = [RAW, (H200 / "ncu_gemm_sections.csv").read_text().replace('"0","2985"', '"9","2985"')]
    spills = KernelResources(name="_Z8scan_fwdPKfPfi", registers=64, spill_stores=16, spill_loads=8)
    compiled = {"status": "ok", "message": "compiled", "kernels": [spills]}
    from tools.results import CompileResult

    kernels = digest_report(pages, {"scan_fwd"}, CompileResult.model_validate(compiled))
    assert [(k.kind, k.launches) for k in kernels] == [("gemm", 1), ("own", 2)]  # costliest first
    assert (kernels[1].spill_stores, kernels[1].spill_loads) == (16, 8)
    own, library, total = shares(kernels)
    assert total == pytest.approx(62.672)
    assert own == pytest.approx(2.0 / 62.672)
    assert library == {"gemm": pytest.approx(60.672 / 62.672)}
    assert base_name("void ns::scan_fwd<4>(const float *, float *)") == "scan_fwd"


def test_ncu_runs_without_root_on_the_forward_call_only(tmp_path: Path) -> None:
    cmd = ncu_command("/usr/local/cuda/bin/ncu", tmp_path / "profile")
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert cmd[cmd.index("--target-processes") + 1] == "application-only"
    assert {"SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats"} <= set(cmd)


def ok_result() -> ProfileResult:
    pages = [RAW, (H200 / "ncu_gemm_sections.csv").read_text().replace('"0","2985"', '"9","2985"')]
    kernels = digest_report(pages, {"scan_fwd"}, None)
    own, library, total = shares(kernels)
    return ProfileResult(
        status="ok", message="3 kernel launches", shape="b16_l1024_d1024", kernels=kernels, own_share=own,
        library_share=library, total_us=total,
    )  # fmt: skip


def test_the_model_reads_each_kernel_with_what_limits_it() -> None:
    said = text(ok_result())
    lines = said.splitlines()
    assert (
        lines[0]
        == "profile_kernel OK at b16_l1024_d1024: 62.7 µs of device time, 3% of the time in your kernels."
    )
    assert lines[1] == "Library kernels: gemm 97%."
    assert f"- [gemm] {GEMM}: 60.7 µs; SM 66%, memory 57%, DRAM 1% of peak" in lines
    assert (
        "  occupancy 6% achieved of 12%, limited by registers (2 blocks/SM); registers n/a, grid (8, 16, 1) block (128, 1, 1)"
        in lines
    )
    assert (
        "  top stalls: long_scoreboard 74% (5.0 cycles/issue), barrier 19% (1.2 cycles/issue), math_pipe_throttle 7% (0.5 cycles/issue)"
        in said
    )


def test_the_view_renders_a_row_per_kernel() -> None:
    console = Console(file=io.StringIO(), width=160, legacy_windows=False)
    for part in profile_view(ok_result(), None, full=True):
        console.print(part)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "library kernels: gemm 97%" in out
    assert "scan_fwd(const float *, float *, int) ×2" in out
    assert "scan_fwd(const float *, float *, int): stalls long_scoreboard 74%, barrier 19%" in out


def test_a_cpu_problem_is_told_what_can_be_measured_there_at_once() -> None:
    problem = load_problem(REPO / "problems" / "selective_scan_cpu.yaml")
    result = profile_kernel(problem, "import torch\n")
    assert result.status == "unavailable"
    assert result.message == "profile_kernel runs Nsight Compute, which profiles CUDA kernels"
    assert (
        text(result)
        .splitlines()[-1]
        .startswith("What can be measured here: benchmark reports the time in your own")
    )
    assert result.seconds == 0.0  # nothing was built or run


def test_agent_profile_on_the_command_line_answers_a_cpu_problem_without_a_traceback(tmp_path: Path) -> None:
    """The CLI as a user types it (it once handed the problem's path where its parsed options belonged)."""
    kernel = tmp_path / "kernel.py"
    kernel.write_text("import torch\n")
    cpu = REPO / "problems" / "selective_scan_cpu.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "profile", str(cpu), str(kernel), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    result = ProfileResult.model_validate_json(done.stdout)
    assert (result.status, result.message) == (
        "unavailable",
        "profile_kernel runs Nsight Compute, which profiles CUDA kernels",
    )


TORCH_ONLY = """import torch
from torch import nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, d_model, d_state):
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(d_model, d_state))
        self.proj_B = nn.Linear(d_model, d_state, bias=False)
        self.proj_C = nn.Linear(d_model, d_state, bias=False)
        self.proj_delta = nn.Linear(d_model, d_model, bias=True)
        self.D = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * self.D
"""


def test_the_profile_runs_a_contained_worker_under_ncu_and_reads_its_report_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole path but the GPU, with real processes: the truth worker makes the primary shape's data,
    the candidate worker runs its forward under a stand-in ncu (tests/fixtures/fake_ncu.py), which exports a
    report; the trusted import reads it back and the digest comes out. On the H200 the same path runs the
    real ncu (tests/test_gpu_profile_floor.py)."""
    from tools.judge import _profile

    monkeypatch.setenv("KERNEL_AGENT_NCU", str(REPO / "tests" / "fixtures" / "fake_ncu.py"))
    monkeypatch.setattr(_profile, "unavailable", lambda _problem: None)  # a CPU problem, as if it were CUDA
    problem = load_problem(REPO / "tests" / "problems" / "scan_tiny.yaml")
    result = profile_kernel(problem, TORCH_ONLY)
    assert result.status == "ok", f"{result.message}\n{result.output}"
    assert (result.shape, result.sizes["seq_len"]) == ("small", 128)  # the primary shape's sizes
    assert result.compile is not None
    assert result.compile.ok
    assert [(k.name.split("(")[0], k.launches) for k in result.kernels] == [(GEMM, 1), ("scan_fwd", 2)]
    assert result.tool.endswith("fake_ncu.py")
    assert result.seconds > 0
