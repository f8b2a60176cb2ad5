"""Live progress: the status line keeps its clock between events and shows what a build compiles (the
worker's `building` messages, through the executor to the loop), and `agent show --follow` watches a run
that another process is writing, until it ends.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from rich.live import Live

from agent.budget import Budget
from agent.conversation import State
from agent.execution.executor import BuildProgress, LeasedExecutor
from agent.execution.leases import Leases
from agent.loop import Agent
from agent.providers.scripted import ScriptedProvider
from agent.run_setup import RunSetup
from agent.runlog.data import RunStatus
from agent.runlog.events import (
    Event,
    Heartbeat,
    ModelCallEvent,
    RunConfig,
    RunInfo,
    RunSummary,
    ToolCallEvent,
    TurnEndEvent,
    Usage,
)
from agent.runlog.reader import EventTail, live_status, load_run
from agent.runlog.writer import RunLog, write_model
from agent.views.follow import Follower, follow, follow_status_text
from agent.views.live import BuildStep, Progress, RichDisplay, StatusLine, status_text
from agent.views.run import ShowOptions
from tests.candidates.scan_variants import baseline
from tests.helpers import REPO, TESTS
from tools.problem import Problem, load_problem
from tools.results import BenchResult, CompileResult
from tools.wire import Building

PLAYBACK = TESTS / "problems" / "scan_tiny_playback.yaml"
NAIVE = REPO / "problems" / "selective_scan_cpu" / "trajectory" / "01_naive.py"
# The show-follow test's first turn lasts at least this: its follower (a new interpreter) starts within it.
TURN_ONE_S = 10


def fresh(kernel_source: str) -> str:
    """The kernel with a unique comment in its C++ source: a build of its own, never a cache hit."""
    include = "#include <torch/extension.h>\n"
    assert include in kernel_source
    return kernel_source.replace(include, f"{include}// fresh {os.urandom(6).hex()}\n", 1)


def rendered(renderable: object, width: int = 160) -> str:
    console = Console(file=io.StringIO(), width=width, highlight=False, color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def progress_at(t: float, **fields: object) -> Progress:
    base: dict[str, object] = dict(
        turn=2, phase="compiling", usage=Usage(), cost_usd=0.0, best_speedup=1.8, elapsed_s=70.0,
        scripted=True, taken_at=t, phase_since=t - 10.0,
    )  # fmt: skip
    return Progress.model_validate(base | fields)


# --- the status line ------------------------------------------------------------------------------


def test_the_status_line_names_the_object_being_built_and_its_seconds() -> None:
    build = BuildStep(extension="scan_naive", compiling={"main.o": 1000.0 - 52.0}, finished=0)
    line = rendered(StatusLine(progress_at(1000.0, build=build), FakeClock(1000.0)))
    assert line.strip() == (
        "turn 2 · compiling 0:10 · scan_naive: main.o 0:52 · 0 tokens (scripted playback) · $0.00 · "
        "best 1.80× · 1:10"
    )
    headline = status_text(progress_at(1000.0, best_headline="39% of floor"))
    assert "best 39% of floor · 1:10" in headline  # the best's headline, as the run's other views name it
    two = BuildStep(extension="ext", compiling={"cuda.cuda.o": 997.0, "main.o": 990.0}, finished=1)
    assert "ext: main.o 0:10, cuda.cuda.o 0:03 (1 done)" in status_text(progress_at(1000.0, build=two))
    starting = BuildStep(extension="ext")
    assert "· ext: starting ·" in status_text(progress_at(1000.0, build=starting))
    between = BuildStep(extension="ext", finished=1)  # an object done, the link not yet started
    assert "· ext: finishing (1 done) ·" in status_text(progress_at(1000.0, build=between))


def test_the_status_line_clock_advances_without_new_events() -> None:
    clock = FakeClock(1000.0)
    build = BuildStep(extension="scan_naive", compiling={"main.o": 1000.0})
    line = StatusLine(progress_at(1000.0, build=build), clock)  # one progress report, then nothing
    first = rendered(line)
    clock.t += 65.0
    later = rendered(line)
    assert "compiling 0:10" in first
    assert "main.o 0:00" in first
    assert first.rstrip().endswith("1:10")
    assert "compiling 1:15" in later
    assert "main.o 1:05" in later
    assert later.rstrip().endswith("2:15")


def test_the_live_display_redraws_the_clock_by_itself() -> None:
    """No progress report and no event after the first: rich's own refresh redraws the line from the clock."""
    clock = FakeClock(1000.0)
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=True, color_system=None)
    display = RichDisplay(console, scripted=True, clock=clock)
    with Live(display.status_line(progress_at(1000.0)), console=console, refresh_per_second=20) as live:
        display.live = live
        display.progress(progress_at(1000.0))
        clock.t += 125.0
        deadline = time.monotonic() + 5
        while "compiling 2:15" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "compiling 2:15" in out.getvalue()
    assert "3:15" in out.getvalue()  # the run's clock too


