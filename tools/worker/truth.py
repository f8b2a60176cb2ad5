"""Truth worker: builds every case's weights and inputs, computes float64 truth, times the reference.

Runs in its own process, never beside a candidate. Inputs and weights go to the shared folder the
candidate reads; truth goes to the parent's private folder and never reaches the candidate.
Usage: python -m tools.worker.truth REQUEST.json CHANNEL_FD
"""

from __future__ import annotations

import copy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from tools import orders, wire
from tools.kbfile import SizeValue
from tools.problem import Case
from tools.results import TimingStats
from tools.wire import Channel
from tools.worker import fresh, refmod
from tools.worker.timing import measure


def reset_backend_flags() -> None:
    """fp32 means fp32: no TF32 and no reduced-precision reductions, whatever ran before.

    torch >= 2.9 has a second API (`fp32_precision`); mixing it with the legacy flags makes torch's own
    getters raise, so where it exists every knob of it is set back to "ieee" as well.
    """
    if hasattr(torch.backends, "fp32_precision"):
        torch.backends.fp32_precision = "ieee"
        cudnn = torch.backends.cudnn  # its `conv`, `rnn` and their `fp32_precision` are not in torch's stubs
        for knob in (
            torch.backends.cuda.matmul,
            cudnn,
            getattr(cudnn, "conv", None),
            getattr(cudnn, "rnn", None),
        ):
            if hasattr(knob, "fp32_precision"):
                setattr(knob, "fp32_precision", "ieee")  # noqa: B010 - see above
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.set_float32_matmul_precision("highest")


class Judge:
    """The reference twice on the device: in float64 (the truth) and in fp32 (its own error, the scale
    honest fp32 rounding reaches, and the time of one call, from which a candidate's call is bounded).
    Both models are moved once per case or shape; errors are computed where the outputs are."""

    def __init__(self, model: torch.nn.Module, device: str) -> None:
        self.device = device
        self.model64 = copy.deepcopy(model).double().to(device)
        for name, value in refmod.tensor_attributes(self.model64).items():  # .double() leaves these alone
            refmod.set_tensor_attribute(
                self.model64, name, value.to(device, torch.float64) if value.is_floating_point() else value
            )
        self.model32 = model.to(device)

    def truth(self, inputs: list[Any]) -> torch.Tensor:
        """The float64 output for `inputs`, on the CPU."""
        return self._truth(inputs).to("cpu", torch.float64)

    def _truth(self, inputs: list[Any]) -> torch.Tensor:
        with torch.no_grad():
            out: torch.Tensor = self.model64(*refmod.to_device(inputs, self.device, torch.float64))
            return out.detach()

    def truth_and_error(self, inputs: list[Any]) -> tuple[torch.Tensor, wire.ReferenceError_]:
        with torch.no_grad():
            truth = self._truth(inputs)
            args = refmod.to_device(inputs, self.device)
            _sync(self.device)
            start = time.perf_counter()
            out = self.model32(*args).detach()
            _sync(self.device)
            seconds = time.perf_counter() - start
            diff = out.to(torch.float64) - truth
            norm = float(torch.linalg.vector_norm(truth))
            error = wire.ReferenceError_(
                ref_max_abs_err=float(diff.abs().max()),
                ref_rel_l2_err=float(torch.linalg.vector_norm(diff)) / norm if norm > 0 else 0.0,
                ref_call_s=seconds,
            )
        return truth.to("cpu", torch.float64), error

    def release(self) -> None:
        self.model32.to("cpu")
        del self.model64


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def pins_of(item: orders.TruthCase | orders.TruthShape) -> dict[str, SizeValue]:
    """The constants this case fixes (tools/problem.py `Problem.pins`); an item without them pins every
    size it names, which comes to the same where those are the module's own constants."""
    return dict(item.pins or item.sizes)


def prepare_case(req: orders.TruthRequest, item: orders.TruthCase, device: str) -> wire.CaseReady:
    case = item.case
    built = refmod.build_case(req.reference_source, case, pins_of(item), item.seed)
    judge = Judge(built["model"], device)
    truth, error = judge.truth_and_error(built["inputs"])
    judge.release()
    torch.save(
        {
            "init_inputs": built["init_inputs"],
            "state_dict": built["state_dict"],
            "attributes": built["attributes"],
            "inputs": built["inputs"],
            "out_shape": list(truth.shape),
        },
        item.data_path,
    )
    torch.save(truth, item.truth_path)
    return wire.CaseReady(name=case.name, shape=list(truth.shape), **error.model_dump())


