"""Ctrl-C while the main thread waits on worker threads: a flag, polled, never an exception raised inside
threading's lock code (agent.execution.interrupts)."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import threading

from agent.execution.interrupts import ctrl_c_as_flag, wait_or_stop


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