# --- the loop turns the worker's messages into progress ----------------------------------------------


class RecordingDisplay:
    def __init__(self) -> None:
        self.seen: list[Progress] = []

    def progress(self, progress: Progress) -> None:
        self.seen.append(progress)

    def event(self, event: Event) -> None:
        pass


class ReportingEvaluator:
    """A compile that reports two steps of a build, as a worker would (the real one is tested below)."""

    def compile(self, problem: Problem, code: str, on_progress: BuildProgress | None = None) -> CompileResult:
        assert on_progress is not None
        on_progress(Building(extension="ext", compiling=["main.o"]))
        time.sleep(0.05)
        on_progress(Building(extension="ext", compiling=["main.o", "cuda.cuda.o"]))
        on_progress(Building(extension="ext", compiling=["ext.so"], finished=2))
        return CompileResult(status="ok", message="compiled")

    def evaluate(self, problem: Problem, code: str, gpu: int | None, seed: int | None = None) -> BenchResult:
        raise AssertionError("not called: the trajectory only compiles")

    def kill_all(self) -> None:
        pass


def one_call_trajectory(tmp_path: Path, kernel: Path, tool: str) -> Path:
    path = tmp_path / "trajectory.yaml"
    steps = [{"text": "Build it.", "tool_calls": [{"name": tool, "kernel_file": str(kernel)}]}]
    path.write_text(yaml.safe_dump({"steps": [*steps, {"text": "Done."}]}))
    return path


def make_agent(tmp_path: Path, problem: Problem, trajectory: Path, evaluator: object | None) -> Agent:
    from agent.cli.run import create_log

    provider = ScriptedProvider(trajectory)
    config = RunConfig(problem_path=str(problem.path), provider="scripted", model="scripted")
    log = create_log(problem, provider, config, tmp_path / "runs")
    executor = LeasedExecutor(Leases(gpus=None), evaluator)  # type: ignore[arg-type]
    setup = RunSetup(problem, provider, log, "system", Budget(), executor, RecordingDisplay())
    return Agent(setup, State(messages=[{"role": "user", "content": "go"}]))


def test_the_loop_shows_each_build_step_and_keeps_when_each_object_started(tmp_path: Path) -> None:
    agent = make_agent(
        tmp_path, load_problem(PLAYBACK), one_call_trajectory(tmp_path, NAIVE, "compile_kernel"),
        ReportingEvaluator(),
    )  # fmt: skip
    agent.run()
    seen = agent.setup.display.seen  # type: ignore[attr-defined]
    builds = [p.build for p in seen if p.build is not None]
    assert [sorted(b.compiling) for b in builds] == [["main.o"], ["cuda.cuda.o", "main.o"], ["ext.so"]]
    assert builds[1].compiling["main.o"] == builds[0].compiling["main.o"]  # still the first report's time
    assert builds[1].compiling["cuda.cuda.o"] > builds[0].compiling["main.o"]
    assert builds[2].finished == 2
    after = seen[seen.index(next(p for p in seen if p.build is builds[-1])) + 1 :]
    assert after
    assert all(p.build is None for p in after)
    assert all(p.phase_since is not None for p in seen)


