"""The CLI for scripts: `--json` on every subcommand (the fields docs/scripting.md names), `agent --version`,
`agent run`'s exit codes (docs/scripting.md's table, and real scripted runs that stop each way), `agent check`
without a GPU, and runs found under `--runs-dir` or $KERNEL_AGENT_RUNS.

The runs are real processes on tests/problems/scan_tiny_playback.yaml; the one that evaluates a kernel
plays the CPU baseline, whose C++ the evaluator tests build anyway (one shared build cache).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent import cli, exits
from agent.runlog.events import RunSummary
from tests.helpers import REPO, TESTS, TINY

RUNS = TESTS / "fixtures" / "runs"
COMPLETE = RUNS / "20261129T101500Z-selective_scan-a1b2c3"
PARALLEL = RUNS / "20261129T140000Z-selective_scan_cpu-9a7a11"
PLAYBACK = TESTS / "problems" / "scan_tiny_playback.yaml"
BASELINE = REPO / "problems" / "selective_scan_cpu" / "solutions" / "baseline.py"

RUN_FIELDS = (
    "run_dir",
    "exit_code",
    "exit_status",
    "message",
    "turns",
    "cost_usd",
    "best_speedup",
    "best_kernel",
)
LS_FIELDS = ("run_dir", "run_id", "problem", "model", "status", "turns", "cost_usd", "best_speedup", "error")
SHOW_FIELDS = ("run_dir", "run_id", "status", "info", "summary", "best", "selected_turns", "kernels", "notes")
TURN_FIELDS = ("turn", "trajectory", "complete", "usage", "cost_usd", "events")
CHECK_FIELDS = ("ok", "problem", "case", "device", "output_shape", "message", "not_checked")


@pytest.fixture(autouse=True)
def quiet_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("KERNEL_AGENT_RUNS", raising=False)


def agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`agent ARGS` as a script runs it, with no API key (the scripted playback)."""
    child = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=REPO,
        env=child | (env or {}),
        capture_output=True,
        text=True,
        timeout=900,
    )


def one_json_object(stdout: str) -> dict:
    data = json.loads(stdout)  # the whole of stdout: exactly one object
    assert isinstance(data, dict)
    return data


# --- agent --version -----------------------------------------------------------------------------------


def test_version_names_the_package_and_the_harness_commit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert re.fullmatch(r"kernel-agent \S+ \(harness \S+\)\n", capsys.readouterr().out)


# --- the exit-code table ----------------------------------------------------------------------------------


def documented_exit_codes() -> dict[int, list[str]]:
    """docs/scripting.md's "Exit codes" table: code -> the exit statuses its row names."""
    section = (REPO / "docs" / "scripting.md").read_text().split("\n## Exit codes\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (\d+) \|(.*)\|$", section, flags=re.MULTILINE)
    return {int(code): re.findall(r"`([A-Za-z]+)`", rest.rsplit("|", 1)[-1]) for code, rest in rows}


def every_exit() -> list[type[exits.AgentExit]]:
    return exits.AgentExit.__subclasses__()


def test_the_documented_exit_code_table_is_the_code() -> None:
    table = documented_exit_codes()
    assert sorted(table) == [0, 1, 2, 3, 4, 5, 6, 130]
    named = {status for statuses in table.values() for status in statuses}
    assert named == {cls.__name__ for cls in every_exit()}, "every way a run ends has a row"
    for code, statuses in table.items():
        for status in statuses:
            cls = getattr(exits, status)
            has_best = code != exits.NO_CORRECT_KERNEL  # row 1 is an ended run without a correct kernel
            assert exits.run_exit_code(cls("why"), has_best) == code, status


