"""The sanitizer's verdicts from what the tools wrote (tests/fixtures/sanitizer/), without a GPU: each tool's
findings counted from its own summary and named by kernel; the tool's own failure not mistaken for a
finding or a pass; findings in library kernels said, not flagged; the exit code a witness the log cannot
overrule; and the report folded into a benchmark's verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import wire
from tools.judge._sanitize import (
    FOUND_EXIT,
    judge_asan_run,
    judge_cuda_run,
    report_of,
    sanitizer_command,
    sanitizer_flags,
    with_sanitizer,
)
from tools.judge._sanitizer_output import kernel_of, parse_compute_sanitizer, parse_native
from tools.results import BenchResult, SanitizerReport, SanitizerRun
from tools.supervise import ChildOutcome

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sanitizer"
OWN = frozenset({"adv_oob_read", "adv_smem_race", "adv_uninit_shared", "adv_uninit_global"})


def log(name: str) -> str:
    return (FIXTURES / name).read_text()


def outcome(
    returncode: int | None = 0, *, case_done: bool = True, timed_out: bool = False, output: str = ""
) -> ChildOutcome:
    messages: list[wire.WorkerMessage] = [wire.Ready()]
    if case_done:
        messages += [wire.CaseDone(name="odd", seconds=0.1, mutated=False), wire.CasesDone()]
    return ChildOutcome(
        returncode=returncode, timed_out=timed_out, seconds=12.0, messages=messages, output=output,
        timeout_reason="its budget of 120 s ran out during case odd" if timed_out else "",
    )  # fmt: skip


# --- compute-sanitizer's log -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "errors", "kernel", "header"),
    [
        ("memcheck_oob_read.log", 2, "adv_oob_read", "Invalid __global__ read of size 4 bytes"),
        ("racecheck_race.log", 1, "adv_smem_race", "Error: Race reported between Write access"),
        ("initcheck_global.log", 64, "adv_uninit_global", "Uninitialized __global__ memory read"),
        ("initcheck_shared.log", 63, "adv_uninit_shared", "Uninitialized __shared__ memory read"),
        ("synccheck_divergent.log", 1, "adv_divergent_barrier", "Barrier error detected"),
    ],
)
def test_each_tools_findings_are_counted_and_named(
    fixture: str, errors: int, kernel: str, header: str
) -> None:
    found = parse_compute_sanitizer(log(fixture))
    assert found.errors == errors
    assert found.kernel == kernel
    assert found.first.startswith(header)
    assert "Host Frame" not in found.first  # the first lines of the finding, not its backtrace
    assert found.tool_failure == ""


def test_the_first_finding_keeps_its_detail_lines() -> None:
    found = parse_compute_sanitizer(log("memcheck_oob_read.log"))
    lines = found.first.splitlines()
    assert lines[1].startswith("at adv_oob_read(const float *, long long, float *)+0x70 in ")
    assert lines[2] == "by thread (0,0,0) in block (0,0,0)"
    assert "1 bytes after the nearest allocation" in lines[4]
    assert found.shown[1].text.startswith("Program hit cudaErrorLaunchFailure")  # the second finding
    assert found.shown[1].kernel == ""


def test_racecheck_counts_its_errors_not_its_warnings() -> None:
    found = parse_compute_sanitizer(log("racecheck_warnings_only.log"))
    assert (found.errors, found.warnings) == (0, 1)
    assert found.kernel == "warp_reduce"


def test_a_clean_log_has_no_findings() -> None:
    found = parse_compute_sanitizer(log("clean.log"))
    assert (found.errors, found.shown, found.tool_failure) == (0, (), "")


def test_the_tools_own_failure_is_neither_a_finding_nor_a_pass() -> None:
    found = parse_compute_sanitizer(log("device_not_supported.log"))
    assert found.errors is None
    assert found.shown == ()
    assert found.tool_failure.startswith("Device not supported")
    run = judge_cuda_run("memcheck", outcome(0, case_done=False), log("device_not_supported.log"), 120.0)
    assert run.status == "unavailable"
    assert "Device not supported" in run.message


@pytest.mark.parametrize(
    ("location", "kernel"),
    [
        ("0x70 in kern(float*, int)", "kern"),
        ("kern(float const*)+0x70 in a.cu:6", "kern"),
        ("0x6360 in /home/u/conv.cu:123:convolution(pixel const*, int)", "convolution"),
        ("void ns::gemm<(int)8, float>(T1, T2)+0x4a0", "ns::gemm<(int)8, float>"),
        ("unaligned_kernel()+0x70 in memcheck_demo.cu:6", "unaligned_kernel"),
        ("0x2c8 in adv(float *)", "adv"),
    ],
)
def test_the_kernel_is_read_from_every_location_format(location: str, kernel: str) -> None:
    assert kernel_of(location) == kernel


# --- one run's verdict -------------------------------------------------------------------------------------


def test_a_finding_in_the_log_is_an_error_run_with_its_flag() -> None:
    run = judge_cuda_run(
        "memcheck", outcome(FOUND_EXIT, case_done=False), log("memcheck_oob_read.log"), 120.0, OWN
    )
    assert (run.status, run.flag, run.errors, run.kernel) == (
        "errors",
        "sanitizer_memcheck",
        2,
        "adv_oob_read",
    )
    assert run.first.startswith("Invalid __global__ read")


def test_the_exit_code_is_a_witness_the_log_cannot_overrule() -> None:
    """A log rewritten to say 0 errors (native code can write anywhere) still loses to the tool's exit code."""
    run = judge_cuda_run("memcheck", outcome(FOUND_EXIT), log("clean.log"), 120.0)
    assert run.status == "errors"
    assert "exit code" in run.first


