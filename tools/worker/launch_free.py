"""The reference timed without launch overhead: its forward captured once in a CUDA graph, the replays timed by
the same loop, L2 flush and events as every candidate call (tools/worker/timing.py).

The eager selective-scan reference is a Python loop of ~1024 steps, tens of thousands of small launches: its
time is the host's, and a quiet H200's windows of it read 60-87 ms, so one kernel's eager speedup read
124-174x. Replayed from a graph the same kernels run back to back on the device, and a speedup against that
moves only with the device. Each timed call's inputs are copied into the graph's static inputs by `prepare`,
outside the events.

Where the forward cannot be captured (a CPU problem; a host sync, refused before any capture by a warm-up
under torch's sync debug mode; a capture or replay that raises; replays that differ from the eager output)
the result says so, and the judge uses the eager reference in its place. A capture that failed midway can
leave torch's CUDA state behind, so none is tried again in this process (`BROKEN`).
"""

from __future__ import annotations

from typing import Any

import torch

from tools.orders import LoopSettings
from tools.results import LaunchFreeReference, TimingStats
from tools.worker import refmod
from tools.worker.graphs import _call_without_syncs
from tools.worker.timing import measure

CPU_NOTE = (
    "a CPU problem: its reference launches no device kernels, so the eager reference is the launch-free one"
)
BROKEN: list[str] = []  # why a capture failed in this process: none is tried again


def eager(note: str) -> LaunchFreeReference:
    return LaunchFreeReference(mode="eager", note=note)


def launch_free_timing(
    model: torch.nn.Module, sets: list[list[Any]], device: str, cfg: LoopSettings
) -> LaunchFreeReference:
    """The replays' timing over `sets` (each call's inputs, on the device), or why the eager reference stands."""
    if device != "cuda":
        return eager(CPU_NOTE)
    if BROKEN:
        return eager(f"not captured: an earlier capture in this worker failed ({BROKEN[0]})")
    model = model.to(device)
    static = [v.clone() if isinstance(v, torch.Tensor) else v for v in refmod.to_device(sets[0], device)]
    warm = _call_without_syncs(model, static)
    if warm is None:
        return eager(
            "not captured: the reference's forward synchronises with the host (or returns no tensor)"
        )
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph), torch.no_grad():
            output = model(*static)
        graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:
        BROKEN.append(f"{type(exc).__name__}: {exc}"[:300])
        torch.cuda.synchronize()
        return eager(f"not captured: {BROKEN[0]}")
    if not torch.equal(output, warm[0]):
        return eager("not used: the graph's replay differs from the eager output (random numbers or "
                     "nondeterministic kernels)")  # fmt: skip

    stats = _time_replays(graph, static, sets, device, cfg)
    del graph, output, static
    torch.cuda.empty_cache()  # the graph's pool: the truth server's memory goes back to its evaluations
    return LaunchFreeReference(
        mode="graph",
        stats=stats,
        note=f"the reference's forward replayed from a CUDA graph ({stats.n} replays)",
    )


def _time_replays(
    graph: torch.cuda.CUDAGraph, static: list[Any], sets: list[list[Any]], device: str, cfg: LoopSettings
) -> TimingStats:
    def prepare(i: int) -> None:  # the call's inputs into the graph's own: before the flush and the events
        for target, value in zip(static, sets[i % len(sets)], strict=True):
            if isinstance(target, torch.Tensor):
                target.copy_(value)

    def call(i: int) -> object:
        graph.replay()
        return None

    samples = measure(call, prepare, device=device, **cfg.model_dump())
    return TimingStats.model_validate(samples.stats())
