"""The candidate's turns on the device, as the judge takes them from its worker's messages
(tools/judge/_verdicts.py): alone from a shape's first call to its loop's end, and past it only while the
shape's profile runs (its kernels' shares are of device time); shared otherwise."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tools import wire
from tools.judge._verdicts import Verdicts


def shape(name: str, profile: bool) -> Any:
    return SimpleNamespace(
        name=name, profile=profile, truth=SimpleNamespace(truth_offsets=[11, 12, 13]),
        cfg=SimpleNamespace(min_iters=3), shifted=[],
    )  # fmt: skip


def test_a_loop_holds_the_device_alone_to_its_end_and_a_profiled_one_past_it() -> None:
    turns: list[str] = []
    plan: Any = SimpleNamespace(timing=[shape("primary", True), shape("other", False)], cases=[])
    verdicts = Verdicts(problem=None, plan=plan)  # type: ignore[arg-type]
    verdicts.turn = turns.append
    for name in ("primary", "other"):
        verdicts.handle(wire.BatchBegin(name=name))
        for index in (-1, 0, 1, 2):
            assert verdicts.handle(wire.NextCall(name=name, index=index, wants_stop=False)) is not None
        verdicts.handle(wire.BatchEnd(name=name))
        turns.append(f"end of {name}")
    assert turns == ["exclusive", "end of primary", "exclusive", "shared", "end of other"]
