"""`agent run` end to end on the CPU problem with the scripted playback: real C++ builds, real
benchmarks, the run's files, `agent bench` agreeing with best.json, and Ctrl-C leaving nothing behind.

The whole run at the problem's real sizes (~6 min on 2 cores) is in the long tier (docs/testing.md): CI
covers the same path on tests/problems/scan_tiny_playback.yaml (tests/test_cli_scripting.py: a scripted run
that builds, benchmarks, re-checks and writes its files; tests/test_final_recheck.py: the re-check winner).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.runlog.events import (
    BestEvent,
    BestRecord,
    ModelCallEvent,
    RunInfo,
    RunSummary,
    ToolCallEvent,
    TurnEndEvent,
)
from agent.runlog.reader import read_events
from tests.helpers.processes import alive, descendants
from tests.helpers.timing_report import describe_host, describe_timing, intervals_meet
from tools.results import BenchResult

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "problems/selective_scan_cpu.yaml"


def agent_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent.cli", *args]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    env.setdefault("CUDA_HOME", "/usr/local/cuda-13.0")
    env["COLUMNS"] = "120"
    return env


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    runs = tmp_path_factory.mktemp("runs")
    done = subprocess.run(
        agent_cmd("run", PROBLEM, "--runs-dir", str(runs)),  # no key, no --model: the bundled playback
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    (run_dir,) = runs.iterdir()
    return run_dir, done


@pytest.mark.long
def test_scripted_run_writes_a_complete_log(
    scripted_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, done = scripted_run
    assert done.returncode == 0, done.stderr[-3000:]
    assert "scripted playback" in done.stderr
    assert "ANTHROPIC_API_KEY is not set" in done.stderr

    info = RunInfo.model_validate_json((run_dir / "run.json").read_text())
    assert info.scripted
    assert info.provider == "scripted"
    assert info.problem == "selective_scan_cpu"
    assert info.environment.torch

    events = read_events(run_dir)
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    assert len(calls) == 4  # three kernels, then the closing message
    assert all(c.usage.total == 0 and c.cost_usd == 0 for c in calls)
    tools = [e for e in events if isinstance(e, ToolCallEvent) and e.name == "benchmark"]
    assert [t.kernel_path for t in tools] == ["kernels/001.py", "kernels/002.py", "kernels/003.py"]
    assert all(t.status == "ok" for t in tools), [t.summary for t in tools]
    trajectory = sorted((ROOT / "problems" / "selective_scan_cpu" / "trajectory").glob("*.py"))
    for t, source in zip(tools, trajectory, strict=True):
        assert (run_dir / str(t.kernel_path)).read_text() == source.read_text()
    assert len([e for e in events if isinstance(e, TurnEndEvent)]) == 4
    finals = [e for e in events if isinstance(e, BestEvent) and e.final]
    assert len(finals) == 1

    summary = RunSummary.model_validate_json((run_dir / "summary.json").read_text())
    assert summary.exit_status == "Finished"
    assert summary.scripted
    assert summary.turns == 4
    assert summary.cost_usd == 0
    assert summary.usage.total == 0
    assert summary.best_kernel == "best.py"
    assert summary.best_speedup == finals[0].speedup
    assert json.loads((run_dir / "heartbeat.json").read_text())["phase"] == "ended"


@pytest.mark.long
def test_best_is_the_recheck_winner_and_is_faster_than_the_naive_kernel(
    scripted_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, _ = scripted_run
    best = BestRecord.model_validate_json((run_dir / "best.json").read_text())
    assert best.final
    assert (run_dir / "best.py").read_text() == (run_dir / best.kernel_path).read_text()
    naive = next(
        e
        for e in read_events(run_dir)
        if isinstance(e, ToolCallEvent) and e.kernel_path == "kernels/001.py" and e.name == "benchmark"
    )
    assert best.speedup > naive.result["speedup"]
    assert best.kernel_path != "kernels/001.py"


@pytest.mark.long
def test_agent_bench_agrees_with_best_json(
    scripted_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, _ = scripted_run
    best = BestRecord.model_validate_json((run_dir / "best.json").read_text())
    done = subprocess.run(
        agent_cmd("bench", PROBLEM, str(run_dir / "best.py"), "--json", "--fresh-reference"),
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = json.loads(done.stdout)
    assert verdict["correct"] is True
    assert verdict["kernel_hash"] == best.bench["kernel_hash"]
    # Timings move between runs (both sides time the reference within their own evaluation). A verdict
    # that disagrees by more than this, with intervals that do not meet, is a real disagreement, unless the
    # harness said a loop ran on a busy host (then it told the user the speedup may be off). CI's machine
    # once gave 2.29x in the run's re-check and 3.56x here (2026-12-02); this machine 3.31-3.55x in both.
    bench, chosen = BenchResult.model_validate(verdict), BenchResult.model_validate(best.bench)
    close = verdict["speedup"] == pytest.approx(best.speedup, rel=0.4)
    assert close or _intervals_meet(bench, chosen) or _said_busy(bench) or _said_busy(chosen), "\n".join(
        [f"agent bench: {describe_timing(bench)}", f"best.json: {describe_timing(chosen)}", describe_host()]
    )


def _intervals_meet(a: BenchResult, b: BenchResult) -> bool:
    ta, tb = a.primary_timing, b.primary_timing
    if ta is None or tb is None or ta.speedup_interval is None or tb.speedup_interval is None:
        return False
    return intervals_meet(ta.speedup_interval, tb.speedup_interval)


def _said_busy(result: BenchResult) -> bool:
    t = result.primary_timing
    loops = [] if t is None else [t.candidate, None if t.reference_cached else t.reference, t.reference_check]
    return any(s is not None and s.host_was_busy for s in loops)


def test_ctrl_c_stops_the_run_and_kills_its_processes(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        agent_cmd("run", PROBLEM, "--model", "scripted", "--runs-dir", str(tmp_path)),
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        heartbeats = list(tmp_path.glob("*/heartbeat.json"))
        phase = json.loads(heartbeats[0].read_text())["phase"] if heartbeats else ""
        seen |= descendants(proc.pid)
        if phase in ("compiling", "benchmarking") and descendants(proc.pid):
            time.sleep(1.0)  # let the evaluator's children get going
            seen |= descendants(proc.pid)
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    assert seen, "no evaluator process was running"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)

    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    (run_dir,) = tmp_path.iterdir()
    summary = RunSummary.model_validate_json((run_dir / "summary.json").read_text())
    assert summary.exit_status == "Interrupted"
    time.sleep(1.0)
    assert not [pid for pid in seen if alive(pid)], "orphaned evaluator processes"
