"""The CPU sanitizer, as a user meets it: `agent bench PROBLEM KERNEL.py --sanitize` builds the candidate's
C++ with ASan and UBSan, runs the problem's smallest correctness case with the ASan runtime preloaded, and
turns a finding into a flag that makes the verdict incorrect. The exploit passes every correctness case,
so without the sanitizer it is judged correct; the same C++ with its stray write switched off (the shipped
baseline's code) comes out clean.

Slow: the kernel's C++ is built twice (plain, then instrumented), ~50-115 s a build on 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.candidates import scan_variants as v
from tests.helpers import REPO, TINY

pytestmark = pytest.mark.slow


def bench(kernel: Path, *flags: str) -> tuple[int, dict[str, object]]:
    env = {**os.environ, "NO_COLOR": "1"}
    if "--sanitize" in flags:
        # One ASan build in the whole test run: a precompiled header for the ASan flags (~3 min on 2 cores)
        # would never be used again. The plain builds keep the run's shared one.
        env["KERNEL_AGENT_PCH"] = "0"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "bench", str(TINY), str(kernel), "--json", *flags],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


@pytest.fixture(scope="module")
def oob(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("oob") / "oob_write.py"
    path.write_text(v.oob_write())
    return path


def test_an_out_of_bounds_write_passes_every_case_without_the_sanitizer(oob: Path) -> None:
    code, result = bench(oob)
    assert (code, result["status"], result["correct"]) == (0, "ok", True), result["message"]
    assert result["sanitizer"] is None


def test_an_out_of_bounds_write_is_an_asan_flag_under_sanitize(oob: Path) -> None:
    code, result = bench(oob, "--sanitize")
    assert code == 1
    assert (result["status"], result["correct"], result["speedup"]) == ("incorrect", False, None)
    assert all(c["status"] == "passed" for c in result["cases"])  # only the sanitizer sees it
    assert "sanitizer_asan" in result["flags"]
    report = result["sanitizer"]
    assert isinstance(report, dict)
    assert report["status"] == "flagged"
    assert report["case"] == "odd"  # the smallest correctness case
    (run,) = report["runs"]
    assert (run["tool"], run["status"], run["kernel"]) == ("asan", "errors", "selective_scan")
    assert "heap-buffer-overflow" in run["first"]
    assert "WRITE of size 4" in run["first"]
    assert run["seconds"] < run["budget_s"]
    flag = next(f for f in result["flag_details"] if f["name"] == "sanitizer_asan")  # type: ignore[union-attr]
    assert "selective_scan" in flag["message"]
    print(
        f"\nASan on the out-of-bounds kernel: {report['seconds']:.1f} s (budget {report['budget_s']:.0f} s)"
    )


def test_the_baseline_with_its_stray_write_off_is_clean_under_asan(tmp_path: Path) -> None:
    """The baseline's code, from the out-of-bounds kernel's C++ with its switch off: no false flag, and the
    ASan build is the one the test above made (a second would cost ~70-115 s on 2 cores)."""
    kernel = tmp_path / "baseline_stray_off.py"
    kernel.write_text(v.oob_write(on=False))
    code, result = bench(kernel, "--sanitize")
    report = result["sanitizer"]
    assert isinstance(report, dict)
    assert report["status"] == "clean", report["message"]
    assert (code, result["status"], result["flags"]) == (0, "ok", [])
    print(f"\nASan on the baseline's code: {report['seconds']:.1f} s (budget {report['budget_s']:.0f} s)")
