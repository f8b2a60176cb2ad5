"""Truth kept by the warm truth server for one evaluation: the handle, the server's claim, the re-check of
timed outputs where the truth is, and what is said where that server is gone."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from tools import orders, wire
from tools.problem import Tolerance
from tools.results import CaseResult
from tools.supervise import ChildOutcome, Deadline, DeviceTurns
from tools.supervise.truth_server import TruthServer

Rechecks = dict[str, list[CaseResult]]  # shape -> its checked calls' verdicts
Rechecker = Callable[[list[orders.RecheckShape]], Rechecks]


class Users:
    """How many evaluations use one kept truth (more than one where an input set is shared between candidates:
    tools/judge/_share.py); the last to leave forgets it on the server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 1

    def join(self) -> None:
        with self._lock:
            self.count += 1

    def leave(self) -> bool:
        """One user done; True for the last."""
        with self._lock:
            self.count -= 1
            return self.count == 0


class TruthLost(Exception):
    """The truth server that kept an evaluation's truth could not judge its outputs (it died, say)."""


@dataclass
class KeptTruth:
    """The timing shapes' truth of one evaluation, kept on the device by the warm truth server `server`
    under `handle` (never copied to the host, written to a file or read by this process). Only that server
    process has it: one started since (the pool retires an idle, unclaimed server when another problem's
    starts) does not. An evaluation using this truth holds a claim on the server (`claimed`)."""

    server: TruthServer
    handle: str
    tolerance: Tolerance
    claimed: bool = True  # the server was handed out claimed (WarmPool.truth_server)
    turns: DeviceTurns | None = None  # the evaluation's turns on the device, taken for the re-check's work
    users: Users = field(default_factory=Users)  # evaluations using it: the last one's `forget` forgets it
    left: bool = False  # this evaluation has left `users` (`forget` once)

    def usable(self) -> bool:
        return self.server.alive()

    def reclaim(self) -> bool:
        """Claim the server again for the evaluation that takes this truth, made ahead and left unclaimed
        (`unclaim`) meanwhile; False where the pool has retired it since (another problem's server started),
        and the truth with it."""
        self.claimed = self.claimed or self.server.claim()
        return self.claimed

    def unclaim(self) -> None:
        if self.claimed:
            self.claimed = False
            self.server.release()

    def recheck(self, shapes: list[orders.RecheckShape]) -> Rechecks:
        """The server's verdicts on the checked calls of `shapes`; `TruthLost` where it gave none."""
        if not self.usable():
            raise TruthLost("the truth server that kept this evaluation's truth has stopped")
        request = orders.RecheckRequest(handle=self.handle, tolerance=self.tolerance, shapes=shapes)
        outcome = self.server.request(request, Deadline(RECHECK_TIMEOUT_S), self.turns)
        answers = {m.name: m.results for m in outcome.all(wire.Rechecked)}
        if outcome.returncode != 0 or any(s.name not in answers for s in shapes):
            err = outcome.first(wire.TruthError)
            why = err.message if err else _exit_of(outcome)
            raise TruthLost(f"the truth server could not re-check the timed outputs: {why}")
        return answers

    def shared(self) -> KeptTruth | None:
        """The same truth for one more evaluation, with a claim of its own on the server (None where the server
        is gone or retired: its truth with it)."""
        if not self.server.claim():
            return None
        self.users.join()
        return KeptTruth(self.server, self.handle, self.tolerance, claimed=True, users=self.users)

    def forget(self) -> None:
        """This evaluation is done with the truth: the server forgets it once no other evaluation uses it."""
        if self.left:
            return
        self.left = True
        if self.users.leave() and self.usable():
            self.server.request(orders.ForgetRequest(handle=self.handle), Deadline(FORGET_TIMEOUT_S))


FORGET_TIMEOUT_S = 30.0
RECHECK_TIMEOUT_S = 120.0  # loading and comparing a few GB of outputs on the device takes seconds


def _exit_of(outcome: ChildOutcome) -> str:
    return "it timed out" if outcome.timed_out else f"it ended with exit {outcome.returncode}"
