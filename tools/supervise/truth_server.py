"""The warm truth worker of one problem (tools/worker/truth.py --serve), seen from the harness."""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from tools import orders, wire
from tools.supervise._spawn import (
    BoundedOutput,
    ChildOutcome,
    Deadline,
    _drain,
    _read_messages,
    child_env,
    kill_group,
    track_group,
)
from tools.supervise.fork_server import START_TIMEOUT_S
from tools.supervise.locks import DeviceTurns, Mode
from tools.supervise.timeline import tell

_STRENGTH: dict[Mode, int] = {"none": 0, "shared": 1, "exclusive": 2}


class TruthServer:
    """The warm truth worker of one problem: trusted code, CUDA initialised once, one request at a time."""

    def __init__(self, root: Path, extra_env: dict[str, str]) -> None:
        self.home = root / f"truth-{uuid.uuid4().hex[:8]}"
        self.home.mkdir(parents=True)
        read_fd, write_fd = os.pipe()
        env = child_env(self.home, extra_env, harness=root / "harness")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.worker.truth", "--serve", str(write_fd)],
            cwd=self.home, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=(write_fd,), start_new_session=True,
        )  # fmt: skip
        os.close(write_fd)
        track_group(self.proc.pid)
        self.output = BoundedOutput()
        self.inbox: queue.Queue[wire.WorkerMessage] = queue.Queue()
        self.errors: list[str] = []
        for target, args in (
            (_drain, (self.proc.stdout, self.output)),
            (_read_messages, (read_fd, [], [], self.inbox.put, self.errors)),
        ):
            threading.Thread(target=target, args=args, daemon=True).start()
        self.ready = False
        self._one_at_a_time = threading.Lock()  # a prefetch's truth, a re-check, a forget: in turn
        self._claims = 0  # evaluations that need this server alive (`claim`)
        self._claims_lock = threading.Lock()
        self._retired = False

    def busy(self) -> bool:
        """A request is in flight or waiting."""
        return self._one_at_a_time.locked()

    @property
    def claims(self) -> int:
        """Evaluations (and callers) that claim this server now."""
        return self._claims

    def claim(self) -> bool:
        """Keep this server from being retired until `release`: an evaluation whose truth it keeps, or a
        caller about to send it a request. False where it is retired or dead (a truth it kept is gone)."""
        with self._claims_lock:
            if self._retired or not self.alive():
                return False
            self._claims += 1
            return True

    def release(self) -> None:
        with self._claims_lock:
            self._claims -= 1

    def retire_if_idle(self) -> bool:
        """Stop the server unless a claim or a request holds it (the pool makes room for another
        problem's). Only truth kept for evaluations not yet started is lost then: they are not used."""
        with self._claims_lock:
            if self._claims or self.busy():
                return False
            self._retired = True
        self.stop()
        return True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _next(self, deadline: Deadline) -> wire.WorkerMessage | None:
        while not deadline.expired:
            try:
                return self.inbox.get(timeout=0.05)
            except queue.Empty:
                if not self.alive() and self.inbox.empty():
                    return None
        return None

    def request(
        self, req: orders.ServedRequest, deadline: Deadline, device: DeviceTurns | None = None
    ) -> ChildOutcome:
        """Run one request; the outcome looks like a cold truth worker's (messages, arrivals, exit). Its
        deadline runs from when the server takes it: the wait for an earlier request, or for the server's
        start (bounded by START_TIMEOUT_S), is not its time (a request whose deadline ran out is answered by
        killing the server).

        `device`: the caller's turns on the device lock. What they hold is let go while the request waits
        for the server and taken again once the server is its own, so the server always comes before the
        device: an earlier request, waiting for a turn for its device work, never waits on this caller. The
        server's device work takes a stronger turn where it asks for one (`DeviceWanted`: shared for a
        truth or a re-check, exclusive to time the reference) and gives it back after. None only where the
        caller holds nothing of the device lock: its asks are then granted at once."""
        held: Mode = device.mode if device is not None else "none"
        if device is not None:
            device.to("none")
        tell("truth", "asked", type(req).__name__)  # queued; its "spawn" says when the server took it
        try:
            asked = time.monotonic()
            with self._one_at_a_time:
                deadline.at += time.monotonic() - asked
                if device is not None:
                    device.to(held)
                return self._request(req, deadline, device)
        finally:
            if device is not None:
                device.to(held)

    def _grant(self, device: DeviceTurns | None, wanted: Mode) -> float:
        """Take the turn the server asked for (never less than is held), tell it so; the seconds waited,
        which are not the request's own."""
        start = time.monotonic()
        if device is not None and _STRENGTH[wanted] > _STRENGTH[device.mode]:
            device.to(wanted)
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"granted\n")
        self.proc.stdin.flush()
        return time.monotonic() - start

    def _request(
        self, req: orders.ServedRequest, deadline: Deadline, device: DeviceTurns | None
    ) -> ChildOutcome:
        start = time.monotonic()
        if not self.ready:
            msg = self._next(Deadline(START_TIMEOUT_S))
            if not isinstance(msg, wire.Ready):
                return self._failed(start, deadline)
            self.ready = True
            deadline.at += time.monotonic() - start  # a busy 2-core host once took most of 30 s to start it
        rid = uuid.uuid4().hex
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(
                orders.ServedTruthRequest(id=rid, request=req).model_dump_json().encode() + b"\n"
            )
            self.proc.stdin.flush()
        except OSError:
            return self._failed(start, deadline)
        messages: list[wire.WorkerMessage] = []
        arrivals: list[tuple[str, float]] = []
        tell("truth", "spawn", type(req).__name__)  # a request to the warm server: a cold worker's start
        turns: list[Mode] = []  # what was held before each turn the server asked for and has not ended
        while (msg := self._next(deadline)) is not None:
            if getattr(msg, "id", None) not in (None, rid):
                continue
            if isinstance(msg, wire.DeviceWanted):
                turns.append(device.mode if device is not None else "none")
                try:
                    deadline.at += self._grant(device, msg.mode)
                except OSError:
                    break
                continue
            if isinstance(msg, wire.DeviceReleased):
                if device is not None and turns:
                    device.to(turns.pop())
                continue
            tell("truth", msg.event, getattr(msg, "name", None))
            if isinstance(msg, wire.RequestFinished):
                tell("truth", "exit")
                return ChildOutcome(
                    returncode=msg.returncode, timed_out=False, seconds=time.monotonic() - start,
                    messages=messages, output=self.output.text(), arrivals=arrivals,
                )  # fmt: skip
            messages.append(msg)
            arrivals.append((msg.event, time.monotonic() - start))
        outcome = self._failed(start, deadline)
        outcome.messages, outcome.arrivals = messages, arrivals
        tell("truth", "exit")
        return outcome

    def _failed(self, start: float, deadline: Deadline) -> ChildOutcome:
        timed_out = deadline.expired
        self.stop()
        return ChildOutcome(
            returncode=self.proc.returncode, timed_out=timed_out, seconds=time.monotonic() - start,
            output=self.output.text(),
        )  # fmt: skip

    def stop(self) -> None:
        kill_group(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        track_group(self.proc.pid, live=False)
