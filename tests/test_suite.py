"""`agent suite`: the summary's arithmetic (fast_p, the clipped geomean), its views, the leases a mixed suite
shares, and real suites over problems/kb_mini on this CPU: scripted runs, `--kernels`, `--json`, resume."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from agent.execution.leases import Leases
from agent.report.suite_page import build_suite_page
from agent.runlog.events import LeaseEvent, Usage
from agent.suite.records import (
    FAST_P,
    ProblemResult,
    SuiteConfig,
    SuiteData,
    fast_p,
    geomean_speedup,
    summarize,
)
from agent.views.suite import suite_view

REPO = Path(__file__).resolve().parent.parent
KB_MINI = REPO / "problems" / "kb_mini"
CPU_KERNELS = KB_MINI / "solutions" / "cpu"
TWO = [KB_MINI / "swish.yaml", KB_MINI / "row_sum.yaml"]  # the two cheapest builds
NO_PLAYBACK = REPO / "tests" / "problems" / "row_softmax_cpu.yaml"
JSON_FIELDS = {"suite_dir", "exit_code", "page", "summary", "config", "problems", "pending"}
SUMMARY_FIELDS = {
    "problems",
    "ended",
    "correct",
    "correct_rate",
    "fast_p",
    "geomean_speedup",
    "usage",
    "tokens",
}


def result(name: str, speedup: float | None, **fields: object) -> ProblemResult:
    base: dict[str, object] = {
        "problem": name,
        "problem_path": f"/p/{name}.yaml",
        "device": "cpu",
        "outcome": "ended",
        "exit_code": 0 if speedup is not None else 1,
        "exit_status": "Finished",
    }
    return ProblemResult.model_validate(base | {"best_speedup": speedup} | fields)


# --- the arithmetic -----------------------------------------------------------------------------------


def test_fast_p_counts_correct_problems_faster_than_p_over_the_whole_suite() -> None:
    results = [result("a", 0.5), result("b", 1.0), result("c", 1.6), result("d", 3.0), result("e", None)]
    total = 6  # one problem has no result: it counts as not correct
    got = {p: fast_p(results, total, p) for p in FAST_P}
    assert [got[p].count for p in FAST_P] == [4, 2, 2, 1]  # fast_1: strictly faster, 1.0 is not
    assert got[0.0].fraction == pytest.approx(4 / 6)  # fast_0 is the correct rate
    assert got[2.0].fraction == pytest.approx(1 / 6)
    summary = summarize(results, total)
    assert (summary.correct, summary.ended) == (4, 5)
    assert summary.correct_rate == pytest.approx(4 / 6)


def test_the_geomean_is_over_correct_problems_with_each_ratio_clipped() -> None:
    assert geomean_speedup([result("a", 2.0), result("b", 8.0), result("c", None)]) == pytest.approx(4.0)
    # a near-zero time (a 1e6x "speedup") counts as 100x, no more: sqrt(100 * 1) = 10
    assert geomean_speedup([result("a", 1e6), result("b", 1.0)]) == pytest.approx(10.0)
    assert geomean_speedup([result("a", 1e-9), result("b", 1.0)]) == pytest.approx(0.1)
    assert geomean_speedup([result("a", None)]) is None
    assert summarize([], 3).geomean_speedup is None


def test_the_summary_sums_tokens_and_cost_and_counts_harness_errors() -> None:
    results = [
        result("a", 1.5, usage=Usage(input_tokens=100, output_tokens=20, cache_read_tokens=5), cost_usd=0.25),
        result("b", None, outcome="harness_error", exit_code=3, usage=Usage(output_tokens=7), cost_usd=0.5),
        result("c", None, outcome="interrupted", exit_code=130),
    ]
    summary = summarize(results, 3)
    assert (summary.tokens, summary.usage.output_tokens, summary.cost_usd) == (132, 27, 0.75)
    assert (summary.harness_errors, summary.ended) == (1, 2)


# --- the views ------------------------------------------------------------------------------------


def sample_data() -> SuiteData:
    results = [
        result("swish", 1.25, run_dir="runs/r1", turns=2, wall_seconds=42.0, usage=Usage(input_tokens=1200)),
        result(
            "softmax", None, exit_status="TurnLimit", exit_code=4, run_dir="runs/r2", turns=5, cost_usd=0.125
        ),
    ]
    config = SuiteConfig(mode="model", problems=["/p/swish.yaml", "/p/softmax.yaml", "/p/mlp.yaml"])
    return SuiteData(
        suite_dir="runs/S", config=config, results=results, pending=["mlp"], summary=summarize(results, 3)
    )


def test_the_terminal_view_is_a_row_per_problem_then_the_summary() -> None:
    out = io.StringIO()
    Console(file=out, width=160, legacy_windows=False, color_system=None).print(suite_view(sample_data()))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines == [
        "problem  device  status     exit  speedup (launch-free ref)  % of floor  eager speedup  turns  tokens    cost"
        "   time  run",
        "swish    cpu     Finished      0                      1.25×           –              –      2   1,200  $0.000"
        "  42.0s  runs/r1",
        "softmax  cpu     TurnLimit     4                          –           –              –      5       0  $0.125"
        "   0.0s  runs/r2",
        "mlp              not run                                  –           –              –",
        "",
        "correct 1/3 (33%) · fast_1 1/3 (33%) · fast_1.5 0/3 (0%) · fast_2 0/3 (0%)",
        "geomean speedup (launch-free ref) 1.25× over 1 correct (eager speedup –) · 1,200 tokens, $0.125 · 42.0s of "
        "runs",
        "1 problem(s) not ended: agent suite --resume runs them",
    ]


def test_the_page_escapes_what_it_shows_and_holds_the_summary() -> None:
    data = sample_data()
    data.results[0].message = "<script>alert(1)</script>"
    page = build_suite_page(data)
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "fast_1.5</th><td>0/3 (0%)" in page
    assert "1.25× over 1 correct" in page
    assert page.count("<tr><td>") == 3  # two results and the problem not run
    assert '<a href="runs/r1/report.html">runs/r1</a>' in page  # each run's own page, beside it


# --- the leases a mixed suite shares ---------------------------------------------------------------------


def test_a_cpu_timing_holds_the_host_even_where_the_leases_hold_gpus() -> None:
    leases, events = Leases([0], compile_slots=2), list[LeaseEvent]()
    order: list[str] = []
    with leases.timing(events.append, None, None, on_host=True) as gpu:
        assert gpu is None
        compiling = threading.Thread(target=lambda: compile_once(leases, order))
        compiling.start()
        time.sleep(0.3)
        order.append("timing ends")
    compiling.join(5)
    assert order == ["timing ends", "compiled"]  # a CUDA problem's compile waited for the CPU timing
    with leases.timing(events.append, None, None) as gpu:
        assert gpu == 0
    assert [e.resource for e in events if e.action == "acquired"] == ["host", "gpu0"]


def compile_once(leases: Leases, order: list[str]) -> None:
    with leases.compile(lambda e: None, None, None):
        order.append("compiled")


# --- real suites on this CPU ---------------------------------------------------------------------------


def agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    child = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=REPO,
        env=child | {"COLUMNS": "200", "NO_COLOR": "1"} | (env or {}),
        capture_output=True,
        text=True,
        timeout=1200,
    )


def suite_json(done: subprocess.CompletedProcess[str]) -> dict:
    data = json.loads(done.stdout)  # the whole of stdout: one object
    assert JSON_FIELDS <= data.keys(), done.stdout
    assert SUMMARY_FIELDS <= data["summary"].keys()
    return data


@pytest.mark.slow
def test_a_scripted_suite_runs_each_problem_as_a_run_and_sums_them(tmp_path: Path) -> None:
    done = agent(
        "suite", *map(str, TWO), "--model", "scripted", "--jobs", "2", "--runs-dir", str(tmp_path), "--json"
    )
    assert done.returncode == 0, done.stderr
    data = suite_json(done)
    suite = Path(data["suite_dir"])
    assert suite.parent == tmp_path
    assert data["exit_code"] == 0
    assert data["pending"] == []
    by_name = {p["problem"]: p for p in data["problems"]}
    assert set(by_name) == {"swish", "row_sum"}
    for name, p in by_name.items():
        assert (p["exit_code"], p["exit_status"], p["outcome"]) == (0, "Finished", "ended"), p
        assert p["best_speedup"] is not None
        assert p["turns"] == 2
        run = suite / p["run_dir"]
        assert json.loads((run / "run.json").read_text())["problem"] == name  # a normal run folder
        assert json.loads((run / "summary.json").read_text())["exit_status"] == "Finished"
        assert (suite / p["best_kernel"]).is_file()
        assert "<html" in (run / "report.html").read_text()  # agent report's page, which suite.html links
        assert "benchmark" in (suite / "transcripts" / f"{name}.txt").read_text()
    assert data["summary"]["correct"] == 2
    assert data["summary"]["fast_p"][0]["fraction"] == 1.0
    assert (suite / "suite.html").is_file()
    assert "fast_1.5" in done.stderr


@pytest.mark.slow
def test_kernels_are_judged_with_no_model_and_a_suite_resumes_what_did_not_end(tmp_path: Path) -> None:
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(CPU_KERNELS / "swish.py", kernels / "swish.py")
    (kernels / "row_sum").mkdir()  # the folder form: every .py judged, the fastest correct counts
    shutil.copy(CPU_KERNELS / "row_sum.py", kernels / "row_sum" / "honest.py")
    (kernels / "row_sum" / "wrong.py").write_text(
        (CPU_KERNELS / "row_sum.py").read_text().replace("yp[r] = total;", "yp[r] = 2 * total;")
    )
    problems = [*map(str, TWO), str(KB_MINI / "softmax.yaml")]  # softmax has no kernel here
    done = agent(
        "suite", *problems, "--kernels", str(kernels), "--runs-dir", str(tmp_path / "runs"), "--json"
    )
    assert done.returncode == 0, done.stderr
    data = suite_json(done)
    by_name = {p["problem"]: p for p in data["problems"]}
    assert by_name["swish"]["exit_code"] == 0
    assert by_name["swish"]["run_dir"] is None
    row_sum = by_name["row_sum"]
    assert {Path(k["path"]).name: k["correct"] for k in row_sum["kernels"]} == {
        "honest.py": True,
        "wrong.py": False,
    }
    assert row_sum["exit_code"] == 0
    assert Path(row_sum["best_kernel"]).name == "honest.py"
    assert (by_name["softmax"]["exit_status"], by_name["softmax"]["exit_code"]) == ("no_kernel", 2)
    assert data["summary"]["correct"] == 2
    assert data["summary"]["problems"] == 3

    suite = Path(data["suite_dir"])
    kept = (suite / "results" / "swish.json").read_text()
    (suite / "results" / "row_sum.json").unlink()  # as if the suite had been killed during row_sum
    again = agent("suite", "--resume", str(suite), "--json")
    assert again.returncode == 0, again.stderr
    assert "1 of 3 to run" in again.stderr
    assert "started row_sum" in again.stderr
    assert "started swish" not in again.stderr
    assert (suite / "results" / "swish.json").read_text() == kept
    assert suite_json(again)["summary"]["correct"] == 2


@pytest.mark.slow  # a child `agent suite` per refusal: 10-16 s
def test_a_suite_refuses_bad_arguments_before_it_makes_a_folder(tmp_path: Path) -> None:
    for args in (
        ["suite", "--runs-dir", str(tmp_path)],
        ["suite", str(tmp_path / "nothing"), "--runs-dir", str(tmp_path)],
        [
            "suite",
            str(KB_MINI),
            "--kernels",
            str(CPU_KERNELS),
            "--max-turns",
            "3",
            "--runs-dir",
            str(tmp_path),
        ],
        ["suite", "--resume", str(tmp_path)],
        ["suite", str(NO_PLAYBACK), "--model", "scripted", "--runs-dir", str(tmp_path)],  # no trajectory
    ):
        done = agent(*args)
        assert (done.returncode, done.stdout) == (2, ""), (args, done.stderr)
        assert "error:" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.long  # six C++ builds; CI judges the shipped swish and row_sum through --kernels
def test_every_shipped_cpp_solution_is_correct_on_the_cpu(tmp_path: Path) -> None:
    done = agent("suite", str(KB_MINI), "--kernels", str(CPU_KERNELS), "--runs-dir", str(tmp_path), "--json")
    data = suite_json(done)
    assert {p["problem"]: p["exit_status"] for p in data["problems"]} == {
        name: "ok" for name in ("conv_relu", "linear_relu", "mlp", "row_sum", "softmax", "swish")
    }, done.stderr
    assert done.returncode == 0
    assert data["summary"]["correct"] == 6


@pytest.mark.slow
@pytest.mark.long  # CUDA builds on a CPU machine; the GPU tier compiles and runs it
@pytest.mark.nvcc
def test_every_shipped_cuda_solution_compiles() -> None:
    """compile_kernel needs no GPU; the six builds run side by side (one per core)."""
    from concurrent.futures import ThreadPoolExecutor

    from tools import compile_kernel
    from tools.problem import load_problem

    specs = sorted((KB_MINI / "cuda").glob("*.yaml"))
    assert len(specs) == 6

    def build(spec: Path) -> tuple[str, str, str]:
        problem = load_problem(spec)
        compiled = compile_kernel(
            problem, (KB_MINI / "solutions" / "cuda" / f"{problem.name}.py").read_text()
        )
        return problem.name, compiled.status, compiled.message

    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        built = list(pool.map(build, specs))
    assert [b for b in built if b[1] not in ("ok", "no_device")] == []


@pytest.mark.gpu
def test_the_cuda_suite_judges_every_shipped_cuda_solution_correct(tmp_path: Path) -> None:
    cuda_kernels = KB_MINI / "solutions" / "cuda"
    done = agent(
        "suite", str(KB_MINI / "cuda"), "--kernels", str(cuda_kernels), "--runs-dir", str(tmp_path), "--json"
    )
    data = suite_json(done)
    assert {p["problem"]: p["exit_status"] for p in data["problems"]} == {
        name: "ok" for name in ("conv_relu", "linear_relu", "mlp", "row_sum", "softmax", "swish")
    }, done.stderr
    assert done.returncode == 0
    assert data["summary"]["correct"] == 6
    assert data["config"]["gpus"]


@pytest.mark.slow
def test_ctrl_c_stops_the_suite_and_resume_runs_what_it_left(tmp_path: Path) -> None:
    child = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    args = ["suite", *map(str, TWO), "--model", "scripted", "--jobs", "1", "--runs-dir", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=REPO,
        env=child | {"COLUMNS": "200", "NO_COLOR": "1"},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # the first problem's run has started: its worker and build take seconds
        seen.append(line)
        if "started" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(120) == 130, "".join(seen) + rest
    (suite,) = tmp_path.iterdir()
    first = json.loads((suite / "results" / "swish.json").read_text())  # problems run in the order given
    assert (first["outcome"], first["exit_code"]) == ("interrupted", 130)
    assert not (suite / "results" / "row_sum.json").exists()  # never started: left for --resume
    again = agent("suite", "--resume", str(suite), "--json")
    assert again.returncode == 0, again.stderr
    data = suite_json(again)
    assert {p["problem"]: p["outcome"] for p in data["problems"]} == {"row_sum": "ended", "swish": "ended"}
    assert data["pending"] == []
