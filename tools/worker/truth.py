"""Truth worker: builds every case's weights and inputs, computes float64 truth, times the reference.

Runs in its own process, never beside a candidate. Inputs and weights go to the shared folder the
candidate reads; truth goes to the parent's private folder and never reaches the candidate.
Usage: python -m tools.worker.truth REQUEST.json CHANNEL_FD
"""

from __future__ import annotations

import contextlib
import copy
import sys
import time
import traceback
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import IO, Any, Literal

import torch

from tools import orders, wire
from tools.compare import compare_calls, constant_passes, truths_vary
from tools.kbfile import SizeValue
from tools.problem import Case, Tolerance
from tools.results import CaseResult, TimingStats
from tools.wire import Channel
from tools.worker import fresh, refmod
from tools.worker.graphs import ForwardCache
from tools.worker.launch_free import launch_free_timing
from tools.worker.outputs import Staging, UnreadableOutputs, load_kept
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
    Both models are moved once per case or shape; errors are computed where the outputs are. In the warm
    server on a GPU (`forwards`), both forwards are replayed from CUDA graphs where that gives the eager
    result bit for bit (tools/worker/graphs.py); `label` names the case's structure there."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: str,
        forwards: ForwardCache | None = None,
        label: Hashable = None,
    ) -> None:
        self.device = device
        self.forwards = forwards if device == "cuda" else None
        self.label = label
        self.model64 = copy.deepcopy(model).double().to(device)
        for name, value in refmod.tensor_attributes(self.model64).items():  # .double() leaves these alone
            refmod.set_tensor_attribute(
                self.model64, name, value.to(device, torch.float64) if value.is_floating_point() else value
            )
        self.model32 = model.to(device)

    def _forward(self, model: torch.nn.Module, precision: str, args: list[Any]) -> tuple[torch.Tensor, float]:
        """The output and one eager call's seconds."""
        if self.forwards is not None:
            return self.forwards.run((self.label, precision), model, args)
        with torch.no_grad():
            _sync(self.device)
            start = time.perf_counter()
            out: torch.Tensor = model(*args).detach()
            _sync(self.device)
        return out, time.perf_counter() - start

    def truth(self, inputs: list[Any]) -> torch.Tensor:
        """The float64 output for `inputs`, on the device."""
        return self._forward(self.model64, "fp64", refmod.to_device(inputs, self.device, torch.float64))[0]

    def truth_and_error(self, inputs: list[Any]) -> tuple[torch.Tensor, wire.ReferenceError_]:
        """The float64 output on the device, and the fp32 reference's error against it."""
        truth = self.truth(inputs)
        out, seconds = self._forward(self.model32, "fp32", refmod.to_device(inputs, self.device))
        with torch.no_grad():
            diff = out.to(torch.float64) - truth
            norm = float(torch.linalg.vector_norm(truth))
            error = wire.ReferenceError_(
                ref_max_abs_err=float(diff.abs().max()),
                ref_rel_l2_err=float(torch.linalg.vector_norm(diff)) / norm if norm > 0 else 0.0,
                ref_call_s=seconds,
            )
        return truth, error

    def release(self) -> None:
        self.model32.to("cpu")
        del self.model64


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class DeviceGate:
    """The warm server's turns on the device: before its device work it asks the harness (`DeviceWanted`)
    and waits for `granted` on stdin; after it, synchronised, it says so (`DeviceReleased`). Its host work
    (building inputs, writing files) holds nothing, so another evaluation's timed loop runs meanwhile. A
    cold worker (`stdin` None) runs ungated: it has no conversation, and its harness holds what it needs."""

    def __init__(self, channel: Channel | None = None, stdin: IO[str] | None = None, device: str = "cpu"):
        self.channel, self.stdin, self.device = channel, stdin, device

    @contextlib.contextmanager
    def hold(self, mode: Literal["shared", "exclusive"] = "shared") -> Iterator[None]:
        if self.channel is None or self.stdin is None:
            yield
            return
        self.channel.send(wire.DeviceWanted(mode=mode))
        answer = self.stdin.readline().strip()
        if answer != "granted":
            raise RuntimeError(f"the harness did not grant the device (it said {answer!r})")
        try:
            yield
        finally:
            _sync(self.device)  # queued kernels are device work too: done before the turn ends
            self.channel.send(wire.DeviceReleased())


UNGATED = DeviceGate()


def pins_of(item: orders.TruthCase | orders.TruthShape) -> dict[str, SizeValue]:
    """The constants this case fixes (tools/problem.py `Problem.pins`); an item without them pins every
    size it names, which comes to the same where those are the module's own constants."""
    return dict(item.pins or item.sizes)


def structure(req: orders.TruthRequest, item: orders.TruthCase | orders.TruthShape) -> Hashable:
    """What makes two items' reference the same computation, bar the values (tools/worker/graphs.py)."""
    return (req.reference_source, tuple(sorted(pins_of(item).items())))


