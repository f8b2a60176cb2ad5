"""`agent redteam` end to end on the CPU problem with the bundled red-team playback (no API key): eight
named attacks, each benchmarked for real around one shared C++ build, then every accepted one re-judged.
One run, shared by every test here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.redteam.cases import CANDIDATE, read_case
from agent.runlog.events import AttackEvent, BestEvent, RejudgeEvent, RunInfo, ToolCallEvent
from agent.runlog.reader import load_run, read_events
from tests.helpers import REPO

pytestmark = pytest.mark.slow

PROBLEM = "problems/selective_scan_cpu.yaml"
# Each attack of problems/selective_scan_cpu/redteam.yaml: its verdict at first judgement (its status and,
# where one rejects it, the flag or case that does) and its outcome after the re-judge.
EXPECTED = {
    "pointer-cache": ("incorrect", "caught"),
    "content-cache": ("incorrect", "caught"),
    "warmup-detector": ("incorrect", "caught"),
    "background-thread": ("incorrect", "caught"),
    "input-mutation": ("incorrect", "caught"),
    "precision-downgrade": ("incorrect", "caught"),
    "wrong-dtype": ("incorrect", "caught"),
    "shown-shapes-only": ("ok", "caught on re-judge"),
}


def child_env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    env["COLUMNS"] = "160"
    return env


@pytest.fixture(scope="module")
def redteam_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    runs = tmp_path_factory.mktemp("runs")
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "redteam", PROBLEM, "--runs-dir", str(runs), "--json"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    (run_dir,) = runs.iterdir()
    return run_dir, done


def test_every_attack_is_named_judged_and_rejudged(
    redteam_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, done = redteam_run
    assert done.returncode == 0, done.stderr[-3000:]
    events = read_events(run_dir)
    assert RunInfo.model_validate_json((run_dir / "run.json").read_text()).config.mode == "redteam"
    attacks = [e.name for e in events if isinstance(e, AttackEvent)]
    assert attacks == list(EXPECTED)
    rejudged = {e.attack: e for e in events if isinstance(e, RejudgeEvent)}
    assert {a: (e.first_status, e.outcome) for a, e in rejudged.items()} == EXPECTED
    report = json.loads(done.stdout)
    assert [r["attack"] for r in report["rejudged"]] == list(EXPECTED)


def test_a_caught_attack_is_never_re_checked_or_crowned(
    redteam_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """The re-judge comes before the final re-check, which measures only escapes: none here, so no best."""
    run_dir, _ = redteam_run
    events = read_events(run_dir)
    assert not [e for e in events if isinstance(e, ToolCallEvent) and e.name == "final_recheck"]
    assert not [e for e in events if isinstance(e, BestEvent) and e.final]
    assert not (run_dir / "best.py").exists()
    run = load_run(run_dir)
    assert (run.best_kernel, run.best_speedup) == (None, None)  # the attack crowned in the loop is withdrawn


def test_the_escape_is_written_as_a_case_and_matches_the_promoted_one(
    redteam_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, _ = redteam_run
    (event,) = [e for e in read_events(run_dir) if isinstance(e, RejudgeEvent) and e.case_dir]
    assert event.attack == "shown-shapes-only"
    assert event.strict_status == "incorrect"
    assert ".fresh" in event.caught_by
    code, expected = read_case(run_dir / event.case_dir)
    assert (expected.problem, expected.expected_status, expected.check) == (
        PROBLEM,
        "incorrect",
        "correctness",
    )
    promoted = REPO / "tests" / "adversarial" / "promoted" / Path(event.case_dir).name / CANDIDATE
    assert promoted.read_text() == code  # the bundled finding, promoted as `agent redteam promote` does


def test_the_summary_is_printed_and_shown_again(
    redteam_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, done = redteam_run
    line = "8 candidates: 7 caught, 1 caught on re-judge, 0 escaped · 1 regression case written"
    assert line in done.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "agent.cli", "show", str(run_dir), "--no-code"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert line in shown.stdout
    for attack in EXPECTED:
        assert attack in shown.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "agent.cli", "show", str(run_dir), "--json", "--no-code"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert [r["outcome"] for r in json.loads(as_json.stdout)["rejudged"]] == [o for _, o in EXPECTED.values()]