@pytest.mark.slow
def test_a_real_build_reports_the_object_it_compiles(tmp_path: Path) -> None:
    """A fresh C++ build (a unique comment misses the build cache): the worker's shim records reach the
    status line and the heartbeat while it compiles."""
    kernel = tmp_path / "naive.py"
    kernel.write_text(fresh(NAIVE.read_text()))
    agent = make_agent(
        tmp_path, load_problem(PLAYBACK), one_call_trajectory(tmp_path, kernel, "compile_kernel"), None
    )
    phases: list[str] = []
    stop = threading.Event()

    def watch_heartbeat() -> None:
        while not stop.wait(0.2):
            try:
                phases.append(
                    Heartbeat.model_validate_json((agent.log.dir / "heartbeat.json").read_text()).phase
                )
            except (OSError, ValueError):
                pass

    watcher = threading.Thread(target=watch_heartbeat, daemon=True)
    watcher.start()
    try:
        agent.run()
    finally:
        stop.set()
        watcher.join()
    call = next(e for e in load_run(agent.log.dir).events if isinstance(e, ToolCallEvent))
    assert call.status == "ok", call.summary
    assert call.result["cached"] is False  # it really built
    seen = agent.setup.display.seen  # type: ignore[attr-defined]
    objects = {name for p in seen if p.build for name in p.build.compiling}
    extension = {p.build.extension for p in seen if p.build}
    assert extension == {"scan_naive"}, extension
    assert "main.o" in objects, objects
    line = next(status_text(p) for p in seen if p.build and "main.o" in p.build.compiling)
    assert "compiling" in line
    assert "scan_naive: main.o 0:0" in line
    assert any("compiling · scan_naive: main.o" in phase for phase in phases), sorted(set(phases))


# --- following a run --------------------------------------------------------------------------------


def new_run(tmp_path: Path) -> RunLog:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = RunConfig(problem_path="p.yaml", provider="scripted", model="scripted")
    info = RunInfo(
        run_id="run", problem="p", problem_hash="h", provider="scripted", model="scripted", scripted=True,
        config=config,
    )  # fmt: skip
    return RunLog.create(run_dir, info)


def write_turn(log: RunLog, turn: int) -> None:
    log.append(
        ModelCallEvent(turn=turn, provider="scripted", model="scripted", seconds=0.0, text=f"text {turn}")
    )
    log.append(
        ToolCallEvent(
            turn=turn, tool_use_id=f"t{turn}", name="benchmark", kernel_path=f"kernels/00{turn}.py",
            status="incorrect", is_error=True, summary="wrong",
        )
    )  # fmt: skip
    log.append(TurnEndEvent(turn=turn, turn_seconds=0.1, llm_seconds=0.0, tool_seconds=0.1))


def summary(turns: int) -> RunSummary:
    return RunSummary(
        exit_status="Finished", message="the model ended its turn", turns=turns, wall_seconds=1.0
    )


@pytest.fixture
def writing_run(tmp_path: Path) -> Iterator[tuple[RunLog, threading.Event]]:
    """A run whose turn 1 is logged; turns 2 and 3 and its end are written once `go` is set."""
    log = new_run(tmp_path)
    log.start_heartbeat()
    write_turn(log, 1)
    go = threading.Event()

    def writer() -> None:
        go.wait()  # no timeout: the teardown sets it (a follower that took 10 s to start on a busy CI
        # machine once saw this run end before it could stop following it)
        for turn in (2, 3):
            time.sleep(0.2)
            write_turn(log, turn)
        time.sleep(0.2)
        log.end(summary(3))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    yield log, go
    go.set()
    thread.join(timeout=10)