def prepare_case(
    req: orders.TruthRequest,
    item: orders.TruthCase,
    device: str,
    forwards: ForwardCache | None = None,
    gate: DeviceGate = UNGATED,
) -> wire.CaseReady:
    case = item.case
    built = refmod.build_case(req.reference_source, case, pins_of(item), item.seed)
    with gate.hold():
        judge = Judge(built["model"], device, forwards, structure(req, item))
        truth, error = judge.truth_and_error(built["inputs"])
        truth = truth.to("cpu", torch.float64)
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


Kept = dict[str, list[torch.Tensor]]  # shape -> its checked calls' truth, on the device


def truth_facts(
    truths: list[torch.Tensor], tolerance: Tolerance | None, first: wire.ReferenceError_
) -> dict[str, bool]:
    """What the judge needs to know of a shape's truth besides comparing outputs with it (wire.TimingReady)."""
    return {
        "truth_finite": all(bool(torch.isfinite(t).all()) for t in truths),
        "truth_varies": truths_vary(truths),
        "constant_passes": tolerance is not None and constant_passes(truths[0], tolerance, first),
    }


CHECKED_REFERENCES: dict[Hashable, dict[str, Any]] = {}  # a warm CUDA server's, for paired checks
MAX_CHECKED_REFERENCES = 4


def checked_reference(req: orders.TruthRequest, item: orders.TruthShape, warm: bool) -> dict[str, Any]:
    """The reference and inputs a paired check times. A warm server builds them once per source and shape
    (0.14 s of the H200's ~0.6 s check went to the build) and times those again: the check asks whether the
    reference's speed moved, which its weights' values do not decide (the cached median was timed on yet
    other inputs)."""
    key = (structure(req, item), item.name)
    if warm and key in CHECKED_REFERENCES:
        return CHECKED_REFERENCES[key]
    built = refmod.build_case(req.reference_source, Case(name=item.name), pins_of(item), item.seed)
    if warm:
        while len(CHECKED_REFERENCES) >= MAX_CHECKED_REFERENCES:
            CHECKED_REFERENCES.pop(next(iter(CHECKED_REFERENCES)))
        CHECKED_REFERENCES[key] = built
    return built


def prepare_timing(
    req: orders.TruthRequest,
    item: orders.TruthShape,
    device: str,
    channel: Channel,
    keep: Kept | None = None,
    forwards: ForwardCache | None = None,
    gate: DeviceGate = UNGATED,
) -> None:
    """One shape's base inputs (to the shared folder) and its checked calls' truth: into `keep` (the warm
    server's, on the device) or to the private folder."""
    if not item.truth_offsets:  # a paired check (tools/judge/_paired.py): the reference's time, nothing else
        began = time.perf_counter()
        built = checked_reference(req, item, warm=forwards is not None)
        with gate.hold("exclusive"):
            checked = reference_timing(built, [built["inputs"]], device, item.reference_cfg)
        channel.send(
            wire.TimingReady(name=item.name, reference=checked, reference_seconds=time.perf_counter() - began)
        )
        return
    built = refmod.build_case(req.reference_source, Case(name=item.name), pins_of(item), item.seed)
    offsets = item.truth_offsets
    # A turn on the device for each forward, not one for the shape: a timed loop waiting for the device alone
    # waits for one forward (H200: a shape's turn held it 0.14-0.33 s, and with two trajectories the timed
    # loops and paired checks waited ~15 s a minute in all for such shared turns to end).
    with gate.hold():
        judge = Judge(built["model"], device, forwards, structure(req, item))
        # The inputs of the calls the judge will check, as the candidate's worker makes every call's: the
        # base set, moved to the device once, rolled there by that call's secret offset (tools/worker/fresh.py).
        # Rolled on the host, the selective scan's three sets of a 100 MB input took ~0.1 s and three copies.
        base = refmod.to_device(built["inputs"], device)
        # The fp32 reference's own error (the tolerance's scale) and call time, from the first set only: the
        # others are the same values rolled, and a third of this shape's reference calls went to them.
        first, error = judge.truth_and_error(fresh.rolled(base, offsets[0]))
    truths = [first]
    for offset in offsets[1:]:
        with gate.hold():
            truths.append(judge.truth(fresh.rolled(base, offset)))
    ref_errors = [error] * len(offsets)
    out_numel = truths[0].numel()
    with gate.hold():
        facts = truth_facts(truths, req.tolerance, error)
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
    if keep is not None:
        keep[item.name] = truths
    else:
        torch.save([t.to("cpu", torch.float64) for t in truths], item.truth_path)
    del truths
    start = time.perf_counter()
    stats = launch_free = None
    if item.time_reference or item.time_launch_free:
        with gate.hold("exclusive"):
            sets = [fresh.rolled(base, offset) for offset in offsets]
            stats = reference_timing(built, sets, device, item.reference_cfg) if item.time_reference else None
            if item.time_launch_free:
                launch_free = launch_free_timing(built["model"], sets, device, item.reference_cfg)
            del sets
    del base
    channel.send(
        wire.TimingReady(
            name=item.name,
            shifted=fresh.shifted_sizes(built["inputs"]),
            reference=stats,
            launch_free=launch_free,
            ref_errors=ref_errors,
            reference_seconds=time.perf_counter() - start,
            out_numel=out_numel,
            **facts,
        )
    )


