"""bench/timeline.py's summary (`--summary`): one compact object per configuration, its rate against the same
truth mode's single trajectory, and every verdict other than ok counted (the scripted candidates are correct)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import timeline  # noqa: E402


def _row(share: str, n: int, per_hour: float, correct: int = 12) -> dict[str, object]:
    return {
        "share_truth": share, "parallel": n, "candidates": 12, "correct": correct, "per_hour": per_hour,
        "truth_busy_pct": 97.3, "timing_lease_overlaps": 0, "truth_sources": {"shared": 6, "made_ahead": 6},
        "events": [(0.0, 1, "truth", "spawn", None)],
    }  # fmt: skip


def test_each_configuration_is_compared_with_its_own_modes_single_trajectory() -> None:
    rows = [_row("off", 1, 1000.0), _row("off", 4, 1800.0), _row("on", 1, 900.0), _row("on", 4, 2250.0, 11)]
    info = {"gpu": "NVIDIA H200", "harness_sha": "abc"}
    out = [timeline.compact(row, rows[: i + 1], info) for i, row in enumerate(rows)]
    assert [(o["share_truth"], o["parallel"], o["x_one"]) for o in out] == [
        ("off", 1, 1.0), ("off", 4, 1.8), ("on", 1, 1.0), ("on", 4, 2.5),
    ]  # fmt: skip
    assert [o["not_ok"] for o in out] == [0, 0, 0, 1]
    assert out[3]["truth_busy_pct"] == 97.3
    assert out[3]["gpu"] == "NVIDIA H200"
    assert "events" not in out[3]  # compact: no timeline
