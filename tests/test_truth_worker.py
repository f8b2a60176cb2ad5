"""The truth worker's timing shapes (tools/worker/truth.py): float64 truth for every checked call's inputs,
the fp32 reference's own error from the first set only (the others are the same values rolled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tools import orders, wire
from tools.problem import Case
from tools.worker import fresh, refmod, truth

REFERENCE = Path(__file__).resolve().parent.parent / "problems" / "selective_scan" / "reference.py"
SIZES = {"batch_size": 2, "seq_len": 40, "d_model": 8, "d_state": 4}


class Sent:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    def send(self, message: Any) -> None:
        self.messages.append(message)


def test_each_checked_call_gets_its_own_truth_and_the_fp32_error_is_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp32_runs: list[int] = []
    original = truth.Judge.truth_and_error

    def counted(self: truth.Judge, inputs: list[Any]) -> tuple[torch.Tensor, wire.ReferenceError_]:
        fp32_runs.append(1)
        return original(self, inputs)

    monkeypatch.setattr(truth.Judge, "truth_and_error", counted)
    offsets = [0, 7, 29]
    loop = orders.LoopSettings(
        warmup=0, min_iters=3, max_iters=3, target_rse=0.1, max_seconds=1.0
    )  # not timed
    item = orders.TruthShape(
        name="small", sizes=SIZES, seed=123, truth_offsets=offsets, time_reference=False, reference_cfg=loop,
        data_path=str(tmp_path / "data.pt"), truth_path=str(tmp_path / "truth.pt"),
    )  # fmt: skip
    request = orders.TruthRequest(reference_source=REFERENCE.read_text(), device="cpu", timing=[item])
    channel = Sent()
    truth.prepare_timing(request, item, "cpu", channel)  # type: ignore[arg-type]  # a stand-in Channel

    assert len(fp32_runs) == 1
    (ready,) = channel.messages
    assert isinstance(ready, wire.TimingReady)
    assert len(ready.ref_errors) == len(offsets)
    assert len({e.model_dump_json() for e in ready.ref_errors}) == 1
    truths = torch.load(item.truth_path, weights_only=True)
    built = refmod.build_case(REFERENCE.read_text(), Case(name="small"), SIZES, 123)
    model64 = built["model"].double()
    for offset, made in zip(offsets, truths, strict=True):
        inputs = [t.double() if t.is_floating_point() else t for t in fresh.rolled(built["inputs"], offset)]
        with torch.no_grad():
            expected = model64(*inputs)
        assert made.dtype == torch.float64
        assert torch.equal(made, expected)
    assert not torch.equal(truths[0], truths[1])  # other contents, other truth
