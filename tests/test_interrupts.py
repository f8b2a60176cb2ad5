"""Ctrl-C while the main thread waits on worker threads: a flag, polled, never an exception raised inside
threading's lock code (agent.execution.interrupts)."""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.budget import Budget
from agent.conversation import State
from agent.execution.executor import LeasedExecutor
from agent.execution.interrupts import ctrl_c_as_flag, raised_by_ctrl_c, wait_or_stop
from agent.execution.leases import Leases
from agent.exits import Interrupted
from agent.loop import Agent
from agent.providers.base import Message, ModelReply
from agent.providers.scripted import ScriptedProvider
from agent.run_setup import RunSetup
from agent.runlog.events import ErrorEvent, RunConfig
from agent.runlog.reader import load_run
from agent.views.live import NullDisplay
from tests.helpers.playback import PLAYBACK, TRAJECTORY, FixedTimeEvaluator
from tools.problem import load_problem


def test_a_sigint_during_the_wait_stops_once_kills_until_done_and_restores_the_handler() -> None:
    released = threading.Event()
    calls: list[str] = []

    def stop() -> None:
        calls.append("stop")

    def kill() -> None:
        calls.append("kill")
        if calls.count("kill") == 2:  # what a thread started after the stop is killed on the next round
            released.set()

    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_as_flag() as ctrl_c, cf.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(released.wait, 30) for _ in range(2)]
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        for _ in range(5):  # many presses while stopping: still one stop
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        assert wait_or_stop(futures, ctrl_c, stop, kill, poll_s=0.05)
    assert calls == ["stop", "kill", "kill"]
    assert all(f.result() for f in futures)
    assert signal.getsignal(signal.SIGINT) is before


def test_without_ctrl_c_the_wait_returns_when_all_are_done_and_nothing_is_stopped() -> None:
    calls: list[str] = []
    with ctrl_c_as_flag() as ctrl_c, cf.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(sum, [1, 2]) for _ in range(3)]
        assert not wait_or_stop(futures, ctrl_c, lambda: calls.append("stop"), lambda: calls.append("kill"))
    assert calls == []
    assert [f.result() for f in futures] == [3, 3, 3]


def test_off_the_main_thread_the_sigint_handler_is_left_alone() -> None:
    seen: list[object] = []

    def inside() -> None:
        with ctrl_c_as_flag():
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    worker = threading.Thread(target=inside)
    worker.start()
    worker.join()
    assert seen == [before]


def test_an_ignored_sigint_stays_ignored() -> None:
    """A `nohup` or background job starts with SIGINT ignored: the wait must not start hearing it."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with ctrl_c_as_flag() as ctrl_c:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert not ctrl_c.pressed
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def raised_while_handling(first: BaseException) -> RuntimeError:
    """A RuntimeError raised while `first` was being handled (its __context__), as threading's lock code
    raises "release unlocked lock" when a KeyboardInterrupt lands inside Condition.wait's release."""
    try:
        try:
            raise first
        except BaseException:
            raise RuntimeError(
                "release unlocked lock"
            ) from None  # `from None` hides it; __context__ keeps it
    except RuntimeError as exc:
        return exc


def lock_code_interrupted() -> RuntimeError:
    return raised_while_handling(KeyboardInterrupt())


def test_an_error_raised_while_a_ctrl_c_was_handled_counts_as_the_ctrl_c() -> None:
    assert raised_by_ctrl_c(lock_code_interrupted())
    assert raised_by_ctrl_c(KeyboardInterrupt())
    assert not raised_by_ctrl_c(RuntimeError("release unlocked lock"))
    assert not raised_by_ctrl_c(raised_while_handling(ValueError("a harness bug")))


def test_the_cli_exits_130_when_ctrl_c_surfaces_as_a_lock_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent import cli

    def handler(args: argparse.Namespace) -> int:
        raise lock_code_interrupted()

    class Parser:
        def parse_args(self, argv: object) -> argparse.Namespace:
            return argparse.Namespace(handler=handler)

    monkeypatch.setattr(cli, "build_parser", Parser)
    assert cli.main([]) == 130


def test_the_cli_still_raises_a_harness_error_that_no_ctrl_c_caused(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent import cli

    def handler(args: argparse.Namespace) -> int:
        raise RuntimeError("a harness bug")

    class Parser:
        def parse_args(self, argv: object) -> argparse.Namespace:
            return argparse.Namespace(handler=handler)

    monkeypatch.setattr(cli, "build_parser", Parser)
    with pytest.raises(RuntimeError, match="a harness bug"):
        cli.main([])


class InterruptedProvider(ScriptedProvider):
    """The bundled playback, whose second model call meets a Ctrl-C inside threading's lock code."""

    def complete(self, system: str, tools: list[dict[str, Any]], messages: list[Message]) -> ModelReply:
        if any(m["role"] == "assistant" for m in messages):
            raise lock_code_interrupted()
        return super().complete(system, tools, messages)


def test_a_run_whose_ctrl_c_surfaces_as_a_lock_error_ends_interrupted_not_a_harness_error(
    tmp_path: Path,
) -> None:
    from agent.cli.run import create_log

    problem = load_problem(PLAYBACK)
    provider = InterruptedProvider(TRAJECTORY)
    log = create_log(
        problem,
        provider,
        RunConfig(problem_path=str(PLAYBACK), provider="scripted", model="scripted"),
        tmp_path,
    )
    executor = LeasedExecutor(Leases(gpus=None, compile_slots=2), FixedTimeEvaluator())
    setup = RunSetup(problem, provider, log, "system", Budget(), executor, NullDisplay())
    outcome = Agent(setup, State(messages=[{"role": "user", "content": "go"}])).run()
    assert isinstance(outcome, Interrupted), outcome
    summary = load_run(log.dir).summary
    assert summary is not None
    assert summary.exit_status == outcome.status
    assert not [e for e in load_run(log.dir).events if isinstance(e, ErrorEvent)]
