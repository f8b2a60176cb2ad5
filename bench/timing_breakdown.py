"""Where a candidate's timing seconds go, step by step: a benchmark, not a test.

    python bench/timing_breakdown.py PROBLEM KERNEL.py [--json OUT]

In one process, each timing shape goes through the candidate worker's own `run_timing`
(tools/worker/candidate.py) against a judge thread that answers every call as the harness does
(tools/judge/_calls.py), with each step of the loop timed where it is called: the judge's round trip, the
inputs' roll, the allocator's poison, the L2 flush, the output's fingerprint, the kept outputs' copies and
their file. Then the judge's side of the kept outputs: the file read back (eager and memory-mapped) and
copied to the device. The rest of a shape's seconds (`other`) are the loop's own: the call, its events and
synchronizes, and the data's load.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tools import orders, wire  # noqa: E402
from tools.judge._calls import CallSchedule  # noqa: E402
from tools.problem import Case, load_problem  # noqa: E402
from tools.supervise.pool import scratch_root  # noqa: E402
from tools.worker import candidate, fresh, refmod, timing  # noqa: E402

SPENT: collections.defaultdict[str, float] = collections.defaultdict(float)
COUNT: collections.Counter[str] = collections.Counter()


def clocked(name: str, fn: Callable[..., Any], sync: bool = False) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        if sync and torch.cuda.is_available():
            torch.cuda.synchronize()
        SPENT[name] += time.perf_counter() - start
        COUNT[name] += 1
        return out

    return wrapper


def instrument() -> None:
    """Each step of the loop, timed where the worker calls it (with a synchronize where it queues work)."""
    fresh.rolled = clocked("roll", fresh.rolled, sync=True)  # type: ignore[assignment]
    candidate.Caller.poison = clocked("poison", candidate.Caller.poison, sync=True)  # type: ignore[method-assign]
    candidate.Repeats.check = clocked("fingerprint", candidate.Repeats.check)  # type: ignore[method-assign]
    candidate.JudgeLink.ask = clocked("judge_round_trip", candidate.JudgeLink.ask)  # type: ignore[method-assign]
    make = timing.make_flusher

    def make_flusher(device: str, l2: Any = None) -> Callable[[], None]:
        return clocked("flush", make(device, l2), sync=True)

    timing.make_flusher = make_flusher  # type: ignore[assignment]
    to = torch.Tensor.to

    def to_host(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args and args[0] == "cpu" and self.is_cuda:
            return clocked("kept_to_host", to)(self, *args, **kwargs)
        return to(self, *args, **kwargs)

    torch.Tensor.to = to_host  # type: ignore[method-assign,assignment]
    torch.save = clocked("torch_save", torch.save)  # type: ignore[assignment]
    torch.load = clocked("torch_load", torch.load)  # type: ignore[assignment]


class FakeJudge:
    """The harness's side of the channel: answers each NextCall on the worker's stdin, as _verdicts does."""

    def __init__(self, schedule: CallSchedule) -> None:
        self.schedule = schedule
        r, self.w = os.pipe()
        self.reader = os.fdopen(r, "rb")
        sr, sw = os.pipe()
        self.stdin = os.fdopen(sr, "r")
        self.answers = os.fdopen(sw, "w", buffering=1)
        self.messages: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        for line in self.reader:
            msg = json.loads(line)
            self.messages.append(msg)
            if msg.get("event") == "next_call":
                self.answers.write(self.schedule.answer(msg["index"], msg["wants_stop"]) + "\n")


def shape_breakdown(problem: Any, module: Any, shape: Any, folder: Path, device: str) -> dict[str, Any]:
    built = refmod.build_case(problem.reference_source, Case(name=shape.name), problem.pins(shape), 1234)
    data_path, out_path = folder / f"{shape.name}.pt", folder / f"{shape.name}.out.pt"
    with torch.no_grad():
        out_shape = list(built["model"](*built["inputs"]).shape)
    torch.save(
        {
            "init_inputs": built["init_inputs"], "state_dict": built["state_dict"],
            "attributes": built["attributes"], "base": built["inputs"], "out_shape": out_shape,
        },
        data_path,
    )  # fmt: skip
    cfg = orders.LoopSettings.model_validate(problem.spec.timing_config.model_dump(include={
        "warmup", "min_iters", "max_iters", "target_rse", "max_seconds"}))  # fmt: skip
    offsets = [77 + k for k in range(problem.spec.timing_config.input_sets)]
    schedule = CallSchedule(offsets, cfg.min_iters, fresh.shifted_sizes(built["inputs"]))
    judge = FakeJudge(schedule)
    item = orders.CandidateShape(
        name=shape.name, data_path=str(data_path), out_path=str(out_path), profile=False, cfg=cfg
    )
    saved_stdin = sys.stdin
    sys.stdin = judge.stdin
    SPENT.clear()
    COUNT.clear()
    start = time.perf_counter()
    try:
        channel = wire.Channel(judge.w)
        turn = candidate.DeviceTurn(channel, "cpu")  # the device held throughout, as one shape is timed
        candidate.run_timing(module.ModelNew, item, device, channel, turn)
    finally:
        sys.stdin = saved_stdin
    total = time.perf_counter() - start
    done = next(m for m in judge.messages if m.get("event") == "timing_done")
    row: dict[str, Any] = {
        "name": shape.name,
        "total_s": round(total, 4),
        "calls": done["calls"],
        "median_ms": done["stats"]["median_ms"],
        "batch_ms": done["stats"]["batch_ms"],
        "steps_s": {k: round(v, 4) for k, v in SPENT.items()},
        "steps_n": dict(COUNT),
        "kept_bytes": out_path.stat().st_size,
    }
    row["other_s"] = round(total - sum(SPENT.values()), 4)
    row["judge_side"] = judge_side(out_path, device)
    return row


def judge_side(out_path: Path, device: str) -> dict[str, float]:
    """The kept outputs read back and put on the device: as the truth server does now, and memory-mapped."""
    row: dict[str, float] = {}
    for mmap in (False, True):
        start = time.perf_counter()
        outs = torch.load(out_path, weights_only=True, mmap=mmap)
        loaded = time.perf_counter()
        on_dev = [o.to(device) for o in outs.values()]
        if device == "cuda":
            torch.cuda.synchronize()
        row[f"load{'_mmap' if mmap else ''}_s"] = round(loaded - start, 4)
        row[f"to_device{'_mmap' if mmap else ''}_s"] = round(time.perf_counter() - loaded, 4)
        del outs, on_dev
    return row


def transfer_alternatives(folder: Path, nbytes: int, device: str) -> dict[str, float]:
    """One kept output's way through the host, ways compared: pageable copy + torch.save; pinned copy + raw
    write; raw file mapped back (torch.from_file) and copied to the device."""
    if device != "cuda":
        return {}
    out = torch.randn(nbytes // 4, device="cuda")
    row: dict[str, float] = {}

    def t(name: str, fn: Callable[[], Any]) -> Any:
        torch.cuda.synchronize()
        start = time.perf_counter()
        value = fn()
        torch.cuda.synchronize()
        row[name] = round(time.perf_counter() - start, 4)
        return value

    t("d2h_pageable_s", lambda: out.to("cpu", copy=True))
    host = t("d2h_pageable_again_s", lambda: out.to("cpu", copy=True))
    pinned = t("pinned_alloc_s", lambda: torch.empty(out.numel(), pin_memory=True))
    t("d2h_pinned_s", lambda: pinned.copy_(out))
    t("torch_save_s", lambda: torch.save({0: host}, folder / "a.pt"))
    raw = folder / "a.bin"

    def write_raw() -> None:
        with open(raw, "wb") as f:
            f.write(memoryview(pinned.numpy()).cast("B"))

    t("raw_write_s", write_raw)
    mapped = t("from_file_s", lambda: torch.from_file(str(raw), shared=False, size=out.numel()))
    t("h2d_from_file_s", lambda: mapped.to("cuda"))
    mm = t("from_file_shared_s", lambda: torch.from_file(str(raw), shared=True, size=out.numel()))
    t("h2d_from_mmap_s", lambda: mm.to("cuda"))
    buf = io.BytesIO()
    t("torch_save_bytesio_s", lambda: torch.save({0: host}, buf))
    for p in (folder / "a.pt", raw):
        p.unlink()
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("problem")
    p.add_argument("kernel")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    problem = load_problem(args.problem)
    device = problem.spec.device
    module = candidate.import_candidate(Path(args.kernel).resolve())
    instrument()
    rows = []
    with tempfile.TemporaryDirectory(dir=scratch_root()) as tmp:
        for shape in problem.spec.timing:
            rows.append(shape_breakdown(problem, module, shape, Path(tmp), device))
            print(json.dumps(rows[-1]), flush=True)
        alternatives = transfer_alternatives(Path(tmp), 64 << 20, device)
        print(json.dumps({"transfer_64MiB": alternatives}), flush=True)
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "problem": problem.name,
        "kernel": args.kernel,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "scratch": str(scratch_root()),
        "shapes": rows,
        "transfer_64MiB": alternatives,
    }
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
