"""The candidate's turns on the device, as the judge takes them from its worker's messages: alone from a
shape's first call to its loop's end (past it while the shape's profile runs: its kernels' shares are of
device time), shared otherwise, and nothing (on CUDA) once the worker has given the device back after a
shape's device work, until it asks again (tools/worker/device_turn.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tools import wire
from tools.supervise.locks import Mode


@dataclass
class CandidateTurns:
    turn: Callable[[Mode], None]  # the evaluation's DeviceTurns.to
    idle: Mode  # what it holds with no device work: nothing on CUDA (tools/supervise/locks.py idle_mode)
    profiled: frozenset[str]  # shapes whose profile follows their loop
    released: bool = False  # the worker gave the device back (DeviceReleased) and has not asked again

    def on(self, msg: wire.WorkerMessage, first_call: bool) -> None:
        """`first_call`: a NextCall that opens its shape's loop (the worker waits for the answer)."""
        match msg:
            case wire.NextCall() if first_call:
                self.turn("exclusive")
            case wire.BatchEnd() if msg.name not in self.profiled:
                self.turn("shared")  # what follows the loop: its checks, the kept outputs' copy
            case wire.Failed() if msg.kind == "timing":
                self.released = False
                self.turn("shared")
            case wire.TimingDone() if not self.released:
                self.turn("shared")
            case wire.DeviceReleased():
                self.released = True
                self.turn(self.idle)
            case wire.DeviceWanted():  # shared, whatever it asked: only the judge's loop takes the device alone
                self.released = False
                self.turn("shared")
