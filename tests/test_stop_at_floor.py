"""`agent run --stop-at-floor F`: the run ends (exit status FloorReached, exit code 0) once its best kernel
reaches fraction F of the speed-of-light floor (geomean over the timing shapes); refused on a problem with no floor; the
prompt states the floor and the stop; `--baselines` puts the best against each baseline in summary.json.
The run is a real scripted playback of the CPU problem's bundled
kernels at scan_tiny's sizes (tests/problems/scan_tiny_playback.yaml) with the CPU problem's floor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent import exits
from agent.budget import Budget, floor_reached
from agent.prompt import system_prompt
from agent.runlog.events import RunSummary, TimedKernel
from tools.problem import load_problem
from tools.results import HostPeaks

REPO = Path(__file__).resolve().parent.parent
PLAYBACK = REPO / "tests" / "problems" / "scan_tiny_playback.yaml"
FLOOR = (
    "floor:\n"
    '  flops: "2*batch_size*seq_len*d_model*(d_model + 2*d_state) + 7*batch_size*seq_len*d_model*d_state"\n'
    '  bytes: "4*(3*batch_size*seq_len*d_model + 2*batch_size*seq_len*d_state + d_model*d_state + d_model)"\n'
)


def kernel(median_ms: float, floor_ms: float | None) -> TimedKernel:
    return TimedKernel(
        turn=1, kernel_path="kernels/001.py", speedup=2.0, median_ms=median_ms, rse=0.01, floor_ms=floor_ms
    )


def test_the_stop_comes_at_the_fraction_and_not_before() -> None:
    budget = Budget(stop_at_floor=0.8)
    assert floor_reached(budget, kernel(1.0, 0.7)) is None
    reached = floor_reached(budget, kernel(1.0, 0.8))
    assert isinstance(reached, exits.FloorReached)
    assert str(reached) == "best kernel at 80.0% of the speed-of-light floor reached --stop-at-floor 0.8"
    assert floor_reached(budget, kernel(1.0, None)) is None  # no floor known: never a stop
    assert floor_reached(Budget(), kernel(1.0, 5.0)) is None
    assert exits.run_exit_code(reached, has_correct_kernel=True) == exits.OK


def test_the_prompt_states_the_floor_and_the_stop() -> None:
    problem = load_problem(REPO / "problems" / "selective_scan_cpu.yaml")
    peaks = HostPeaks(status="ok", fp32_tflops=0.5, bandwidth_gbs=20.0)
    prompt = system_prompt(problem, "CPU: test, 2 cores.", Budget(stop_at_floor=0.5), peaks=peaks)
    assert "## Speed-of-light floor\nmax(FLOPs / fp32 FLOP/s, bytes / memory bandwidth)" in prompt
    assert "- b8_l1024_d512: 5.03 GFLOP, 51.4 MB -> floor 10.066 ms (compute-bound)" in prompt
    assert (
        "- the run ends as soon as your best kernel reaches 50% of the speed-of-light floor (geomean over the "
        "timing shapes)" in prompt
    )


def agent(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    env |= {"COLUMNS": "200", "NO_COLOR": "1", "PYTHONPATH": str(REPO), "KERNEL_AGENT_COMPILE_LIMIT": "1"}
    cmd = [sys.executable, "-m", "agent.cli", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)


def test_a_problem_without_a_floor_refuses_the_stop(tmp_path: Path) -> None:
    done = agent("run", str(PLAYBACK), "--stop-at-floor", "0.5", "--runs-dir", str(tmp_path))
    assert done.returncode == exits.USAGE
    assert "--stop-at-floor: scan_tiny_playback states no floor" in done.stdout + done.stderr


@pytest.mark.slow
def test_a_scripted_run_stops_once_its_best_reaches_the_floor_fraction(tmp_path: Path) -> None:
    """Any correct kernel is within 10,000x of its floor at these sizes (a loaded 2-core host timed the naive
    kernel at 0.06% of it): the first benchmark stops the run,
    where the playback would have gone on for three more turns."""
    spec = PLAYBACK.read_text().replace("reference: ../../problems/", f"reference: {REPO}/problems/")
    spec = spec.replace(
        "trajectory: scan_tiny_playback/", f"trajectory: {PLAYBACK.parent}/scan_tiny_playback/"
    )
    problem = tmp_path / "scan_tiny_floor.yaml"
    problem.write_text(spec.replace("timing_config:", FLOOR + "timing_config:"))
    runs = str(tmp_path / "runs")
    done = agent(
        "run", str(problem), "--stop-at-floor", "0.0001", "--baselines", "--runs-dir", runs, "--json"
    )
    assert done.returncode == exits.OK, done.stderr[-2000:]
    data = json.loads(done.stdout)
    summary = RunSummary.model_validate_json((Path(data["run_dir"]) / "summary.json").read_text())
    assert summary.exit_status == "FloorReached"
    assert summary.turns == 1
    assert summary.best_floor_fraction is not None
    assert summary.best_floor_fraction >= 0.0001  # the re-checked best's
    assert "reached --stop-at-floor 0.0001" in summary.message
    assert summary.baselines is not None  # --baselines: the re-checked best against each
    by_name = {b.name: b for b in summary.baselines.baselines}
    assert list(by_name) == ["eager", "torch_compile"]
    assert by_name["eager"].speedup == pytest.approx(summary.best_speedup, rel=1e-6)
    assert (by_name["torch_compile"].status, by_name["torch_compile"].message) == (
        "timeout",
        "did not compile within 1 s",
    )
