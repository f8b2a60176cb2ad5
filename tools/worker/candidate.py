"""Candidate worker: imports the candidate (building its extensions), runs every case, times every shape.

It gets inputs and weights only; truth and verdicts live in the parent. Every call looks alike: the
same fresh-storage, poisoned-allocator path serves correctness cases and timed iterations.
Usage: python -m tools.worker.candidate REQUEST.json CHANNEL_FD
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import os
import select
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from tools import orders, wire
from tools.results import KernelUsage, TimingStats
from tools.wire import Channel
from tools.worker import build, build_client, contain, fresh, guard, l2, smem, timing
from tools.worker.device_turn import DeviceTurn
from tools.worker.failures import CandidateError, candidate_traceback, classify_exception
from tools.worker.late import LateWrites
from tools.worker.outputs import KeptWriter
from tools.worker.repeats import Repeats
from tools.worker.state import carry_attributes
from tools.worker.timing import measure
from tools.worker.truth import reset_backend_flags
from tools.worker.usage import profile_call

# Captured before the candidate is imported; compared after every call.
TIMERS = {
    "time.perf_counter": (time, "perf_counter", time.perf_counter),
    "torch.cuda.Event": (torch.cuda, "Event", torch.cuda.Event),
    "torch.cuda.synchronize": (torch.cuda, "synchronize", torch.cuda.synchronize),
    "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time),
    "torch.cuda.Event.record": (torch.cuda.Event, "record", torch.cuda.Event.record),
    # Not clocks, but guards of the loop as easy to undo (tools/worker/smem.py, late.py).
    "tools.worker.smem.poison_shared": (smem, "poison_shared", smem.poison_shared),
    "tools.worker.late.LateWrites.snapshot": (LateWrites, "snapshot", LateWrites.snapshot),
    "tools.worker.late.LateWrites.check": (LateWrites, "check", LateWrites.check),
    # The references the timing loop itself calls (a module global is as easy to replace as time.perf_counter).
    **{
        f"tools.worker.timing.{name}": (timing, name, getattr(timing, name))
        for name in (
            "_PERF_COUNTER",
            "_EVENT",
            "_RECORD",
            "_ELAPSED",
            "_EVENT_SYNC",
            "_SYNCHRONIZE",
            "_CURRENT_STREAM",
            "_RESET_L2",
            "_L2_LIMIT",
            "_HOLD",
            "_HOLD_FOR",
            "_HOLD_MS",
        )
    },
}


def tampered_timers() -> list[str]:
    return [
        name for name, (owner, attr, original) in TIMERS.items() if getattr(owner, attr, None) is not original
    ]


def import_candidate(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("candidate_kernel", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate_kernel"] = module
    spec.loader.exec_module(module)
    return module


def make_model(cls: type, data: dict[str, Any], device: str) -> Any:
    """ModelNew built as the reference was, with its weights and its plain tensor attributes."""
    init_inputs, state_dict = data["init_inputs"], data["state_dict"]
    try:
        model = cls(*init_inputs)
    except Exception as exc:
        raise CandidateError(
            "constructor", f"ModelNew{tuple(init_inputs)} failed: {candidate_traceback(exc)}"
        ) from exc
    if not isinstance(model, torch.nn.Module):
        raise CandidateError("constructor", "ModelNew must be a torch.nn.Module subclass")
    try:
        model.load_state_dict(state_dict, strict=True)
    except Exception as exc:
        raise CandidateError(
            "state_dict",
            "the reference's weights do not load into ModelNew with load_state_dict(strict=True); keep the "
            f"reference's parameter names and shapes. {exc}",
        ) from exc
    if missing := carry_attributes(model, data.get("attributes", {})):
        raise CandidateError("state_dict", missing)
    return model.to(device)


class Caller:
    """Runs one forward on fresh storage, with the allocator poisoned and inputs checked for mutation."""

    def __init__(self, model: Any, device: str, out_shape: list[int], keep: int = 2) -> None:
        self.model, self.device, self.out_shape = model, device, out_shape
        # Earlier calls' inputs stay alive, so no data_ptr or id recurs while they do.
        self._keep: collections.deque[list[Any]] = collections.deque(maxlen=keep)
        self.mutated = False
        self.calls = 0

    def fresh_args(self, pristine: list[Any]) -> list[Any]:
        return self.hold([t.clone() if isinstance(t, torch.Tensor) else t for t in pristine])

    def hold(self, args: list[Any]) -> list[Any]:
        """Keep a call's (already fresh) inputs alive for a while, so no later call gets their storage."""
        self._keep.append(args)
        return args

    def poison(self) -> None:
        """Also resets backend flags: done before the clock starts, it keeps the timed region to forward alone."""
        reset_backend_flags()
        if self.device == "cuda":
            poison = torch.full(self.out_shape, float("nan"), device="cuda")
            del poison  # its block goes back to the caching allocator still holding NaN
            smem.poison_shared()  # and what a kernel reads of shared memory it never wrote is NaN too

    def __call__(self, args: list[Any]) -> object:
        """The candidate's output, whatever it is (`check_output` says whether it is a plain tensor)."""
        self.calls += 1
        with torch.no_grad():
            return self.model(*args)

    def check_inputs(self, args: list[Any], pristine: list[Any]) -> None:
        for a, p in zip(args, pristine, strict=True):
            if isinstance(a, torch.Tensor) and not torch.equal(a, p):
                self.mutated = True


