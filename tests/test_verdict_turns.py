"""The candidate's turns on the device, as the judge takes them from its worker's messages
(tools/judge/_turns.py): alone from a shape's first call to its loop's end, and past it only while the
shape's profile runs (its kernels' shares are of device time); shared otherwise; nothing once the worker
has given the device back after a shape's device work, until it asks again (tools/worker/device_turn.py)."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace
from typing import Any

import pytest

from tools import wire
from tools.judge._turns import CandidateTurns
from tools.judge._verdicts import Verdicts
from tools.worker.device_turn import DeviceTurn


def shape(name: str, profile: bool) -> Any:
    return SimpleNamespace(
        name=name, profile=profile, truth=SimpleNamespace(truth_offsets=[11, 12, 13]),
        cfg=SimpleNamespace(min_iters=3), shifted=[],
    )  # fmt: skip


def judged(turns: list[str]) -> Verdicts:
    plan: Any = SimpleNamespace(timing=[shape("primary", True), shape("other", False)], cases=[])
    verdicts = Verdicts(problem=None, plan=plan)  # type: ignore[arg-type]
    verdicts.turns = CandidateTurns(turns.append, "none", frozenset({"primary"}))
    return verdicts


def loop(verdicts: Verdicts, name: str) -> None:
    verdicts.handle(wire.BatchBegin(name=name))
    for index in (-1, 0, 1, 2):
        assert verdicts.handle(wire.NextCall(name=name, index=index, wants_stop=False)) is not None
    verdicts.handle(wire.BatchEnd(name=name))


def test_a_loop_holds_the_device_alone_to_its_end_and_a_profiled_one_past_it() -> None:
    turns: list[str] = []
    verdicts = judged(turns)
    for name in ("primary", "other"):
        loop(verdicts, name)
        turns.append(f"end of {name}")
    assert turns == ["exclusive", "end of primary", "exclusive", "shared", "end of other"]


def test_a_worker_that_gives_the_device_back_holds_nothing_until_it_asks_again() -> None:
    turns: list[str] = []
    verdicts = judged(turns)
    loop(verdicts, "primary")
    verdicts.handle(wire.Profiling(name="primary"))
    verdicts.handle(wire.DeviceReleased())  # its profile done: given back, then asked for shared
    verdicts.handle(wire.TimingDone.model_construct(name="primary"))  # after the release: no turn back
    assert turns == ["exclusive", "none"]
    assert verdicts.handle(wire.DeviceWanted(mode="exclusive")) == "granted"  # asked alone: given shared
    loop(verdicts, "other")
    assert turns == ["exclusive", "none", "shared", "exclusive", "shared"]


def test_a_failed_shape_takes_the_shared_turn_back_wherever_the_worker_was() -> None:
    turns: list[str] = []
    verdicts = judged(turns)
    verdicts.handle(wire.DeviceReleased())
    verdicts.handle(wire.Failed(kind="timing", name="other", error="runtime_error", message="boom"))
    assert turns == ["none", "shared"]
    assert verdicts.turns is not None
    assert not verdicts.turns.released


def test_without_turns_the_worker_is_still_answered() -> None:
    plan: Any = SimpleNamespace(timing=[], cases=[])
    assert Verdicts(problem=None, plan=plan).handle(wire.DeviceWanted(mode="shared")) == "granted"  # type: ignore[arg-type]


def sent(fd: int) -> list[str]:
    with os.fdopen(fd, "rb") as f:
        return [wire.parse_worker_message(line).event for line in f.read().splitlines()]  # type: ignore[union-attr]


def test_the_worker_gives_the_device_back_once_and_waits_for_it_before_using_it_again() -> None:
    r, w = os.pipe()
    turn = DeviceTurn(wire.Channel(w), "cuda", stdin=io.StringIO("granted\ngranted\n"))
    turn.want()  # held from the start: nothing asked
    turn.release()
    turn.release()
    turn.want()
    turn.want()
    turn.share()  # after a profile alone: given back and asked for again, shared
    del turn
    assert sent(r) == ["device_released", "device_wanted", "device_released", "device_wanted"]


def test_the_worker_stops_where_the_device_is_not_given_back() -> None:
    r, w = os.pipe()
    turn = DeviceTurn(wire.Channel(w), "cuda", stdin=io.StringIO("stop\n"))
    turn.release()
    with pytest.raises(RuntimeError, match="not given back"):
        turn.want()
    os.close(w)
    os.close(r)


def test_a_cpu_worker_keeps_its_turn_its_host_work_is_its_device_work() -> None:
    r, w = os.pipe()
    turn = DeviceTurn(wire.Channel(w), "cpu", stdin=io.StringIO(""))
    turn.release()
    turn.want()
    del turn
    assert sent(r) == []
