"""`agent run --parallel 2` end to end: a scripted playback on scan_tiny with the tools running for real.

Checked from the run's own log: timings never overlapped a compile (a CPU problem times on the host clock)
nor each other, every lease was given back, each trajectory played its kernels, the branch started from
the best, and the run ended with one consistent best (best.py, best.json, the final best event and the
summary all name the same kernel and speedup; each new best out-ranked the one before by its headline beyond the spread).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import cli, exits
from agent.best import SPREAD_SIGMAS, same_headline
from agent.runlog.data import RunData, overlapping_leases
from agent.runlog.events import BestEvent, BestRecord, RunInfo
from agent.runlog.reader import load_run
from tests.helpers.processes import alive, descendants

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "tests/problems/scan_tiny_playback.yaml"


@pytest.fixture(scope="module")
def parallel_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[RunData, subprocess.CompletedProcess[str]]:
    runs = tmp_path_factory.mktemp("runs")
    args = ["run", PROBLEM, "--model", "scripted", "--parallel", "2", "--branches", "1", "--max-turns", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", *args, "--runs-dir", str(runs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    (run_dir,) = runs.iterdir()
    return load_run(run_dir), done


def test_the_run_ends_with_every_trajectory_done(
    parallel_run: tuple[RunData, subprocess.CompletedProcess[str]],
) -> None:
    run, done = parallel_run
    assert run.summary is not None
    # Finished when the branch ends on the closing message, TurnLimit when every trajectory hit --max-turns
    # (which kernel is best, and so where the branch starts, depends on this machine's timings).
    expected = {"Finished": exits.OK, "TurnLimit": exits.TURN_LIMIT}[run.summary.exit_status]
    assert done.returncode == expected, done.stderr[-3000:]
    assert "2 trajectories at once, 1 branches" in done.stderr
    info = RunInfo.model_validate_json((run.path / "run.json").read_text())
    assert (info.format_version, info.config.parallel, info.config.branches) == (2, 2, 1)
    trajectories = run.trajectories
    assert [t.kind for t in trajectories] == ["sample", "sample", "branch"]
    assert all(t.exit_status == "TurnLimit" for t in trajectories[:2])
    assert [len(t.benchmarks) for t in trajectories[:2]] == [2, 2]
    assert all(c.status == "ok" for t in trajectories for c in t.benchmarks)
    assert trajectories[2].from_kernel is not None
    kernels = [c.kernel_path for t in trajectories for c in t.benchmarks]
    assert len(kernels) == len(set(kernels))  # every call saved its own file
    assert run.summary is not None
    assert run.summary.turns == sum(len(t.turns) for t in trajectories)


def test_leases_never_overlapped(parallel_run: tuple[RunData, subprocess.CompletedProcess[str]]) -> None:
    run, _ = parallel_run
    spans = run.leases
    assert all(s.released is not None for s in spans)
    benchmarks = sum(len(t.benchmarks) for t in run.trajectories)
    rechecks = sum(1 for t in run.turns for c in t.tool_calls if c.name == "final_recheck")
    timings = [s for s in spans if s.kind == "timing"]
    assert len(timings) == benchmarks + rechecks
    assert {s.resource for s in timings} == {"host"}
    assert len([s for s in spans if s.kind == "compile"]) == len(timings)
    assert overlapping_leases(spans, cpu_problem=True) == []


def test_one_consistent_best(parallel_run: tuple[RunData, subprocess.CompletedProcess[str]]) -> None:
    run, _ = parallel_run
    best = BestRecord.model_validate_json((run.path / "best.json").read_text())
    finals = [e for e in run.best_events if e.final]
    assert len(finals) == 1
    assert best.final
    assert (best.kernel_path, best.speedup) == (finals[0].kernel_path, finals[0].speedup)
    assert (run.path / "best.py").read_text() == (run.path / best.kernel_path).read_text()
    assert run.summary is not None
    assert run.summary.best_speedup == best.speedup
    running: list[BestEvent] = [e for e in run.best_events if not e.final]
    assert running, "no best was ever found"
    for before, after in zip(running, running[1:], strict=False):
        # Ranked by the headline (docs/ranking.md): each trajectory's speedup divides its own paired
        # reference, so a new best can have the higher median on a loaded host and still rank above.
        assert same_headline(before, after)
        assert after.rank * (1 - SPREAD_SIGMAS * (after.rse + before.rse)) > before.rank
    branch = run.trajectories[2]
    assert branch.from_kernel in {e.kernel_path for e in running}


def test_show_and_ls_on_the_run(
    parallel_run: tuple[RunData, subprocess.CompletedProcess[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    run, _ = parallel_run
    assert cli.main(["show", str(run.path), "--trajectory", "2", "--no-code"]) == 0
    out = capsys.readouterr().out
    assert "trajectory 2 · turn 2" in out
    assert "trajectory 1 · turn" not in out
    assert cli.main(["ls", str(run.path.parent)]) == 0
    assert "(3 traj.)" in capsys.readouterr().out


def test_ctrl_c_stops_every_trajectory_and_kills_their_processes(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "run", PROBLEM, "--model", "scripted", "--parallel", "2"]
        + ["--runs-dir", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        beats = list(tmp_path.glob("*/heartbeat.json"))
        phase = json.loads(beats[0].read_text())["phase"] if beats else ""
        seen |= descendants(proc.pid)
        if ("compiling" in phase or "benchmarking" in phase) and descendants(proc.pid):
            time.sleep(1.0)
            seen |= descendants(proc.pid)
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    (run_dir,) = tmp_path.iterdir()
    run = load_run(run_dir)
    assert run.summary is not None
    assert run.summary.exit_status == "Interrupted"
    assert all(t.exit_status == "Interrupted" for t in run.trajectories)
    time.sleep(1.0)
    assert not [pid for pid in seen if alive(pid)], "orphaned evaluator processes"
