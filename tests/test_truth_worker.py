"""The truth worker's timing shapes (tools/worker/truth.py): float64 truth for every checked call's inputs,
the fp32 reference's own error from the first set only (the others are the same values rolled)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tools import orders, wire
from tools.problem import Case, Tolerance
from tools.worker import fresh, refmod, truth
from tools.worker.outputs import KeptWriter

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


def kept_request(tmp_path: Path, handle: str | None, offsets: list[int]) -> orders.TruthRequest:
    loop = orders.LoopSettings(warmup=0, min_iters=3, max_iters=3, target_rse=0.1, max_seconds=1.0)
    item = orders.TruthShape(
        name="small", sizes=SIZES, seed=321, truth_offsets=offsets, time_reference=False, reference_cfg=loop,
        data_path=str(tmp_path / "data.pt"), truth_path=str(tmp_path / "truth.pt"),
    )  # fmt: skip
    tolerance = Tolerance(atol=1e-4, rtol=1e-4, rel_l2=1e-5)
    return orders.TruthRequest(
        reference_source=REFERENCE.read_text(),
        device="cpu",
        timing=[item],
        keep_as=handle,
        tolerance=tolerance,
    )


def test_the_warm_server_keeps_a_shapes_truth_and_judges_the_timed_outputs_where_it_is(
    tmp_path: Path,
) -> None:
    offsets = [0, 7, 29]
    kept: dict[str, truth.Kept] = {}
    channel = Sent()
    assert truth.serve_one(kept_request(tmp_path, "ev1", offsets), kept, channel) == 0  # type: ignore[arg-type]
    assert not (tmp_path / "truth.pt").exists()  # no truth file: it stayed in the server
    ready = next(m for m in channel.messages if isinstance(m, wire.TimingReady))
    assert (ready.truth_finite, ready.truth_varies, ready.constant_passes) == (True, True, False)
    made = kept["ev1"]["small"]
    cold = Sent()
    truth.serve_one(kept_request(tmp_path, None, offsets), {}, cold)  # type: ignore[arg-type]
    on_file = torch.load(tmp_path / "truth.pt", weights_only=True)
    assert all(torch.equal(a, b) for a, b in zip(made, on_file, strict=True))  # the same truth either way

    # The candidate's outputs by slot: slot 0 right, slot 2 wrong in one element.
    wrong = made[2].float().clone()
    wrong.view(-1)[5] += 1.0
    writer = KeptWriter(tmp_path / "outs.pt")  # as the candidate's worker keeps them
    writer.keep(0, made[0].float())
    writer.keep(2, wrong)
    writer.close()
    shape = orders.RecheckShape(
        name="small", out_path=str(tmp_path / "outs.pt"), kept={0: 1, 2: 4, 1: 9}, sizes=SIZES,
        ref_errors=[None, None, None],
    )  # fmt: skip
    req = orders.RecheckRequest(
        handle="ev1", tolerance=kept_request(tmp_path, None, []).tolerance, shapes=[shape]
    )
    answer = Sent()
    assert truth.serve_one(req, kept, answer) == 0  # type: ignore[arg-type]
    (rechecked,) = answer.messages
    assert [(r.name, r.status) for r in rechecked.results] == [
        ("small/call1", "passed"), ("small/call9", "error"), ("small/call4", "failed"),
    ]  # fmt: skip
    assert "missing" in rechecked.results[1].message

    truth.serve_one(orders.ForgetRequest(handle="ev1"), kept, Sent())  # type: ignore[arg-type]
    assert kept == {}
    lost = Sent()
    assert truth.serve_one(req, kept, lost) == 1  # type: ignore[arg-type]
    assert isinstance(lost.messages[0], wire.TruthError)


def test_the_warm_server_keeps_the_truth_of_a_few_evaluations_at_most(tmp_path: Path) -> None:
    kept: dict[str, truth.Kept] = {}
    for i in range(truth.MAX_KEPT + 2):
        truth.serve_one(kept_request(tmp_path, f"ev{i}", [3]), kept, Sent())  # type: ignore[arg-type]
    assert list(kept) == [f"ev{i}" for i in range(2, truth.MAX_KEPT + 2)]  # the oldest went first


def test_a_warm_server_builds_the_paired_checks_reference_once_per_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    builds: list[int] = []
    original = refmod.build_case

    def counted(*args: Any) -> dict[str, Any]:
        builds.append(args[3])
        return original(*args)

    monkeypatch.setattr(refmod, "build_case", counted)
    monkeypatch.setattr(truth, "CHECKED_REFERENCES", {})
    loop = orders.LoopSettings(warmup=0, min_iters=3, max_iters=3, target_rse=0.5, max_seconds=1.0)

    def check(seed: int, warm: bool) -> wire.TimingReady:
        item = orders.TruthShape(
            name="small", sizes=SIZES, seed=seed, truth_offsets=[], time_reference=True, reference_cfg=loop,
            data_path="/nonexistent/data.pt", truth_path="/nonexistent/truth.pt",
        )  # fmt: skip
        request = orders.TruthRequest(reference_source=REFERENCE.read_text(), device="cpu", timing=[item])
        channel = Sent()
        forwards = truth.ForwardCache() if warm else None
        truth.prepare_timing(request, item, "cpu", channel, None, forwards)  # type: ignore[arg-type]
        (ready,) = channel.messages
        assert ready.reference is not None
        assert ready.reference.n == 3
        return ready

    check(1, warm=True)
    check(2, warm=True)  # another evaluation's seed: the same reference timed again
    assert builds == [1]
    check(3, warm=False)  # a cold worker builds its own
    assert builds == [1, 3]