def test_follow_shows_the_turns_written_after_it_began_and_stops_at_the_end(
    writing_run: tuple[RunLog, threading.Event],
) -> None:
    log, go = writing_run
    tail = EventTail(log.dir)
    run = load_run(log.dir, tail=tail)
    assert [t.turn for t in run.turns] == [1]  # what the log held when following began
    console = Console(file=io.StringIO(), width=120, highlight=False, color_system=None)
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        go.set()  # the run goes on once following has begun
        time.sleep(seconds)

    started = time.monotonic()
    code = follow(run, tail, console, ShowOptions(), poll_s=0.05, sleep=sleep)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert code == 0
    assert time.monotonic() - started < 10
    before, _, after = out.partition("following run (Ctrl-C stops following")
    assert "turn 1" in before
    assert "text 1" in before
    assert "turn 2" not in before
    assert "text 2" in after
    assert "turn 2 · 0.1s turn" in after
    assert "text 3" in after
    assert "turn 3 · 0.1s turn" in after
    assert "call → benchmark" in after
    assert "kernels/003.py" in after
    assert after.rstrip().endswith("run ended: Finished: the model ended its turn")
    assert "turn 1" not in after  # nothing shown twice
    assert polls  # it waited between reads


def test_ctrl_c_stops_following_and_leaves_the_run_going(writing_run: tuple[RunLog, threading.Event]) -> None:
    log, _ = writing_run  # live (this process beats its heartbeat) and silent until `go`
    follower = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "show", str(log.dir), "--follow"], cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert follower.stdout is not None
    lines = []
    for line in follower.stdout:  # what it printed before following: the run so far, then the marker
        lines.append(line)
        if "(Ctrl-C stops following" in line:
            break
    follower.send_signal(signal.SIGINT)
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 130, err
    assert "turn 1" in "".join(lines)
    assert "stopped following; the run goes on" in out
    assert live_status(log.dir).state == "running"


def test_follow_stops_when_the_writer_dies_without_an_end(tmp_path: Path) -> None:
    log = new_run(tmp_path)
    write_turn(log, 1)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    beat = Heartbeat(pid=int(dead.stdout), host=socket.gethostname(), phase="compiling")
    write_model(log.dir / "heartbeat.json", beat)
    console = Console(file=io.StringIO(), width=120, highlight=False, color_system=None)
    tail = EventTail(log.dir)
    assert follow(load_run(log.dir, tail=tail), tail, console, ShowOptions(), poll_s=0.01) == 0
    assert "its log has no end (killed?)" in console.file.getvalue()  # type: ignore[attr-defined]


def test_following_one_trajectory_shows_only_its_events(tmp_path: Path) -> None:
    log = new_run(tmp_path)
    log.start_heartbeat()
    console = Console(file=io.StringIO(), width=120, highlight=False, color_system=None)
    follower = Follower(load_run(log.dir), EventTail(log.dir), console, trajectory=2)
    for trajectory in (1, 2):
        log.append(
            ModelCallEvent(
                turn=1, provider="scripted", model="scripted", seconds=0.0, text=f"from t{trajectory}",
                trajectory=trajectory,
            )
        )  # fmt: skip
    assert follower.step() is not None
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "from t2" in out
    assert "from t1" not in out
    log.close()


def test_a_tail_waits_for_a_line_to_be_finished(tmp_path: Path) -> None:
    log = new_run(tmp_path)
    tail = EventTail(log.dir)
    assert tail.read() == []
    write_turn(log, 1)
    assert [e.event for e in tail.read()] == ["model_call", "tool_call", "turn_end"]
    line = TurnEndEvent(turn=2, turn_seconds=1, llm_seconds=0, tool_seconds=1).model_dump_json()
    with (log.dir / "events.jsonl").open("a") as f:
        f.write(line[:20])
        f.flush()
        assert tail.read() == []  # half a line: not yet an event
        f.write(line[20:] + "\n{not json}\n")
    notes: list[str] = []
    assert [e.event for e in tail.read(notes)] == ["turn_end"]
    assert len(notes) == 1
    assert "events.jsonl line 5 is unreadable" in notes[0], notes


def test_a_resumed_run_is_followed_past_its_earlier_end(tmp_path: Path) -> None:
    """An earlier session's run_end is in the log, but the run is live again: following goes on."""
    log = new_run(tmp_path)
    write_turn(log, 1)
    log.end(summary(1))
    (log.dir / "summary.json").unlink()  # what a resume does first
    log = RunLog.reopen(log.dir)
    log.start_heartbeat()
    assert live_status(log.dir).state == "running"
    follower = Follower(load_run(log.dir), EventTail(log.dir), Console(file=io.StringIO()))
    follower.tail.read()
    write_turn(log, 2)
    assert follower.step() is not None
    assert follower.ended is None
    log.end(summary(2))
    assert follower.step() is None
    assert follower.ended is not None