class Ticker:
    """Tells the parent, at most every TICK_S and outside the timed region, that the timing loop moves on:
    its watchdog (tools/supervise/watchdog.py) bounds the silence between ticks by one call's allowance."""

    TICK_S = 0.5

    def __init__(self, channel: Channel, name: str) -> None:
        self.channel, self.name, self.last = channel, name, 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.TICK_S:
            self.last = now
            self.channel.send(wire.Tick(name=self.name))


KEEP_BYTES = 2 << 30  # inputs of past timed calls kept alive per shape, at most


def keep_alive(inputs: list[Any], cfg: orders.LoopSettings) -> int:
    """How many calls' inputs to keep: all of a shape's calls (the judge's extension of the loop included)
    where that fits in KEEP_BYTES. Past that a pointer may recur, but never with the same contents: a cache
    keyed on it hands back a stale output, which the fingerprints and the checked calls see."""
    size = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor)) or 1
    calls = cfg.warmup + 2 * cfg.max_iters + timing.HARD_CAP_EXTRA + 1
    return max(2, min(calls, KEEP_BYTES // size))


def check_output(out: Any) -> torch.Tensor:
    if type(out) is not torch.Tensor:
        raise CandidateError(
            "output_type",
            f"forward must return a plain torch.Tensor, got {type(out).__module__}.{type(out).__name__}",
        )
    if out.layout is not torch.strided or out.is_meta:
        raise CandidateError("output_type", "forward must return a dense tensor with real storage")
    return out


def load_data(path: str, device: str) -> dict[str, Any]:
    """The harness's inputs and weights; mapped, not read, where they go to the GPU (the copy there reads
    the file's pages once: 0.05 s a shape of the H200's timing went to the read)."""
    data: dict[str, Any] = torch.load(path, weights_only=True, mmap=device == "cuda")
    return data


def run_case(cls: type, item: orders.CandidateCase, device: str, channel: Channel) -> None:
    data = load_data(item.data_path, device)
    model = make_model(cls, data, device)
    caller = Caller(model, device, data["out_shape"])
    pristine = [t.to(device) if isinstance(t, torch.Tensor) else t for t in data["inputs"]]
    args = caller.fresh_args(pristine)
    caller.poison()
    ranged = device == "cuda" and item.profile_range  # profile_kernel: ncu sees this call only
    if ranged:
        torch.cuda.profiler.start()
    start = time.perf_counter()
    out = check_output(caller(args))
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if ranged:
        torch.cuda.profiler.stop()
    caller.check_inputs(args, pristine)
    torch.save(out.detach().to("cpu", copy=True), item.out_path)
    channel.send(
        wire.CaseDone(name=item.name, seconds=seconds, mutated=caller.mutated, timers=tampered_timers())
    )


ANSWER_SPIN_S = 0.05  # how long a CUDA worker polls for the judge's answer on a busy core before it blocks


def answer_ready(fd: int, spin_s: float) -> bool:
    """Poll `fd` without sleeping for up to `spin_s`: whether it became readable in that time."""
    end = time.perf_counter() + spin_s
    while time.perf_counter() < end:
        if select.select([fd], [], [], 0)[0]:
            return True
    return False


class JudgeLink:
    """The judge's side of the timing loop, over the channel and stdin: each call's input offset, whether
    the loop goes on, and which outputs to keep for the float64 re-check (the answer to a call names the
    previous call's slot, so no call knows before it runs whether it will be checked)."""

    def __init__(self, channel: Channel, name: str, spin_s: float = 0.0) -> None:
        self.channel, self.name, self.spin_s = channel, name, spin_s
        self.offset = 0
        self.keep: int | None = None

    def ask(self, index: int, wants_stop: bool) -> bool:
        """Whether call `index` happens; its offset and the previous call's slot come with the answer,
        `go OFFSET SLOT` or `stop - SLOT` (SLOT `-`: the previous output is not kept). On CUDA the core spins
        up to `spin_s` while the answer comes: a core left idle makes the next call's launch path slower
        (bench/launch_probe.py, H100: 14's forward issued in 0.10 ms after 3 ms of spinning, 0.20 ms after
        3 ms asleep); the host's clock times a CPU problem's call, and its cores are the judge's too."""
        self.channel.send(wire.NextCall(name=self.name, index=index, wants_stop=wants_stop))
        if self.spin_s > 0:
            answer_ready(sys.stdin.fileno(), self.spin_s)
        words = sys.stdin.readline().split()
        if len(words) != 3 or words[0] not in ("go", "stop"):
            raise RuntimeError(f"harness: unexpected answer to next_call: {' '.join(words)[:80]!r}")
        self.keep = None if words[2] == "-" else int(words[2])
        if words[0] == "go":
            self.offset = int(words[1])
        return words[0] == "go"


def run_timing(
    cls: type, item: orders.CandidateShape, device: str, channel: Channel, turn: DeviceTurn
) -> None:
    turn.want()  # the device given back after the last shape's device work (tools/worker/device_turn.py)
    data = load_data(item.data_path, device)
    model = make_model(cls, data, device)
    base = [t.to(device) if isinstance(t, torch.Tensor) else t for t in data["base"]]
    caller = Caller(model, device, data["out_shape"], keep=keep_alive(base, item.cfg))
    spin = ANSWER_SPIN_S if device == "cuda" else 0.0
    judge, kept = JudgeLink(channel, item.name, spin), KeptWriter(item.out_path)
    current: dict[str, Any] = {}
    repeats = Repeats()
    late = LateWrites()  # each timed output as its call ended, against the output when it is read
    tick = Ticker(channel, item.name)

    def settle_previous() -> None:
        """The previous call's output: fingerprinted, and kept where the judge asked for it."""
        if "out" not in current:
            return
        check_output(current["out"])
        if current["timed"]:
            late.check(current["out"])
            repeats.check(current["out"], fresh.shifts(base, current["offset"]))
        if judge.keep is not None and isinstance(current["out"], torch.Tensor):
            kept.keep(judge.keep, current["out"])

    def proceed(i: int, wants_stop: bool) -> bool:
        go = judge.ask(i, wants_stop)
        settle_previous()
        return go

    def prepare(i: int) -> None:
        tick()
        if i < 0:  # a warm-up: its offset is asked here (timed calls ask in `proceed`)
            judge.ask(i, False)
            settle_previous()
        current["offset"], current["timed"] = judge.offset, i >= 0
        current["args"] = caller.hold(fresh.rolled(base, judge.offset))
        caller.poison()

    def call(i: int) -> object:
        out = caller(current["args"])
        current["out"] = out
        return out

    def on_batch(edge: str) -> None:
        channel.send(wire.BatchBegin(name=item.name) if edge == "begin" else wire.BatchEnd(name=item.name))

    cfg = item.cfg.model_dump()
    samples = measure(
        call, prepare, device=device, on_batch=on_batch, proceed=proceed,
        after_call=lambda i: late.snapshot(current["out"]), **cfg,
    )  # fmt: skip
    if device == "cuda":
        torch.cuda.synchronize()
    check_output(current["out"])
    caller.check_inputs(current["args"], fresh.rolled(base, current["offset"]))
    usage = None
    if item.profile:
        channel.send(wire.Profiling(name=item.name))  # the profiler's start-up has its own time bound
        usage = KernelUsage.model_validate(profile_call(model, base, device))
        turn.share()  # alone for the profile only: the outputs' copy below shares the device
    kept.close(turn)  # the outputs kept for the float64 re-check, and their index; the turn given back
    done = wire.TimingDone(
        name=item.name,
        stats=TimingStats.model_validate({**samples.stats(), "late_writes": late.late}),
        host_ms=samples.host_ms,
        device_ms=samples.device_ms,
        calls=caller.calls,
        repeated=repeats.repeated,
        nonfinite=repeats.nonfinite,
        checked=repeats.checked,
        mutated=caller.mutated,
        timers=tampered_timers(),
        usage=usage,
    )
    channel.send(done)


def import_phase(channel: Channel) -> Any:
    start = time.perf_counter()
    try:
        module = import_candidate(Path("kernel.py").resolve())
    except BaseException as exc:
        channel.send(
            wire.ImportFailed(
                kind="compile_error" if build.REGISTRY.failed else "import_error",
                message=candidate_traceback(exc),
                builds=build.REGISTRY.builds,
                errors=build.REGISTRY.errors,
                seconds=time.perf_counter() - start,
            )
        )
        return None
    channel.send(
        wire.Imported(
            seconds=time.perf_counter() - start,
            builds=build.REGISTRY.builds,
            failed_build=build.REGISTRY.failed,
            errors=build.REGISTRY.errors,
            has_model_new=isinstance(getattr(module, "ModelNew", None), type),
        )
    )
    return module


def install_guard(req: orders.CandidateRequest, channel: Channel) -> None:
    """The audit hook goes in last, just before the candidate's code first runs (its import)."""
    cache = Path(os.environ.get("KERNEL_AGENT_BUILD_CACHE") or Path.home())
    policy = guard.Guard(Path.cwd(), [Path(p) for p in req.secret_dirs], cache)

    def report(kind: str, detail: str) -> None:
        channel.send(wire.Violation(kind=kind, flag=guard.FLAG_FOR[kind], detail=detail))

    guard.install(policy, report)


def main(request_path: str, fd: str) -> int:
    channel = Channel(int(fd))
    if why := contain.attempt(contain.block_keyrings):  # before `ready`: the harness checks it in /proc
        print(f"kernel-agent: keyrings not blocked: {why}", file=sys.stderr, flush=True)
    channel.send(wire.Ready())  # torch and the harness are imported (the phase breakdown starts here)
    req = orders.CandidateRequest.model_validate_json(Path(request_path).read_text())
    device = req.device
    if req.threads:  # a CPU problem's budget (its own OpenMP runtime reads OMP_NUM_THREADS, set alike)
        torch.set_num_threads(req.threads)
    if device == "cuda" and req.mode != "compile" and torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")
        l2.record_default(timing._L2_LIMIT)  # before the candidate's import can set any aside
        channel.send(wire.CudaReady())
    reset_backend_flags()
    build.install(progress=channel.send, builder=build_client.asker(channel))  # builds: the harness's
    install_guard(req, channel)
    turn = DeviceTurn(channel, device, held=not req.device_gated)
    turn.want()  # where the harness gates the start: no candidate code runs before it holds the device
    module = import_phase(channel)
    if module is None or req.mode == "compile":
        return 0
    cls = getattr(module, "ModelNew", None)
    if not isinstance(cls, type):
        return 0
    if device == "cuda" and not torch.cuda.is_available():
        channel.send(wire.NoDevice(message="this problem needs a CUDA GPU and none is visible"))
        return 0
    timed = functools.partial(run_timing, turn=turn)
    if req.mode == "retime":  # the parent re-measures shapes whose clocks disagreed (cases passed)
        channel.send(wire.Retime())
        ok = run_items(cls, "timing", req.timing, timed, device, channel)
        channel.send(wire.Done())
        return 0 if ok else 1
    if not run_items(cls, "case", req.cases, run_case, device, channel):
        return 1
    # The parent judges the cases and answers on stdin: time only a candidate that is correct.
    channel.send(wire.CasesDone())
    if sys.stdin.readline().strip() != "time":
        return 0
    if not run_items(cls, "timing", req.timing, timed, device, channel):
        return 1
    channel.send(wire.Done())
    return 0


def run_items(
    cls: type,
    kind: Literal["case", "timing"],
    items: Sequence[orders.CandidateCase | orders.CandidateShape],
    runner: Any,
    device: str,
    channel: Channel,
) -> bool:
    """Run each item; False when the process must stop (its CUDA context is no longer usable)."""
    for item in items:
        channel.send(wire.Start(kind=kind, name=item.name))
        try:
            runner(cls, item, device, channel)
        except CandidateError as exc:
            channel.send(wire.Failed(kind=kind, name=item.name, error=exc.kind, message=str(exc)))
        except BaseException as exc:
            error = classify_exception(exc)
            message = candidate_traceback(exc)
            channel.send(wire.Failed(kind=kind, name=item.name, error=error, message=message))
            if error == "cuda_error":
                return False
        if device == "cuda":
            torch.cuda.empty_cache()
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
