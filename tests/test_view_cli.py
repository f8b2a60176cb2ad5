"""`agent show / ls / report` through `agent.cli.main`, including paths that are not runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent import cli
from agent.runlog.events import RunInfo

RUNS = Path(__file__).parent / "fixtures" / "runs"
COMPLETE = RUNS / "20261129T101500Z-selective_scan-a1b2c3"
PARTIAL = RUNS / "20261129T120000Z-selective_scan-d4e5f6"
SCRIPTED = RUNS / "20261129T090000Z-selective_scan_cpu-5c0000"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("KERNEL_AGENT_RUNS", raising=False)  # runs/ below means ./runs


@pytest.fixture
def future_run(tmp_path: Path) -> Path:
    """A copy of the complete run whose run.json claims format version 9."""
    run_dir = tmp_path / COMPLETE.name
    shutil.copytree(COMPLETE, run_dir)
    info = RunInfo.model_validate_json((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(info.model_copy(update={"format_version": 9}).model_dump_json())
    return run_dir


def test_view_commands_are_registered() -> None:
    assert "agent.cli.view" in cli.COMMAND_MODULES
    commands = cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"show", "ls", "report"} <= set(commands)


def test_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(COMPLETE), "--last", "1", "--no-code"]) == 0
    out = capsys.readouterr().out
    assert (
        "turn 5 · 9.8s turn · 9.8s LLM · 0.0s tools · tokens in=7,300 · out=420 · total=7,720 · $0.019" in out
    )
    assert "turn 4 ·" not in out
    assert "❱" not in out


def test_show_partial_and_scripted(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(PARTIAL), "--turn", "3"]) == 0
    assert "(the run was killed during this turn)" in capsys.readouterr().out
    assert cli.main(["show", str(SCRIPTED), "--full"]) == 0
    assert "turn 2 · 52.2s turn · 0.0s LLM · 52.2s tools · scripted playback" in capsys.readouterr().out


def test_show_a_run_by_name_under_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(RUNS.parent)  # so runs/<name> resolves to the fixtures
    assert cli.main(["show", COMPLETE.name, "--turn", "1", "--no-code"]) == 0
    assert "turn 1 · 127.4s turn" in capsys.readouterr().out


def test_show_a_turn_the_run_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(COMPLETE), "--turn", "9"]) == 2
    assert f"error: {COMPLETE.name} has no turn 9 (turns: 1, 2, 3, 4, 5)" in capsys.readouterr().err


def test_turn_and_last_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["show", str(COMPLETE), "--turn", "1", "--last", "2"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["show", "report"])
def test_not_a_run(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([command, str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"error: {tmp_path} is not a run (no run.json)" in captured.err
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("command", ["show", "report"])
def test_unknown_version(command: str, future_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([command, str(future_run)]) == 2
    assert (
        f"error: {future_run} was written by format version 9; this agent reads 1, 2"
        in capsys.readouterr().err
    )


def test_ls(tmp_path: Path, future_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(SCRIPTED, tmp_path / SCRIPTED.name)
    assert cli.main(["ls", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "run",
        "problem",
        "model",
        "status",
        "turns",
        "tokens",
        "cost",
        "wall",
        "best",
        "eager",
    ]
    assert lines[1].split() == [future_run.name, "unreadable"]
    assert lines[2].split()[:3] == [SCRIPTED.name, "selective_scan_cpu", "scripted"]
    assert lines[3] == f"{future_run} was written by format version 9; this agent reads 1, 2"


def test_ls_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ls", str(tmp_path / "nowhere")]) == 2
    assert "no such runs directory" in capsys.readouterr().err


def test_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert cli.main(["report", str(PARTIAL), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert 'id="speedup-chart"' in page


def test_report_defaults_into_the_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / SCRIPTED.name
    shutil.copytree(SCRIPTED, run_dir)
    assert cli.main(["report", str(run_dir)]) == 0
    assert (run_dir / "report.html").read_text().count("<svg") == 3  # speedup, its one timed shape, time
