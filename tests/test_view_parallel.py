"""`agent show / ls / report` on a parallel run (the PARALLEL fixture: format 2, three trajectories)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from agent import cli
from agent.report.page import build_report
from agent.runlog.data import overlapping_leases
from agent.runlog.reader import list_runs, load_run
from agent.views.run import ShowOptions, render_ls, render_run

RUNS = Path(__file__).parent / "fixtures" / "runs"
PARALLEL = RUNS / "20261129T140000Z-selective_scan_cpu-9a7a11"
SCRIPTED = RUNS / "20261129T090000Z-selective_scan_cpu-5c0000"


def text(renderable: object, width: int = 110) -> str:
    out = io.StringIO()
    Console(file=out, width=width, legacy_windows=False, color_system=None).print(renderable)
    return out.getvalue()


def test_a_parallel_run_reads_back_by_trajectory() -> None:
    run = load_run(PARALLEL)
    assert run.info.format_version == 2
    assert run.parallel
    assert not load_run(SCRIPTED).parallel  # a version-1 log still reads, as one trajectory
    assert [(t.number, t.kind, t.from_kernel, t.exit_status) for t in run.trajectories] == [
        (1, "sample", None, "Finished"),
        (2, "sample", None, "Finished"),
        (3, "branch", "kernels/002.py", "Finished"),
    ]
    assert [(t.trajectory, t.turn) for t in run.turns] == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (None, 2)]
    assert [len(t.benchmarks) for t in run.trajectories] == [1, 1, 0]
    assert len(run.leases) == 6
    assert overlapping_leases(run.leases, cpu_problem=True) == []


def test_show_lists_trajectories_and_labels_each_turn() -> None:
    out = text(render_run(load_run(PARALLEL), ShowOptions(code=False)))
    assert "parallel  2 at once · 3 trajectories (up to 1 branches) · tools on this machine" in out
    assert "3           branch of kernels/002.py      1           0      –  Finished" in out
    assert "trajectory 2 · turn 1 · 29.3s turn · 0.0s LLM · 29.3s tools · scripted playback" in out
    assert "final re-check (all trajectories)" in out
    assert "leases  compile cpu: 3× 52s · timing host: 3× 95s" in out


def test_show_one_trajectory() -> None:
    out = text(render_run(load_run(PARALLEL), ShowOptions(trajectory=2, code=False)))
    assert "showing trajectory 2 of 3" in out
    assert "trajectory 2 · turn 1" in out
    assert "trajectory 2 · turn 2" in out
    assert "trajectory 1 · turn" not in out
    assert "final re-check (all" not in out


def test_show_trajectory_through_the_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["show", str(PARALLEL), "--trajectory", "3", "--turn", "1"]) == 0
    assert "trajectory 3 · turn 1" in capsys.readouterr().out
    assert cli.main(["show", str(PARALLEL), "--trajectory", "4"]) == 2
    assert "has no trajectory 4 (trajectories: 1, 2, 3)" in capsys.readouterr().err
    assert cli.main(["show", str(SCRIPTED), "--trajectory", "1"]) == 2
    assert "none: not a parallel run" in capsys.readouterr().err


def test_ls_counts_trajectories() -> None:
    out = text(render_ls(list_runs(RUNS)), width=200)
    row = next(line for line in out.splitlines() if line.startswith(PARALLEL.name))
    assert "5 (3 traj.)" in row
    scripted_row = next(line for line in out.splitlines() if line.startswith(SCRIPTED.name))
    assert "traj." not in scripted_row


def test_report_has_a_trajectories_table() -> None:
    page = build_report(load_run(PARALLEL))
    assert '<h2 id="trajectories">Trajectories side by side</h2>' in page
    assert "branch of kernels/002.py" in page
    assert '<a class="card" href="#turn-t2-1">' in page
    assert "final re-check" in page