def reference_timing(
    built: dict[str, Any], sets: list[list[Any]], device: str, cfg: orders.LoopSettings
) -> TimingStats:
    model = built["model"].to(device)
    on_device = [refmod.to_device(s, device) for s in sets]
    current: list[list[Any]] = [[]]

    def prepare(i: int) -> None:
        current[0] = [t.clone() if isinstance(t, torch.Tensor) else t for t in on_device[i % len(on_device)]]

    def call(i: int) -> object:
        with torch.no_grad():
            return model(*current[0])

    samples = measure(call, prepare, device=device, **cfg.model_dump())
    return TimingStats.model_validate(samples.stats())


def prepare_timing(req: orders.TruthRequest, item: orders.TruthShape, device: str, channel: Channel) -> None:
    case = Case(name=item.name)
    built = refmod.build_case(req.reference_source, case, pins_of(item), item.seed)
    if not item.truth_offsets:  # a paired check (tools/judge/_paired.py): the reference's time, nothing else
        began = time.perf_counter()
        checked = reference_timing(built, [built["inputs"]], device, item.reference_cfg)
        channel.send(
            wire.TimingReady(name=item.name, reference=checked, reference_seconds=time.perf_counter() - began)
        )
        return
    # The inputs of the calls the judge will check, as the candidate's worker makes every call's: the base
    # set rolled by that call's secret offset (tools/worker/fresh.py).
    sets = [fresh.rolled(built["inputs"], offset) for offset in item.truth_offsets]
    judge = Judge(built["model"], device)
    # The fp32 reference's own error (the tolerance's scale) and call time, from the first set only: the
    # others are the same values rolled, and a third of this shape's reference calls went to them.
    first, error = judge.truth_and_error(sets[0])
    truths = [first, *(judge.truth(inputs) for inputs in sets[1:])]
    ref_errors = [error] * len(sets)
    judge.release()
    torch.save(
        {
            "init_inputs": built["init_inputs"],
            "state_dict": built["state_dict"],
            "attributes": built["attributes"],
            "base": built["inputs"],
            "out_shape": list(truths[0].shape),
        },
        item.data_path,
    )
    torch.save(truths, item.truth_path)
    del truths
    start = time.perf_counter()
    stats = reference_timing(built, sets, device, item.reference_cfg) if item.time_reference else None
    channel.send(
        wire.TimingReady(
            name=item.name,
            shifted=fresh.shifted_sizes(built["inputs"]),
            reference=stats,
            ref_errors=ref_errors,
            reference_seconds=time.perf_counter() - start,
        )
    )


def run_request(req: orders.TruthRequest, channel: Channel) -> int:
    """One evaluation's data and truth: every case, then every timing shape."""
    device = req.device
    if device == "cuda" and not torch.cuda.is_available():
        channel.send(wire.NoDevice(message="this problem needs a CUDA GPU and none is visible"))
        return 0
    reset_backend_flags()
    where = "start"
    try:
        for case in req.cases:
            where = f"case {case.case.name}"
            channel.send(prepare_case(req, case, device))
        for shape in req.timing:
            where = f"timing shape {shape.name}"
            prepare_timing(req, shape, device, channel)
    except Exception as exc:
        channel.send(
            wire.TruthError(
                where=where, message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()
            )
        )
        return 1
    channel.send(wire.Done())
    return 0


def main(request_path: str, fd: str) -> int:
    channel = Channel(int(fd))
    channel.send(wire.Ready())
    return run_request(orders.TruthRequest.model_validate_json(Path(request_path).read_text()), channel)


def serve(fd: str) -> int:
    """The warm truth worker (tools/supervise/truth_server.py): one request per stdin line, each answered on the channel
    and closed by `finished`; CUDA stays initialised between requests, its cached memory is released."""
    channel = Channel(int(fd))
    if torch.cuda.is_available():
        torch.empty(1, device="cuda")
    channel.send(wire.Ready())
    for line in sys.stdin:
        served = orders.ServedTruthRequest.model_validate_json(line)
        channel.send(wire.Ready(id=served.id))
        code = run_request(served.request, channel)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        channel.send(wire.RequestFinished(id=served.id, returncode=code))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        sys.exit(serve(sys.argv[2]))
    sys.exit(main(sys.argv[1], sys.argv[2]))