def test_the_candidates_own_output_never_makes_a_pass() -> None:
    """No log (the candidate removed it) and a forged summary on its stdout: not clean."""
    forged = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    run = judge_cuda_run("memcheck", outcome(0, output=forged), "", 120.0)
    assert run.status == "failed"
    assert "no ERROR SUMMARY" in run.message


def test_a_clean_run_needs_the_case_done_and_a_summary_of_zero() -> None:
    assert judge_cuda_run("initcheck", outcome(0), log("clean.log"), 120.0).status == "clean"
    unfinished = judge_cuda_run("initcheck", outcome(1, case_done=False), log("clean.log"), 120.0)
    assert unfinished.status == "failed"


def test_running_out_of_budget_is_a_timeout_not_a_crash() -> None:
    run = judge_cuda_run("racecheck", outcome(None, case_done=False, timed_out=True), "", 120.0)
    assert run.status == "timeout"
    assert "its budget of 120 s ran out" in run.message


def test_initcheck_findings_only_in_library_kernels_are_said_not_flagged() -> None:
    run = judge_cuda_run("initcheck", outcome(FOUND_EXIT), log("initcheck_library_only.log"), 120.0, OWN)
    assert run.status == "clean"
    assert "gemv2T_kernel_val" in run.message
    assert "not flagged" in run.message
    # memcheck's findings count wherever they are: a library kernel reading out of bounds was handed bad sizes
    memcheck = judge_cuda_run("memcheck", outcome(FOUND_EXIT), log("initcheck_library_only.log"), 120.0, OWN)
    assert memcheck.status == "errors"


def test_the_command_uses_only_the_options_this_version_lists(tmp_path: Path) -> None:
    full = (FIXTURES / "help.txt").read_text()
    cmd = sanitizer_command("cs", "initcheck", tmp_path / "i.log", full)
    assert cmd[:6] == ["cs", "--tool", "initcheck", "--error-exitcode", str(FOUND_EXIT), "--print-limit"]
    assert ["--initcheck-address-space", "all"] == cmd[cmd.index("--initcheck-address-space") :][:2]
    assert "--target-processes" in cmd
    assert "--check-exit-code" in cmd
    old = "\n".join(
        line for line in full.splitlines() if "address-space" not in line and "--target" not in line
    )
    bare = sanitizer_command("cs", "initcheck", tmp_path / "i.log", old)
    assert "--initcheck-address-space" not in bare
    assert "--target-processes" not in bare


# --- ASan and UBSan ----------------------------------------------------------------------------------------


def test_an_asan_report_names_the_kind_and_the_function() -> None:
    found = parse_native(log("asan_heap_overflow.log"))
    assert (found.asan, found.ubsan, found.kind) == (1, 0, "asan")
    assert found.first.startswith("ERROR: AddressSanitizer: heap-buffer-overflow")
    assert "WRITE of size 4" in found.first
    assert found.function == "overflow"


def test_a_ubsan_report_is_its_own_kind() -> None:
    found = parse_native(log("ubsan_shift.log"))
    assert (found.asan, found.ubsan, found.kind) == (0, 1, "ubsan")
    assert "runtime error: shift exponent" in found.first
    assert found.function == "shift"


def test_the_asan_run_is_judged_by_its_exit_code_and_logs() -> None:
    flagged = judge_asan_run(outcome(FOUND_EXIT, case_done=False), log("asan_heap_overflow.log"), 300.0)
    assert (flagged.status, flagged.flag, flagged.kernel) == ("errors", "sanitizer_asan", "overflow")
    silent = judge_asan_run(outcome(FOUND_EXIT, case_done=False), "", 300.0)
    assert silent.status == "errors"
    imported = wire.Imported(seconds=1.0, builds=[], failed_build=False, errors=[], has_model_new=True)
    clean = outcome(0)
    clean.messages.insert(1, imported)
    assert judge_asan_run(clean, "", 300.0).status == "clean"
    assert judge_asan_run(outcome(0), "", 300.0).status == "failed"  # no import seen: never a pass