def test_the_follow_status_line_names_what_the_run_is_doing() -> None:
    from datetime import datetime, timedelta

    start = datetime(2026, 12, 1, 3, 0, tzinfo=datetime.now().astimezone().tzinfo)
    status = RunStatus("running", phase="compiling · scan_naive: main.o")
    text = follow_status_text("r1", status, start, start + timedelta(seconds=133))
    assert text == "following r1 · compiling · scan_naive: main.o · 2:13"


def test_show_follow_refuses_a_single_turn(tmp_path: Path) -> None:
    log = new_run(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "show", str(log.dir), "--follow", "--turn", "1"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "use --last N, not --turn" in done.stderr


@pytest.mark.slow
def test_show_follow_watches_a_real_run_in_another_process(tmp_path: Path) -> None:
    """`agent run` in one process (its first kernel sleeps at import, so turn 1 runs a while), `agent show
    --follow` in another, started once the run exists: the follower prints the turns as they come and exits
    at the end. Both kernels are the CPU baseline's C++, which the test run has built by then (a fresh build
    to make turn 1 long cost 40-120 s on 2 cores); the second differs only in Python, without the sleep."""
    base = baseline()
    kernels = [tmp_path / "baseline_1.py", tmp_path / "baseline_2.py"]
    kernels[0].write_text(
        base + f"\nimport time\n\ntime.sleep({TURN_ONE_S})  # the follower starts meanwhile\n"
    )
    kernels[1].write_text(base + "\n# the same C++, edited in Python only\n")
    trajectory = tmp_path / "trajectory.yaml"
    steps = [
        {"text": "Baseline first.", "tool_calls": [{"name": "benchmark", "kernel_file": str(kernels[0])}]},
        {"text": "Again.", "tool_calls": [{"name": "benchmark", "kernel_file": str(kernels[1])}]},
        {"text": "Done."},
    ]
    trajectory.write_text(yaml.safe_dump({"steps": steps}))
    spec = yaml.safe_load(PLAYBACK.read_text())
    spec["reference"] = str((PLAYBACK.parent / spec["reference"]).resolve())
    spec["trajectory"] = str(trajectory)
    problem = tmp_path / "scan_follow.yaml"
    problem.write_text(yaml.safe_dump(spec))
    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    env |= {"PYTHONPATH": str(REPO), "COLUMNS": "120"}
    agent = [sys.executable, "-m", "agent.cli"]
    run = subprocess.Popen(
        [*agent, "run", str(problem), "--runs-dir", str(runs)], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(runs.glob("*/run.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        (run_dir,) = runs.iterdir()
        followed = subprocess.run(
            [*agent, "show", str(run_dir), "--follow", "--no-code"], cwd=REPO, env=env,
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        run_out, run_err = run.communicate(timeout=300)
    finally:
        run.kill()
    assert run.returncode == 0, run_err[-3000:]
    assert followed.returncode == 0, followed.stderr[-3000:]
    before, marker, after = followed.stdout.partition("(Ctrl-C stops following; the run goes on)")
    assert marker, followed.stdout[-3000:]
    # following began during the first turn's build (turn 1 may be in either part, never in both); the
    # second build and the closing turn came after
    assert len(re.findall(r"turn 1 · [\d.]+s turn", followed.stdout)) == 1
    for turn in (2, 3):
        assert not re.search(rf"turn {turn} · [\d.]+s turn", before)
        assert re.search(rf"turn {turn} · [\d.]+s turn", after), after[-3000:]
    assert "new best" in followed.stdout  # turn 1's, wherever turn 1 fell
    assert "final re-check" in after
    assert "run ended: Finished" in after
    ended = json.loads((run_dir / "summary.json").read_text())
    assert ended["exit_status"] == "Finished"
