"""The zygote's workers made ahead of need (tools/worker/zygote.py `Server`): a CUDA worker handed to a
candidate is replaced at once, a CPU one is not (its start would run on the host a CPU loop is timed on).
The server's state machine runs in this process; its forks are stood in for."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from tools import orders
from tools.worker import zygote
from tools.worker.zygote import PreparedKey, Server

CONTAINMENT = orders.Containment(pidns=False, netns=False, no_caps=False)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, socket.socket]]:
    harness, mine = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    made = iter(range(1000, 2000))
    workers: list[socket.socket] = []  # the prepared workers' ends, open as a waiting worker's are

    def fake_make(self: Server, kind: PreparedKey) -> None:  # a prepared worker, without its fork
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        workers.append(theirs)
        self.prepared[next(made)] = ours

    def no_fork(self: Server) -> int:
        raise AssertionError("a fork of the test's own process")

    monkeypatch.setattr(Server, "_make_prepared", fake_make)
    monkeypatch.setattr(Server, "_fork", no_fork)
    yield Server(mine, pidns=False, support={"netns": "", "no_caps": "", "ipcns": ""}), harness
    for end in [harness, mine, *workers]:
        end.close()


def reports(harness: socket.socket) -> list[str]:
    harness.setblocking(False)
    seen = []
    while True:
        try:
            seen.append(json.loads(harness.recv(1 << 16))["event"])
        except BlockingIOError:
            return seen


@pytest.mark.parametrize(("kind", "replaced"), [("cuda", True), ("cpu", False)])
def test_a_prepared_worker_taken_by_a_candidate_is_replaced_at_once_on_cuda_only(
    server: tuple[Server, socket.socket], kind: orders.WorkerKind, replaced: bool
) -> None:
    zyg, harness = server
    zyg.prepare(orders.PrepareOrder(containment=CONTAINMENT, kind=kind, count=2))
    assert len(zyg.prepared) == 2
    taken = next(iter(zyg.prepared))
    run = orders.RunOrder(containment=CONTAINMENT, kind=kind, cwd="/", env={}, request="r.json")
    zyg.run(run, [])
    assert taken not in zyg.prepared
    assert len(zyg.prepared) == (2 if replaced else 1)
    assert "spawned" in reports(harness)


def test_a_compile_takes_no_prepared_worker_and_makes_none(
    server: tuple[Server, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    zyg, _ = server
    zyg.prepare(orders.PrepareOrder(containment=CONTAINMENT, kind="cuda", count=1))
    before = set(zyg.prepared)
    monkeypatch.setattr(zyg, "_fork", lambda: 4242)  # the compile's own fork, stood in for
    monkeypatch.setattr(zygote.os, "close", lambda fd: None)
    zyg.run(orders.RunOrder(containment=CONTAINMENT, kind=None, cwd="/", env={}, request="r.json"), [])
    assert set(zyg.prepared) == before
    assert 4242 in zyg.children