def test_exit_codes_are_distinct_per_reason() -> None:
    codes = {cls.__name__: exits.run_exit_code(cls("why"), has_correct_kernel=True) for cls in every_exit()}
    assert codes == {
        "Finished": 0, "TargetReached": 0, "FloorReached": 0, "TurnLimit": 4, "CostLimit": 5, "TimeLimit": 6,
        "Interrupted": 130, "Refused": 3, "ContextExhausted": 3, "ModelError": 3,
    }  # fmt: skip
    # Without a correct kernel only a run that ended on its own changes code: a limit still says which.
    assert exits.run_exit_code(exits.Finished("why"), has_correct_kernel=False) == 1
    assert exits.run_exit_code(exits.TurnLimit("why"), has_correct_kernel=False) == 4


def playback_problem(tmp_path: Path, steps: list[dict]) -> Path:
    """scan_tiny_playback with a trajectory of its own."""
    trajectory = tmp_path / "trajectory.yaml"
    trajectory.write_text(json.dumps({"steps": steps}))  # JSON is YAML
    spec = PLAYBACK.read_text()
    spec = spec.replace("reference: ../../problems/", f"reference: {REPO}/problems/")
    spec = spec.replace("trajectory: scan_tiny_playback/trajectory.yaml", f"trajectory: {trajectory}")
    path = tmp_path / "scan_tiny_own_playback.yaml"
    path.write_text(spec)
    return path


def ended_run(done: subprocess.CompletedProcess[str]) -> tuple[dict, RunSummary]:
    """The run's --json object (the fields docs/scripting.md names), checked against its summary.json."""
    data = one_json_object(done.stdout)
    for field in RUN_FIELDS:
        assert field in data, field
    assert data["exit_code"] == done.returncode
    run_dir = Path(data["run_dir"])
    summary = RunSummary.model_validate_json((run_dir / "summary.json").read_text())
    assert data["exit_status"] == summary.exit_status
    assert data["turns"] == summary.turns
    assert f"run {run_dir}" in done.stderr  # the human output went to stderr
    return data, summary


@pytest.mark.parametrize(
    ("limit", "code", "status"),
    [
        (["--max-turns", "0"], exits.TURN_LIMIT, "TurnLimit"),
        (["--max-cost", "0"], exits.COST_LIMIT, "CostLimit"),
        (["--max-minutes", "0"], exits.TIME_LIMIT, "TimeLimit"),
    ],
)
def test_a_run_stopped_by_a_limit_exits_with_its_code(
    tmp_path: Path, limit: list[str], code: int, status: str
) -> None:
    done = agent("run", str(PLAYBACK), *limit, "--json", "--runs-dir", str(tmp_path))
    assert done.returncode == code, done.stderr[-3000:]
    data, _ = ended_run(done)
    assert data["exit_status"] == status
    assert Path(data["run_dir"]).parent == tmp_path
    assert data["best_speedup"] is None


def test_a_run_that_ends_without_a_correct_kernel_exits_1(tmp_path: Path) -> None:
    problem = playback_problem(tmp_path, [{"text": "Nothing to try. Stopping."}])
    done = agent("run", str(problem), "--json", env={"KERNEL_AGENT_RUNS": str(tmp_path / "from_env")})
    assert done.returncode == exits.NO_CORRECT_KERNEL, done.stderr[-3000:]
    data, summary = ended_run(done)
    assert summary.exit_status == "Finished"
    assert data["best_speedup"] is None
    assert data["best_kernel"] is None
    assert Path(data["run_dir"]).parent == tmp_path / "from_env"  # $KERNEL_AGENT_RUNS, not ./runs


def test_a_run_that_reaches_its_target_compiles_evaluates_and_exits_0(tmp_path: Path) -> None:
    """The fast tier's real compile and evaluation of a small C++ candidate, through `agent run`."""
    problem = playback_problem(
        tmp_path,
        [{"text": "The baseline.", "tool_calls": [{"name": "benchmark", "kernel_file": str(BASELINE)}]}],
    )
    done = agent("run", str(problem), "--target-speedup", "0.001", "--json", "--runs-dir", str(tmp_path))
    assert done.returncode == exits.OK, done.stderr[-3000:]
    data, summary = ended_run(done)
    assert summary.exit_status == "TargetReached"
    assert data["best_speedup"] > 0
    assert Path(data["best_kernel"]).read_text() == BASELINE.read_text()
    events = [json.loads(line) for line in (Path(data["run_dir"]) / "events.jsonl").read_text().splitlines()]
    bench = next(e for e in events if e["event"] == "tool_call" and e["name"] == "benchmark")
    assert bench["status"] == "ok"
    assert bench["result"]["correct"] is True
    assert all(case["status"] == "passed" for case in bench["result"]["cases"])