# --- the report, and the benchmark's verdict -----------------------------------------------------------------


def _ok_result() -> BenchResult:
    return BenchResult(status="ok", correct=True, speedup=3.0, message="all 2 correctness cases passed")


def _run(tool: str, status: str, **fields: object) -> SanitizerRun:
    return SanitizerRun(tool=tool, status=status, flag=f"sanitizer_{tool}", budget_s=120.0, **fields)  # type: ignore[arg-type]


def test_a_finding_makes_a_correct_benchmark_incorrect_with_a_flag_naming_the_kernel() -> None:
    runs = [
        _run(
            "memcheck",
            "errors",
            errors=2,
            kernel="adv_oob_read",
            first="Invalid __global__ read of size 4 bytes",
        ),
        _run("racecheck", "clean", errors=0),
    ]
    report = report_of(runs, "odd", 30.0)
    result = with_sanitizer(_ok_result(), report)
    assert (result.status, result.correct, result.speedup) == ("incorrect", False, None)
    assert result.flags == ["sanitizer_memcheck"]
    flag = result.flag_details[0]
    assert flag.disqualifying
    assert "memcheck found 2 errors in adv_oob_read: Invalid __global__ read" in flag.message
    assert result.message.startswith("sanitizer: memcheck found 2 errors")
    assert result.sanitizer == report
    assert report.status == "flagged"
    assert report.budget_s == 240.0


def test_a_timeout_is_a_flag_that_does_not_disqualify_and_says_it_was_not_checked() -> None:
    runs = [_run("memcheck", "clean", errors=0), _run("racecheck", "timeout", message="ran out")]
    report = report_of(runs, "odd", 130.0)
    assert report.status == "incomplete"
    result = with_sanitizer(_ok_result(), report)
    assert result.correct
    assert [(f.name, f.disqualifying) for f in sanitizer_flags(report)] == [("sanitizer_timeout", False)]
    assert any(n.startswith("sanitizer: not fully sanitized") for n in result.notices)


def test_no_sanitizer_here_is_a_notice_never_a_silent_pass() -> None:
    runs = [_run("asan", "unavailable", message="no ASan runtime")]
    result = with_sanitizer(_ok_result(), report_of(runs, "odd", 0.1))
    assert result.correct
    assert result.sanitizer is not None
    assert result.sanitizer.status == "unavailable"
    assert result.notices == ["sanitizer: not sanitized: no ASan runtime"]


def test_a_clean_report_changes_nothing_but_carries_itself() -> None:
    report = report_of([_run("memcheck", "clean", errors=0)], "odd", 20.0)
    assert report == SanitizerReport.model_validate_json(report.model_dump_json())
    result = with_sanitizer(_ok_result(), report)
    assert (result.status, result.flags, result.notices) == ("ok", [], [])
    assert result.sanitizer is not None
    assert result.sanitizer.message == "no errors"


def test_without_compute_sanitizer_a_cuda_problem_is_unavailable_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tools.judge import sanitize
    from tools.problem import load_problem

    monkeypatch.setenv("KERNEL_AGENT_COMPUTE_SANITIZER", "/nonexistent/compute-sanitizer")
    problem = load_problem(Path(__file__).resolve().parent / "adversarial" / "gpu" / "scan_gpu_small.yaml")
    report = sanitize(problem, "class ModelNew:\n    pass\n")
    assert report.status == "unavailable"
    assert "compute-sanitizer not found" in report.message
    assert [(r.tool, r.status, r.budget_s) for r in report.runs] == [
        ("memcheck", "unavailable", 120.0),
        ("racecheck", "unavailable", 120.0),
        ("initcheck", "unavailable", 120.0),
    ]
    assert report.case == "tf32_probe"  # the smallest by volume (1·64·1024·16)


def test_a_ubsan_finding_on_stderr_is_read_when_the_exit_code_says_one_was_found() -> None:
    """Beside ASan, UBSan writes to stderr whatever its log_path: the output names it, the exit code decides."""
    said = outcome(FOUND_EXIT, case_done=False, output=log("ubsan_shift.log"))
    run = judge_asan_run(said, "", 300.0)
    assert (run.status, run.flag, run.kernel) == ("errors", "sanitizer_ubsan", "shift")
    printed = outcome(0, output=log("ubsan_shift.log"))  # the same text printed by a run that exited 0
    printed.messages.insert(
        1, wire.Imported(seconds=1.0, builds=[], failed_build=False, errors=[], has_model_new=True)
    )
    assert judge_asan_run(printed, "", 300.0).status == "clean"
