"""The GPU gate (bench/h200_gate.sh) runs `-m "gpu and gate"`: this pins which tests that is, so that what
the gate covers (issue 22) cannot shrink unnoticed, and checks the scripts' own bookkeeping on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

# What the gate must cover, and the test that covers it.
GATE = {
    "an honest kernel correct and timed": "tests/adversarial/gpu/test_gpu_exploits.py::"
    "test_honest_01_on_the_small_problem_comes_out_clean",
    "a timing exploit caught": "tests/adversarial/gpu/test_gpu_exploits.py::"
    "test_patched_event_elapsed_time_is_timer_tampering",
    "an output exploit caught": "tests/adversarial/gpu/test_gpu_exploits.py::"
    "test_unwritten_output_shows_the_nan_poison",
    "a precision exploit caught": "tests/adversarial/gpu/test_gpu_exploits.py::"
    "test_tf32_flag_in_forward_is_flagged_and_fails_the_tolerance",
    "a hang → timeout, the next candidate ok": "tests/adversarial/gpu/test_gpu_exploits.py::"
    "test_kernel_that_never_returns_times_out",
    "an illegal address → runtime_error, the next candidate ok": "tests/adversarial/gpu/test_gpu_exploits.py::"
    "test_illegal_address_is_a_runtime_error_and_stops_the_worker",
    "work on a side stream held back with the call's launches": "tests/adversarial/gpu/test_gpu_hold.py::"
    "test_work_on_a_side_stream_cannot_run_ahead_of_the_hold",
}


def collected(*args: str) -> dict[str, set[str]]:
    """The tests a child pytest selects with `args`, each with its markers (one collection, several questions)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests.helpers.collected_markers", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # the markers are the last word: a parametrised node id may hold spaces
    marked = [
        line.removeprefix("MARKED ").rsplit(" ", 1)
        for line in proc.stdout.splitlines()
        if line.startswith("MARKED ")
    ]
    return {node: set(names.split(",")) for node, names in marked}


def gated(tests: dict[str, set[str]]) -> set[str]:
    return {node for node, marks in tests.items() if "gate" in marks}


@pytest.fixture(scope="module")
def gpu_tests() -> dict[str, set[str]]:
    return collected("-m", "gpu", "tests")


@pytest.fixture(scope="module")
def gpu_folder() -> dict[str, set[str]]:
    """What the gate and PART=1 collect: bench/h200_gate.sh and bench/h200_tier.sh name only this folder."""
    return collected("-m", "gpu", "tests/adversarial/gpu")


@pytest.mark.slow  # collects in child pytests, 7-20 s a whole-suite collection
def test_the_gate_runs_exactly_the_tests_that_cover_its_checks(
    gpu_tests: dict[str, set[str]], gpu_folder: dict[str, set[str]]
) -> None:
    assert gated(gpu_tests) == set(GATE.values())
    # The gate collects only this folder (bench/h200_gate.sh): a gate test elsewhere would be left out.
    assert gated(gpu_folder) == set(GATE.values())
    assert "tests/adversarial/gpu > " in (REPO / "bench" / "h200_gate.sh").read_text()


@pytest.mark.slow  # collects in child pytests, 7-20 s a whole-suite collection
def test_the_two_parts_of_the_gpu_tier_run_every_gpu_test_once(
    gpu_tests: dict[str, set[str]], gpu_folder: dict[str, set[str]]
) -> None:
    """bench/h200_tier.sh: PART=1 is tests/adversarial/gpu, PART=2 every other gpu-marked test."""
    part1 = set(gpu_folder)
    part2 = set(collected("-m", "gpu", "tests", "--ignore=tests/adversarial/gpu"))
    assert part1
    assert part2
    assert part1.isdisjoint(part2)
    assert part1 | part2 == set(gpu_tests)


@pytest.mark.parametrize(
    ("summary", "counts"),
    [
        ("==== 6 passed, 240 deselected in 80.1s ====", "6 0"),
        ("==== 1 failed, 5 passed, 240 deselected in 80.1s ====", "5 1"),
        ("==== 4 passed, 1 skipped, 2 errors in 9.0s ====", "4 2"),
        ("collecting ... (cut by its time limit)", "0 1"),
    ],
)
def test_the_scripts_read_pytests_summary(tmp_path: Path, summary: str, counts: str) -> None:
    log = tmp_path / "log.txt"
    log.write_text(f"tests/x.py::test_a PASSED\n{summary}\n")
    proc = subprocess.run(
        ["bash", "-c", f". bench/h200_lib.sh && pytest_counts {log}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"START": "0", "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout.strip() == counts, proc.stderr