def run_request(
    req: orders.TruthRequest,
    channel: Channel,
    keep: Kept | None = None,
    forwards: ForwardCache | None = None,
    gate: DeviceGate = UNGATED,
) -> int:
    """One evaluation's data and truth: every case, then every timing shape (their truth into `keep`
    where given; the reference's forwards through `forwards`, the warm server's graphs, where given)."""
    device = req.device
    if device == "cuda" and not torch.cuda.is_available():
        channel.send(wire.NoDevice(message="this problem needs a CUDA GPU and none is visible"))
        return 0
    if req.threads:  # a CPU problem's: for its truth, its reference's timing and the server's re-checks
        torch.set_num_threads(req.threads)
    reset_backend_flags()
    where = "start"
    try:
        for case in req.cases:
            where = f"case {case.case.name}"
            channel.send(prepare_case(req, case, device, forwards, gate))
        for shape in req.timing:
            where = f"timing shape {shape.name}"
            prepare_timing(req, shape, device, channel, keep, forwards, gate)
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


STAGING = Staging()  # the server's pinned buffer for the candidates' kept outputs (tools/worker/outputs.py)
MAX_KEPT = 4  # evaluations whose truth the server keeps at once (one running, one or two made ahead)


def recheck(
    req: orders.RecheckRequest, kept: Kept | None, channel: Channel, gate: DeviceGate = UNGATED
) -> int:
    """The candidate's timed outputs against the truth kept for them, on the device where it is."""
    if kept is None:
        channel.send(wire.TruthError(where="recheck", message=f"no truth is kept under {req.handle}"))
        return 1
    for shape in req.shapes:
        truths = kept.get(shape.name)
        if truths is None:
            channel.send(wire.TruthError(where=f"recheck {shape.name}", message="no truth kept for it"))
            return 1
        device = str(truths[0].device)
        try:  # the files into pinned memory: host work, while another trajectory's timed loop runs
            host = load_kept(shape.out_path, device != "cpu", STAGING)
        except UnreadableOutputs as exc:  # the candidate's files: its fault, not the harness's
            bad = CaseResult(name=f"{shape.name}/timed", status="error", message=f"unreadable outputs: {exc}")
            channel.send(wire.Rechecked(name=shape.name, results=[bad]))
            continue
        with gate.hold():  # their copies to the device (H200: ~0.25 s an evaluation held, with the reads)
            outs = {slot: out.to(device) for slot, out in host.items()}
            results = compare_calls(
                shape.name, outs, truths, shape.kept, req.tolerance, shape.sizes, shape.ref_errors
            )
        del outs, host
        channel.send(wire.Rechecked(name=shape.name, results=results))
    return 0


def serve_one(
    request: orders.ServedRequest,
    kept: dict[str, Kept],
    channel: Channel,
    forwards: ForwardCache | None = None,
    gate: DeviceGate = UNGATED,
) -> int:
    match request:
        case orders.TruthRequest(keep_as=str(handle)):
            while len(kept) >= MAX_KEPT:  # an evaluation that never said it ended
                kept.pop(next(iter(kept)))
            return run_request(request, channel, kept.setdefault(handle, {}), forwards, gate)
        case orders.TruthRequest():
            return run_request(request, channel, None, forwards, gate)
        case orders.RecheckRequest():
            return recheck(request, kept.get(request.handle), channel, gate)
        case orders.ForgetRequest():
            kept.pop(request.handle, None)
            return 0


def serve(fd: str) -> int:
    """The warm truth worker (tools/supervise/truth_server.py): one request per stdin line, each answered on the
    channel and closed by `finished`; CUDA stays initialised between requests, the timing shapes' truth of
    the evaluations in flight stays on the device, other cached memory is released."""
    channel = Channel(int(fd))
    if torch.cuda.is_available():
        torch.empty(1, device="cuda")
    channel.send(wire.Ready())
    kept: dict[str, Kept] = {}
    forwards = ForwardCache(defer=True) if torch.cuda.is_available() else None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    while line := sys.stdin.readline():  # readline, not iteration: a gate reads its grants in between
        served = orders.ServedTruthRequest.model_validate_json(line)
        if forwards is not None:
            forwards.next_request()
        channel.send(wire.Ready(id=served.id))
        code = serve_one(served.request, kept, channel, forwards, DeviceGate(channel, sys.stdin, device))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        channel.send(wire.RequestFinished(id=served.id, returncode=code))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        sys.exit(serve(sys.argv[2]))
    sys.exit(main(sys.argv[1], sys.argv[2]))
