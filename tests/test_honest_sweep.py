"""bench/honest_sweep.py's summary: thirty honest evaluations are clean only when every one is ok and
unflagged, and each kernel's median speedup is read apart for quiet and loaded rounds (an honest ratio does
not move with the host's load)."""

from __future__ import annotations

import sys
from typing import Any

from tests.helpers import REPO

sys.path.insert(0, str(REPO))
from bench.honest_sweep import summarize  # noqa: E402


def row(
    kernel: str, loaded: bool, speedup: float | None, status: str = "ok", flags: int = 0
) -> dict[str, Any]:
    return {"kernel": kernel, "loaded": loaded, "speedup": speedup, "status": status, "flags": ["f"] * flags}


def test_each_kernels_speedups_are_summarized_quiet_and_loaded_apart() -> None:
    rows = [
        row("sol/best.py", False, 150.0),
        row("sol/best.py", False, 170.0),
        row("sol/best.py", True, 140.0),
        row("sol/01_naive_fused.py", False, 34.0),
        row("sol/01_naive_fused.py", True, None, status="error"),
    ]
    summary = summarize(rows)
    assert summary["speedup_medians"] == {
        "best": {"quiet": 160.0, "loaded": 140.0},
        "01_naive_fused": {"quiet": 34.0, "loaded": None},  # no loaded speedup: none made up
    }
    assert (summary["evaluations"], summary["loaded"]) == (5, 2)


def test_a_flag_or_a_failure_is_not_clean() -> None:
    rows = [
        row("k.py", False, 2.0),
        row("k.py", True, 2.0, flags=1),
        row("k.py", False, None, status="timeout"),
    ]
    summary = summarize(rows)
    assert (summary["ok_clean"], summary["not_ok_or_flagged"]) == (1, 2)
