"""The timeline `tools.supervise.listen` hears beyond workers' messages (each evaluation's turns on its
device), and bench/timeline.py's reading of it: who held the device how, how busy the truth servers were."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO
from tools.supervise import DeviceTurns, SharedExclusiveLock, listen

sys.path.insert(0, str(REPO))
from bench import timeline  # noqa: E402


def test_device_turns_are_told_when_taken_and_when_given_back() -> None:
    heard: list[tuple[str, str, str | None]] = []
    turns = DeviceTurns(SharedExclusiveLock())
    with listen(lambda who, event, name: heard.append((who, event, name))):
        turns.to("shared")
        turns.to("exclusive")
        turns.to("exclusive")  # no change, nothing told
        turns.close()
    name = turns.name
    assert heard == [
        ("device", "shared", name),
        ("device", "none", name),
        ("device", "exclusive", name),
        ("device", "none", name),
    ]


def test_the_summary_splits_the_wall_time_by_what_held_the_device() -> None:
    events: list[timeline.Event] = [  # as heard: in order
        (0.0, 1, "device", "shared", "a"),
        (1.0, 2, "device", "shared", "b"),  # two shared holders overlap from 1 to 2
        (1.0, 3, "truth", "asked", "TruthRequest"),
        (1.5, 3, "truth", "spawn", "TruthRequest"),
        (2.0, 1, "device", "none", "a"),
        (3.0, 2, "device", "none", "b"),
        (3.0, 2, "device", "exclusive", "b"),
        (4.0, 3, "truth", "exit", None),
        (5.0, 2, "device", "none", "b"),
        (6.0, 9, "candidate", "spawn", None),
        (7.0, 9, "candidate", "exit", None),
    ]
    s = timeline.summary(events, wall=10.0)
    assert s["device_exclusive_pct"] == 20.0
    assert s["device_shared_only_pct"] == 30.0
    assert s["device_idle_pct"] == 50.0
    assert s["truth_busy_pct"] == 25.0
    assert s["candidate_alive_pct"] == 10.0
    assert s["requests"] == {"TruthRequest": {"count": 1, "mean_s": 2.5, "mean_queued_s": 0.5}}


def test_spans_outside_others_are_cut_where_they_overlap() -> None:
    assert timeline.minus([(0.0, 10.0)], [(2.0, 3.0), (5.0, 6.0)]) == [(0.0, 2.0), (3.0, 5.0), (6.0, 10.0)]
    assert timeline.length([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0


def test_phase_means_say_where_an_evaluation_spends_its_seconds() -> None:
    phases = [
        {"truth_wait": 1.0, "timing": 1.0, "seconds": 3.0},
        {"truth_wait": 0.0, "timing": 2.0, "seconds": 4.0},
    ]
    assert timeline.phase_means(phases) == (
        "truth_wait 0.50, cases 0.00, timing 1.50, candidate_exit 0.00, judge 0.00, reference_check 0.00, seconds 3.50"
    )
    assert timeline.phase_means([]) == "no evaluation"


def test_the_speedup_shift_compares_the_same_kernels_medians() -> None:
    quiet = [("a", 10.0), ("a", 12.0), ("b", 2.0), ("c", 5.0)]
    busy = [("a", 12.1), ("b", 2.2), ("b", 2.2), ("d", 1.0)]
    assert timeline.speedup_shift(quiet, busy) == pytest.approx(1.1)  # a: 12.1/11, b: 2.2/2
    assert timeline.speedup_shift(quiet, [("d", 1.0)]) is None


def test_the_peak_memory_is_the_most_nvidia_smi_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "nvidia-smi"  # says 100, 300, 200, 200, ... MiB
    fake.write_text(
        '#!/bin/sh\nn=$(cat "$0.n" 2>/dev/null || echo 0); echo $((n + 1)) > "$0.n"\n'
        "case $n in 0) echo 100;; 1) echo 300;; *) echo 200;; esac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with timeline.PeakMemory(every=0.05) as memory:
        time.sleep(0.5)
    assert memory.peak == 300
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with timeline.PeakMemory(every=0.05) as memory:
        pass
    assert memory.peak is None
