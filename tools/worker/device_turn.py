"""The candidate worker's turns on the device between its timing shapes.

The harness holds the device for a live candidate (shared, or alone for a timed loop), so that nothing it
runs lands in another trajectory's timed loop. But after each shape's device work the worker only writes
files: the checked calls' outputs, copied to pinned host memory first (tools/worker/outputs.py). On the
H200 those writes held the device ~0.2 s a shape while the other trajectory's loop waited. So, after the
shape's device work (synchronised), the worker says `DeviceReleased` and the harness lets the device go;
before its next device work it sends `DeviceWanted` and waits for `granted`, given once the harness holds
the device for it again. A CPU problem's host work is its device's work: there the worker keeps its turn.
"""

from __future__ import annotations

import sys
from typing import IO

import torch

from tools import wire
from tools.wire import Channel

_SYNCHRONIZE = torch.cuda.synchronize  # the harness's own, taken before any candidate is imported


class DeviceTurn:
    """`release()` after a shape's device work, `want()` before the next; no-ops off CUDA."""

    def __init__(self, channel: Channel, device: str, stdin: IO[str] | None = None) -> None:
        self.channel, self.stdin = channel, stdin
        self.active = device == "cuda"
        self.held = True  # the harness holds the device for the worker as it starts

    def release(self) -> None:
        if not (self.active and self.held):
            return
        if torch.cuda.is_available():
            _SYNCHRONIZE()  # queued kernels are device work too
        self.held = False
        self.channel.send(wire.DeviceReleased())

    def want(self) -> None:
        if not self.active or self.held:
            return
        self.channel.send(wire.DeviceWanted(mode="shared"))
        answer = (self.stdin or sys.stdin).readline().strip()
        if answer != "granted":
            raise RuntimeError(f"harness: the device was not given back (the answer was {answer!r})")
        self.held = True
