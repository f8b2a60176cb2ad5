"""What a newcomer meets at the command line, as real `agent` processes: output into a pipe (not cut to 80
columns, run ids whole, a reader that stops early ends it quietly), `--help` with the defaults, `check`
saying which tolerance a spec leaves to the defaults, `bench` naming the user's file, and a run that failed
on the API listed as failed. Only the network is faked: the API is a port where nothing listens."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.cli import EXIT_BROKEN_PIPE
from agent.providers import DEFAULT_MODEL
from tests.helpers import REPO, TESTS, TINY

RUNS = TESTS / "fixtures" / "runs"
COMPLETE = RUNS / "20261129T101500Z-selective_scan-a1b2c3"
CPU_PROBLEM = REPO / "problems" / "selective_scan_cpu.yaml"


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a newcomer's shell: no API key, no $COLUMNS, no colour."""
    drop = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "COLUMNS", "KERNEL_AGENT_RUNS")
    return {k: v for k, v in os.environ.items() if k not in drop} | {"NO_COLOR": "1"} | extra


def agent(*args: str | Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *map(str, args)],
        cwd=REPO, env=child_env(**extra), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


# --- output into a pipe ---------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["show", COMPLETE, "--json"], ["show", COMPLETE], ["ls", RUNS]])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(args: list[str | Path]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` that has already read its fill: every write meets a closed pipe
    try:
        done = subprocess.run(
            [sys.executable, "-m", "agent.cli", *map(str, args)],
            cwd=REPO, env=child_env(), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert done.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored"
    assert done.returncode == EXIT_BROKEN_PIPE == 141


def test_piped_output_is_not_cut_to_80_columns() -> None:
    done = agent("show", COMPLETE, "--no-code")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    started = "started  2026-11-29 10:15:00 UTC · gpu-box-07 · NVIDIA H200 · torch 2.11.0 · CUDA 13.0"
    assert started in lines  # 90 characters, on one line
    assert [line for line in lines if line != line.rstrip()] == []  # no padding out to the console's width


@pytest.mark.parametrize("columns", [None, "140", "100", "60"])
def test_ls_prints_whole_run_ids(columns: str | None) -> None:
    done = agent("ls", RUNS, **({"COLUMNS": columns} if columns else {}))
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert {run.name for run in RUNS.iterdir()} <= set(words), done.stdout
    if columns is None:  # into a pipe: one row per run
        assert any(
            line.startswith(COMPLETE.name) and line.endswith("31.2×") for line in done.stdout.splitlines()
        )


# --- --help ----------------------------------------------------------------------------------------------


def test_run_help_shows_the_defaults() -> None:
    done = agent("run", "--help", COLUMNS="300")  # wide: each option's help on its own line
    entries = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  --")}
    assert f"(default: {DEFAULT_MODEL} if ANTHROPIC_API_KEY is set, " in entries["--model"]
    for option in ("--max-turns", "--max-cost", "--max-minutes", "--target-speedup"):
        assert "default: no limit" in entries[option] or "default: none" in entries[option], entries[option]


# --- agent check: the defaults a spec gets ---------------------------------------------------------------


def spec_without_tolerance(tmp_path: Path) -> Path:
    spec = TINY.read_text().replace("tolerance: {atol: 2.0e-4, rtol: 2.0e-4, rel_l2: 2.0e-5}\n", "")
    assert "tolerance" not in spec
    path = tmp_path / "no_tolerance.yaml"
    path.write_text(spec.replace("reference: ", f"reference: {TINY.parent}/"))
    return path


@pytest.mark.slow  # three child `agent check` runs: 14-28 s
def test_check_says_when_the_tolerance_is_the_default(tmp_path: Path) -> None:
    path = spec_without_tolerance(tmp_path)
    done = agent("check", path)
    assert done.returncode == 0, done.stderr
    assert (
        "note: the spec gives no tolerance; candidates are judged by the defaults: "
        "atol 0.0001, rtol 0.0001, rel_l2 1e-05, calibration 10"
    ) in done.stdout.splitlines()
    data = json.loads(agent("check", path, "--json").stdout)
    assert data["defaults"]["tolerance"] == {"atol": 1e-4, "rtol": 1e-4, "rel_l2": 1e-5, "calibration": 10.0}
    assert json.loads(agent("check", TINY, "--json").stdout)["defaults"]["tolerance"] == {"calibration": 10.0}


# --- agent bench: the user's file ------------------------------------------------------------------------


def test_bench_of_a_file_without_model_new_says_so_once_and_at_once(tmp_path: Path) -> None:
    kernel = tmp_path / "scan.py"
    kernel.write_text("import torch\n\nclass Model2(torch.nn.Module):\n    pass\n")
    started = time.monotonic()
    done = agent("bench", CPU_PROBLEM, kernel)
    assert time.monotonic() - started < 15  # no evaluation (which took 18-30 s to say the same)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("ModelNew at module level") == 1
    assert done.stderr.startswith(f"error: {kernel}: ")


def test_bench_names_the_users_file_and_prints_no_none(tmp_path: Path) -> None:
    kernel = tmp_path / "scan.py"
    kernel.write_text("import torch\nclass ModelNew(:\n")
    done = agent("bench", CPU_PROBLEM, kernel)
    assert done.returncode == 1, done.stderr
    assert f"import_error: SyntaxError: {kernel} line 2: invalid syntax" in done.stdout
    assert "kernel.py" not in done.stdout
    assert "None" not in done.stdout  # no `seed None` (none was drawn), no `CUDA None` on a CPU torch
    data = json.loads(agent("bench", CPU_PROBLEM, kernel, "--json").stdout)
    assert data["message"] == f"SyntaxError: {kernel} line 2: invalid syntax"


# --- a run that failed on the API ------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # the SDK's four retries back off: 17-25 s
def test_a_run_that_failed_on_the_api_is_listed_as_failed(tmp_path: Path) -> None:
    api = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{closed_port()}"}
    done = agent("run", TINY, "--runs-dir", tmp_path, **api)
    assert done.returncode == 3, done.stderr
    assert "1 turn · " in done.stderr
    assert "1 turns" not in done.stderr
    listed = agent("ls", tmp_path).stdout
    assert "failed (ModelError)" in listed
    assert "finished (ModelError)" not in listed
    shown = agent("show", next(tmp_path.iterdir())).stdout
    assert "status   failed (ModelError): " in shown
