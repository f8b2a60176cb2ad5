"""Host turns between a distributed run's workers (tests/helpers/host_turns.py): a `serial` test runs alone,
others beside each other, and a serial test waiting is not starved by tests that keep arriving. Real
processes, as pytest-xdist's workers are."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import REPO

HOLD = """
import sys, time
from pathlib import Path
from tests.helpers.host_turns import host_turn
folder, alone, seconds, log = Path(sys.argv[1]), sys.argv[2] == "alone", float(sys.argv[3]), Path(sys.argv[4])
with host_turn(folder, alone):
    with log.open("a") as fh:
        fh.write(f"{sys.argv[5]} in {time.monotonic()}\\n")
    time.sleep(seconds)
    with log.open("a") as fh:
        fh.write(f"{sys.argv[5]} out {time.monotonic()}\\n")
"""


def hold(folder: Path, how: str, seconds: float, log: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), how, str(seconds), str(log), name], cwd=REPO
    )


def spans(log: Path) -> dict[str, tuple[float, float]]:
    seen: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        name, edge, at = line.split()
        seen.setdefault(name, {})[edge] = float(at)
    return {name: (edges["in"], edges["out"]) for name, edges in seen.items()}


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_a_serial_test_runs_alone_and_is_not_starved_by_tests_that_keep_arriving(tmp_path: Path) -> None:
    log = tmp_path / "log"
    first = hold(tmp_path, "beside", 3.0, log, "first")
    time.sleep(1.0)  # `first` holds its turn
    also = hold(tmp_path, "beside", 3.0, log, "also")  # beside `first`: no wait
    time.sleep(0.5)
    serial = hold(tmp_path, "alone", 1.0, log, "serial")  # waits for both
    time.sleep(0.5)
    late = hold(tmp_path, "beside", 1.0, log, "late")  # arrives while `serial` waits: after it, not before
    for proc in (first, also, serial, late):
        assert proc.wait(timeout=60) == 0
    got = spans(log)
    assert overlap(got["first"], got["also"]), got  # two ordinary tests at once
    for other in ("first", "also", "late"):
        assert not overlap(got["serial"], got[other]), got
    assert got["late"][0] >= got["serial"][1], got
