"""bench/honest_sweep.py's summary: thirty honest evaluations are clean only when every one is ok and
unflagged, and each kernel's median speedup is read apart for quiet and loaded rounds (an honest ratio does
not move with the host's load); the headline's max/min stands beside the eager speedup's (issue 50)."""

from __future__ import annotations

import sys
from typing import Any

from tests.helpers import REPO

sys.path.insert(0, str(REPO))
from bench.honest_sweep import stability_lines, summarize  # noqa: E402


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


def test_the_headlines_spread_is_reported_beside_the_eager_speedups() -> None:
    def timed(headline: float, speedup: float, eager: float) -> dict[str, Any]:
        return {**row("sol/best.py", False, speedup), "headline_metric": "floor_fraction", "headline": headline,
                "eager_speedup": eager}  # fmt: skip

    rows = [timed(0.41, 3.0, 126.0), timed(0.43, 3.1, 169.0), timed(0.42, 3.05, 150.0)]
    stable = summarize(rows)["stability"]["best"]
    assert stable["headline_metric"] == "floor_fraction"
    assert stable["headline"] == {"max": 0.43, "min": 0.41, "max_over_min": 0.43 / 0.41}
    assert stable["eager_speedup"]["max_over_min"] == 169.0 / 126.0
    assert stable["stable"]  # 1.05 <= 1.10
    lines = stability_lines(summarize(rows))
    assert lines == [
        "best: headline floor_fraction max/min 1.049 (0.41-0.43) <= 1.1 · launch-free speedup 1.033 (3-3.1) · "
        "eager speedup 1.341 (126-169)"
    ]
    assert not summarize([*rows, timed(0.5, 3.6, 150.0)])["stability"]["best"]["stable"]