def test_a_harness_error_exits_3_with_the_log_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.loop import Agent

    def broken_step(self: Agent) -> None:
        raise RuntimeError("an injected harness bug")

    monkeypatch.setattr(Agent, "step", broken_step)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code = cli.main(["run", str(PLAYBACK), "--json", "--runs-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == exits.HARNESS_ERROR
    data = one_json_object(captured.out)
    assert data["exit_code"] == exits.HARNESS_ERROR
    assert data["exit_status"] == "ModelError"
    assert "an injected harness bug" in data["message"]
    assert "harness error: RuntimeError: an injected harness bug" in captured.err


def test_a_bad_problem_exits_2(tmp_path: Path) -> None:
    done = agent("run", str(tmp_path / "nope.yaml"), "--json", "--runs-dir", str(tmp_path))
    assert done.returncode == exits.USAGE
    assert done.stdout == ""
    assert "error:" in done.stderr


# --- agent check ------------------------------------------------------------------------------------------


@pytest.mark.slow  # `agent check` of the real problem's reference: 9-15 s
def test_check_of_the_gpu_problem_succeeds_here_and_says_what_it_could_not_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    done = agent("check", "problems/selective_scan.yaml", "--json")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    data = one_json_object(done.stdout)
    for field in CHECK_FIELDS:
        assert field in data, field
    assert data["ok"] is True
    assert data["output_shape"] == [
        data["sizes"]["batch_size"],
        data["sizes"]["seq_len"],
        data["sizes"]["d_model"],
    ]
    if data["device"] == "cuda":  # a GPU is visible: everything was checked
        assert data["not_checked"] == []
        return
    assert data["device"] == "cpu"
    assert "needs a CUDA GPU" in data["not_checked"][0]
    assert cli.main(["check", str(REPO / "problems" / "selective_scan.yaml")]) == 0
    human = capsys.readouterr().out
    assert "spec valid; reference ran on the CPU (no CUDA GPU here)" in human
    assert "not checked here: the reference on a CUDA GPU" in human


def test_check_of_a_reference_that_fails_exits_2(tmp_path: Path) -> None:
    reference = tmp_path / "reference.py"
    reference.write_text(
        (REPO / "problems" / "selective_scan" / "reference.py").read_text()
        + "\n\ndef _broken(self, *args):\n    raise RuntimeError('a broken reference')\n\n\nModel.forward = _broken\n"
    )
    spec = TINY.read_text()
    spec = spec.replace("reference: ../../problems/selective_scan/reference.py", f"reference: {reference}")
    (tmp_path / "broken.yaml").write_text(spec)
    done = agent("check", str(tmp_path / "broken.yaml"), "--json")
    assert done.returncode == exits.USAGE, done.stdout + done.stderr
    data = one_json_object(done.stdout)
    assert data["ok"] is False
    assert data["reference_failed"] is True
    assert "a broken reference" in data["message"]


# --- agent ls / show / report: --json and where runs are found ----------------------------------------------


def test_ls_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["ls", str(RUNS), "--json"]) == 0
    data = one_json_object(capsys.readouterr().out)
    assert data["runs_dir"] == str(RUNS)
    runs = data["runs"]
    assert [r["run_id"] for r in runs] == sorted((p.name for p in RUNS.iterdir()), reverse=True)
    for run in runs:
        for field in LS_FIELDS:
            assert field in run, field
        assert run["error"] is None
    complete = next(r for r in runs if r["run_id"] == COMPLETE.name)
    # a format-1 log: its summary's exit status is the old writer's word
    assert complete["status"] == {"state": "finished", "exit_status": "submitted", "phase": None}
    assert complete["turns"] == 5
    assert complete["best_speedup"] == 31.2
    assert next(r for r in runs if r["run_id"] == PARALLEL.name)["trajectories"] == 3


def test_ls_json_says_why_a_run_is_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{}")
    assert cli.main(["ls", str(tmp_path), "--json"]) == 0
    (run,) = one_json_object(capsys.readouterr().out)["runs"]
    assert run["run_dir"] == str(tmp_path / "broken")
    assert "is not a run record" in run["error"]


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(COMPLETE), "--json"]) == 0
    data = one_json_object(capsys.readouterr().out)
    for field in SHOW_FIELDS:
        assert field in data, field
    assert data["info"]["problem"] == "selective_scan"
    assert [t["turn"] for t in data["selected_turns"]] == [1, 2, 3, 4, 5]
    for turn in data["selected_turns"]:
        for field in TURN_FIELDS:
            assert field in turn, field
    kinds = {e["event"] for t in data["selected_turns"] for e in t["events"]}
    assert {"model_call", "tool_call", "turn_end"} <= kinds
    assert "best.py" in data["kernels"]
    assert data["summary"]["exit_status"] == "submitted"


