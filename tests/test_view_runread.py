"""Reading run directories back: the fixtures, killed runs, running runs, and paths that are not runs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from agent.runlog.events import Heartbeat, RunInfo, TurnEndEvent, Usage
from agent.runlog.reader import RunReadError, derive_status, list_runs, load_run

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = FIXTURES / "runs"
COMPLETE = RUNS / "20261129T101500Z-selective_scan-a1b2c3"
PARTIAL = RUNS / "20261129T120000Z-selective_scan-d4e5f6"
SCRIPTED = RUNS / "20261129T090000Z-selective_scan_cpu-5c0000"
NOW = datetime.fromisoformat("2026-11-30T08:00:00+00:00")


def copy_run(src: Path, dest_root: Path) -> Path:
    dest = dest_root / src.name
    shutil.copytree(src, dest)
    return dest


def test_complete_run_reads_back() -> None:
    run = load_run(COMPLETE, now=NOW)
    assert run.status.label == "finished (submitted)"
    assert [t.turn for t in run.turns] == [1, 2, 3, 4, 5]
    assert all(t.complete for t in run.turns)
    assert run.notes == []
    ends = [e for e in run.events if isinstance(e, TurnEndEvent)]
    assert run.usage == sum((e.usage for e in ends), Usage())
    assert run.usage.total == 37_088
    assert run.best_speedup == 31.2
    assert run.best_kernel_path == "kernels/005.py"
    assert sorted(run.kernels) == ["best.py", *(f"kernels/00{i}.py" for i in range(1, 6))]
    assert run.kernels["best.py"] == run.kernels["kernels/005.py"]
    turn1 = run.turns[0]
    assert (turn1.turn_seconds, turn1.llm_seconds, turn1.tool_seconds) == (127.4, 48.5, 78.8)
    assert (turn1.usage.tokens_in, turn1.usage.output_tokens, turn1.usage.total) == (2805, 4663, 7468)


def test_partial_run_tolerates_a_truncated_last_line() -> None:
    run = load_run(PARTIAL, now=NOW)
    assert run.summary is None
    assert run.status.label == "killed"
    assert run.notes == ["events.jsonl line 9 is truncated (the writer was cut off); ignored"]
    last = run.turns[-1]
    assert (last.turn, last.complete, last.tool_calls) == (3, False, [])
    # the model asked for a benchmark whose result never reached the log
    [pending] = last.unanswered
    assert pending.name == "benchmark"
    assert pending.kernel_code is not None
    assert "scan_kernel<<<grid, 32>>>" in pending.kernel_code
    # totals fall back to the turns when there is no summary.json
    assert run.turn_count == 3
    assert run.llm_seconds == pytest.approx(40.2 + 22.7 + 30.4)
    assert run.best_speedup == 5.1
    assert run.wall_seconds is not None
    assert run.wall_seconds > 0


def test_scripted_run_has_no_tokens() -> None:
    run = load_run(SCRIPTED, now=NOW)
    assert run.scripted
    assert run.usage == Usage()
    assert run.cost_usd == 0.0
    assert run.status.label == "finished (submitted)"


def test_a_middle_line_that_does_not_parse_is_skipped_and_named(tmp_path: Path) -> None:
    run_dir = copy_run(COMPLETE, tmp_path)
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    lines[2] = '{"event": "no_such_event", "turn": 1}'
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    run = load_run(run_dir, now=NOW)
    assert len(run.events) == len(lines) - 1
    assert len(run.notes) == 1
    assert run.notes[0].startswith("events.jsonl line 3 is unreadable")


def write_heartbeat(run_dir: Path, pid: int, host: str, updated_at: datetime, phase: str) -> None:
    beat = Heartbeat(pid=pid, host=host, updated_at=updated_at.isoformat(), phase=phase)
    (run_dir / "heartbeat.json").write_text(beat.model_dump_json())


def test_fresh_heartbeat_of_a_live_process_is_running(tmp_path: Path) -> None:
    run_dir = copy_run(PARTIAL, tmp_path)
    write_heartbeat(run_dir, os.getpid(), socket.gethostname(), NOW, "benchmarking")
    assert load_run(run_dir, now=NOW).status.label == "running (benchmarking)"


def test_fresh_heartbeat_of_a_dead_process_is_killed(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(child.stdout)
    run_dir = copy_run(PARTIAL, tmp_path)
    write_heartbeat(run_dir, dead_pid, socket.gethostname(), NOW, "benchmarking")
    assert load_run(run_dir, now=NOW).status.label == "killed"


def test_heartbeat_age_decides_for_another_host() -> None:
    beat = Heartbeat(pid=1, host="elsewhere", updated_at="2026-11-30T07:59:30+00:00", phase="compiling")
    assert derive_status(None, None, beat, NOW, "here").label == "running (compiling)"
    stale = beat.model_copy(update={"updated_at": "2026-11-30T07:50:00+00:00"})
    assert derive_status(None, None, stale, NOW, "here").label == "killed"
    assert derive_status(None, None, None, NOW, "here").label == "killed"


def test_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(RunReadError, match=r"is not a run \(no run\.json\)"):
        load_run(tmp_path)
    with pytest.raises(RunReadError, match="no such run directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "run.json").write_text('{"hello": "world"}')
    with pytest.raises(RunReadError, match=r"run\.json is not a run record \(run_id: Field required\)"):
        load_run(tmp_path)


def test_unknown_format_version(tmp_path: Path) -> None:
    run_dir = copy_run(COMPLETE, tmp_path)
    info = RunInfo.model_validate_json((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(info.model_copy(update={"format_version": 3}).model_dump_json())
    with pytest.raises(RunReadError, match="written by format version 3; this agent reads 1, 2"):
        load_run(run_dir)


def test_list_runs_newest_first_with_an_unreadable_one(tmp_path: Path) -> None:
    for run in (COMPLETE, PARTIAL, SCRIPTED):
        copy_run(run, tmp_path)
    broken = tmp_path / "20261130T000000Z-selective_scan-bad000"
    broken.mkdir()
    (broken / "run.json").write_text('{"format_version": 7}')
    (tmp_path / "notes").mkdir()  # not a run: no run.json, not listed
    listings = list_runs(tmp_path, now=NOW)
    assert [entry.path.name for entry in listings if entry.run] == [
        PARTIAL.name,
        COMPLETE.name,
        SCRIPTED.name,
    ]
    [bad] = [entry for entry in listings if entry.run is None]
    assert bad.error == f"{broken} was written by format version 7; this agent reads 1, 2"


def test_fixtures_match_their_generator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("make_runs", FIXTURES / "make_runs.py")
    assert spec is not None
    assert spec.loader is not None
    make_runs = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "make_runs", make_runs)  # its dataclasses look their module up
    spec.loader.exec_module(make_runs)
    fresh = make_runs.write_fixtures(tmp_path)
    assert sorted(p.name for p in fresh) == sorted(p.name for p in RUNS.iterdir())
    for path in fresh:
        made, committed = load_run(path, now=NOW), load_run(RUNS / path.name, now=NOW)
        for field in ("info", "events", "summary", "heartbeat", "best", "status", "kernels", "notes"):
            assert getattr(made, field) == getattr(committed, field), f"{path.name}: {field} differs"
        files = sorted(p.relative_to(path) for p in path.rglob("*"))
        assert files == sorted(p.relative_to(RUNS / path.name) for p in (RUNS / path.name).rglob("*"))
