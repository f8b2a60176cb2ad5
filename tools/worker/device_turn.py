"""The candidate worker's turns on the device between its timing shapes.

The harness holds the device for a live candidate (shared, or alone for a timed loop), so that nothing it
runs lands in another trajectory's timed loop. After a shape's device work (its loop, checks, profile, and
the checked calls' outputs copied to pinned host memory) the worker says `DeviceReleased`, synchronised, and the
harness lets the device go until the worker's next `DeviceWanted`, answered `granted` once the harness holds
the device (shared) for it again. So the worker's exit, and its host work between shapes, no longer hold the
device while another trajectory's loop waits (H200, 2026-12-04: a candidate's exit held it ~0.13 s an
evaluation), and a profiled shape holds it alone only to its profile's end, not through the outputs' copy
(~0.15 s for three 64 MB outputs). A CPU problem's host work is its device's work: there the worker keeps
its turn.

Where the harness gates the device for the worker's start too (`CandidateRequest.device_gated`), the worker
holds nothing until it asks, once its CUDA has started and before it imports the candidate: a worker that was
not made ahead spends 1.5-4.2 s starting CUDA, cuBLAS and the profiler (trusted code, as a worker made ahead
does beside timed loops), and held the device shared meanwhile, so every other evaluation's timed loop
waited for it (H100, 4d5cf86, 2026-12-07: 5 of 16 evaluations at four trajectories).
"""

from __future__ import annotations

import sys
from typing import IO

import torch

from tools import wire
from tools.wire import Channel

_SYNCHRONIZE = torch.cuda.synchronize  # the harness's own, taken before any candidate is imported


class DeviceTurn:
    """`release()` after a shape's device work, `want()` before the next, `share()` after a profile; no-ops
    off CUDA."""

    def __init__(
        self, channel: Channel, device: str, stdin: IO[str] | None = None, held: bool = True
    ) -> None:
        self.channel, self.stdin = channel, stdin
        self.active = device == "cuda"
        # the harness holds the device for the worker as it starts, unless it gates the start
        self.held = held

    def release(self) -> None:
        if not (self.active and self.held):
            return
        if torch.cuda.is_available():
            _SYNCHRONIZE()  # queued kernels are device work too
        self.held = False
        self.channel.send(wire.DeviceReleased())

    def share(self) -> None:
        """Given back, then asked for again: from a turn alone (a profile) to a shared one, or between two
        kept outputs' copies, where a timed loop waiting for the device alone goes first."""
        if self.active and self.held:
            self.release()
            self.want()

    def want(self) -> None:
        if not self.active or self.held:
            return
        self.channel.send(wire.DeviceWanted(mode="shared"))
        answer = (self.stdin or sys.stdin).readline().strip()
        if answer != "granted":
            raise RuntimeError(f"harness: the device was not given back (the answer was {answer!r})")
        self.held = True