def test_show_json_takes_the_turn_selection(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(COMPLETE), "--json", "--last", "2", "--no-code"]) == 0
    data = one_json_object(capsys.readouterr().out)
    assert [t["turn"] for t in data["selected_turns"]] == [4, 5]
    assert data["selection"] == {"trajectory": None, "turn": None, "last": 2}
    assert data["kernels"] == {}
    assert cli.main(["show", str(PARALLEL), "--json", "--trajectory", "2"]) == 0
    data = one_json_object(capsys.readouterr().out)
    assert {t["trajectory"] for t in data["selected_turns"]} == {2}


def test_report_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert cli.main(["report", str(COMPLETE), "-o", str(out), "--json"]) == 0
    assert one_json_object(capsys.readouterr().out) == {"run_dir": str(COMPLETE), "report": str(out)}
    assert out.read_text().startswith("<!DOCTYPE html>")


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runs folder that is not ./runs, holding a copy of one run; the tests run from another folder."""
    runs = tmp_path / "my-runs"
    shutil.copytree(COMPLETE, runs / COMPLETE.name)
    monkeypatch.chdir(tmp_path)
    return runs


def test_show_and_report_find_a_run_under_runs_dir(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["show", COMPLETE.name, "--runs-dir", str(elsewhere), "--turn", "1", "--no-code"]) == 0
    assert "turn 1 · 127.4s turn" in capsys.readouterr().out
    assert cli.main(["report", COMPLETE.name, "--runs-dir", str(elsewhere), "--json"]) == 0
    report = Path(one_json_object(capsys.readouterr().out)["report"])
    assert report == elsewhere / COMPLETE.name / "report.html"
    assert report.is_file()


def test_show_report_and_ls_find_runs_under_kernel_agent_runs(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KERNEL_AGENT_RUNS", str(elsewhere))
    assert cli.main(["show", COMPLETE.name, "--json", "--no-code"]) == 0
    assert one_json_object(capsys.readouterr().out)["run_dir"] == str(elsewhere / COMPLETE.name)
    assert cli.main(["report", COMPLETE.name]) == 0
    assert (elsewhere / COMPLETE.name / "report.html").is_file()
    capsys.readouterr()
    assert cli.main(["ls", "--json"]) == 0
    data = one_json_object(capsys.readouterr().out)
    assert data["runs_dir"] == str(elsewhere)
    assert [r["run_id"] for r in data["runs"]] == [COMPLETE.name]


def test_a_run_found_nowhere_says_where_it_was_looked_for(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["show", "no-such-run", "--runs-dir", str(elsewhere)]) == 2
    assert f"no-such-run: no such run directory (nor {elsewhere / 'no-such-run'})" in capsys.readouterr().err
