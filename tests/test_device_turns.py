"""The truth server's turns on the device (wire.DeviceWanted): a real warm server on the tiny problem.

Its device work (each case's and shape's truth, a re-check, the reference's loop) takes a turn on the pool's
device lock; its host work takes none, so another trajectory's timed loop runs meanwhile. And a caller
that holds the device never waits for the server holding it: a request already in the server may be
waiting for its own turn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.test_warm import serve_reference_times
from tools import orders
from tools.judge._paired import time_reference_now
from tools.judge._plan import prepare
from tools.problem import Problem
from tools.supervise import Deadline, DeviceTurns, SharedExclusiveLock, WarmPool


class RecordingLock(SharedExclusiveLock):
    """The pool's device lock, noting each turn taken."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: list[str] = []
        self.asked: list[str] = []

    def acquire_shared(self) -> None:
        self.asked.append("shared")
        super().acquire_shared()
        self.taken.append("shared")

    def acquire_exclusive(self) -> None:
        super().acquire_exclusive()
        self.taken.append("exclusive")

    def free(self) -> bool:
        return self._shared == 0 and not self._exclusive


@pytest.fixture
def pool() -> Iterator[WarmPool]:
    pool = WarmPool()
    pool.device = RecordingLock()
    yield pool
    pool.shutdown()


def test_a_truths_device_work_takes_a_shared_turn_a_forward_and_its_host_work_none(
    tiny: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: WarmPool
) -> None:
    env = serve_reference_times(tiny, tmp_path, monkeypatch)
    lock = pool.device
    assert isinstance(lock, RecordingLock)
    turns = DeviceTurns(lock)  # as a CUDA evaluation holds it between its device work: nothing
    item = prepare(tiny, env, 1234, pool=pool, parent=pool.staging, turns=turns)
    try:
        assert item.ok, item.truth.output
        # a turn for each case; a shape's for each checked call (the first with the fp32 reference's) and
        # one for its truth's facts: a timed loop waiting for the device alone waits for one forward
        per_shape = [len(t.truth.truth_offsets) + 1 for t in item.plan.timing]
        assert lock.taken == ["shared"] * (len(item.plan.cases) + sum(per_shape))
        assert min(per_shape) >= 3
        assert turns.mode == "none"
        assert lock.free()
    finally:
        item.discard()


def test_the_reference_timed_by_the_server_takes_the_device_alone(
    tiny: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: WarmPool
) -> None:
    """The paired check's loop, and a truth that times the reference (the first on a host, a final
    re-check): exclusive, whatever the caller held."""
    env = serve_reference_times(tiny, tmp_path, monkeypatch)
    lock = pool.device
    assert isinstance(lock, RecordingLock)
    turns = DeviceTurns(lock)
    item = prepare(tiny, env, 99, pool=pool, parent=pool.staging, turns=turns, refresh_reference=True)
    try:
        assert item.ok, item.truth.output
        assert lock.taken.count("exclusive") == len(item.plan.timing)
        lock.taken.clear()
        turns.to("shared")  # as a CPU evaluation holds it: given back at the end, never lost
        checked = time_reference_now(tiny, item.plan, item.job, pool, turns)
        assert checked.returncode == 0, checked.output
        assert lock.taken[-2:] == ["exclusive", "shared"]
        assert turns.mode == "shared"
        turns.close()
        assert lock.free()
    finally:
        item.discard()


def test_a_caller_holding_the_device_alone_lets_a_request_waiting_for_its_turn_finish(
    tiny: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: WarmPool
) -> None:
    """Trajectory B's truth is in the server, waiting for a shared turn, while trajectory A holds the device
    alone and asks the server something: A lets go while it waits for the server (else each waits for the
    other forever), B's truth is made, then A's request runs with its exclusive turn taken again."""
    env = serve_reference_times(tiny, tmp_path, monkeypatch)
    lock = pool.device
    assert isinstance(lock, RecordingLock)
    a = DeviceTurns(lock)
    a.to("exclusive")
    made: list[bool] = []

    def trajectory_b() -> None:
        made.append(prepare(tiny, env, 7, pool=pool, parent=pool.staging, turns=DeviceTurns(lock)).ok)

    b = threading.Thread(target=trajectory_b, daemon=True)
    b.start()
    server = pool.truth_server(tiny.data_hash)
    try:
        deadline = time.monotonic() + 60
        while not lock.asked and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lock.asked == ["shared"]  # B's first device work ...
        assert lock.taken == ["exclusive"]  # ... waits for A's turn
        assert server.busy()
        answered: list[int | None] = []
        forget = orders.ForgetRequest(handle="nothing kept under this")
        asks = threading.Thread(
            target=lambda: answered.append(server.request(forget, Deadline(30), a).returncode), daemon=True
        )
        asks.start()
        asks.join(timeout=60)
        b.join(timeout=60)
        assert not asks.is_alive(), "the two requests waited for each other"
        assert not b.is_alive()
        assert made == [True]
        assert answered == [0]
        assert a.mode == "exclusive"
    finally:
        server.release()
        a.close()


def test_a_second_trajectory_gets_a_truth_server_of_its_own_while_the_first_is_busy() -> None:
    """One server answers one request at a time, and a request may wait there for its device turn: a CUDA
    problem's second trajectory (`most=2`) gets a second server rather than queue; never more than two,
    and an idle one is always taken first. A CPU problem's (`most=1`) stays one."""
    pool = WarmPool()
    try:
        first = pool.truth_server("a", most=2)
        first.release()
        with first._one_at_a_time:  # a request in flight
            second = pool.truth_server("a", most=2)
            assert second is not first
            second.release()
            assert pool.truth_server("a", most=2) is second  # idle: taken before a third is started
            second.release()
            with second._one_at_a_time:
                third = pool.truth_server("a", most=2)
                assert third in (first, second)
                third.release()
        assert pool.truth_server("a", most=2) in (first, second)
        one = pool.truth_server("cpu problem")
        one.release()
        with one._one_at_a_time:
            assert pool.truth_server("cpu problem") is one
    finally:
        pool.shutdown()


def test_a_truth_goes_to_a_server_no_evaluation_claims_so_its_recheck_does_not_queue_behind_it() -> None:
    """A claimed server keeps an evaluation's truth, whose re-check will come to it: another trajectory's
    truth goes to an unclaimed server (a second one is started for it, up to `most`), and where every
    server is claimed, to the least claimed idle one. The evaluation's own requests go to its own."""
    pool = WarmPool()
    try:
        first = pool.truth_server("a", most=2)  # an evaluation's, claimed while it runs
        assert pool.truth_server("a", most=2, own=first) is first  # its own paired check: no second server
        first.release()
        second = pool.truth_server("a", most=2)
        assert second is not first  # first is idle but claimed: a second server rather than a queue there
        second.release()
        assert pool.truth_server("a", most=2) is second  # unclaimed: taken before the claimed one
        assert first.claims == 1
        assert second.claims == 1
        assert first.claim()  # two claims on the first, one on the second: the second is the least claimed
        assert pool.truth_server("a", most=2) is second
        assert second.claims == 2
    finally:
        pool.shutdown()


def test_beside_two_evaluations_the_truth_made_ahead_gets_a_server_of_its_own() -> None:
    """Two trajectories' evaluations each claim the server that keeps their truth; the truth one of them starts
    making ahead as it begins (tools/judge/_ahead.py `made_beside`) goes to a third server: sent to one of
    theirs, it would hold that evaluation's re-check for as long as a truth takes to make."""
    from tools.judge._plan import truth_servers
    from tools.problem import load_problem

    most = truth_servers(load_problem(REPO / "problems" / "selective_scan.yaml"))
    pool = WarmPool()
    try:
        first = pool.truth_server("a", most=most)  # the first trajectory's evaluation
        second = pool.truth_server("a", most=most)  # the second's
        ahead = pool.truth_server("a", most=most)
        assert len({first, second, ahead}) == 3
        for server in (first, second, ahead):
            server.release()
    finally:
        pool.shutdown()


def test_the_truth_servers_a_cuda_problem_may_have_follow_their_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    """`KERNEL_AGENT_TRUTH_SERVERS` sets a CUDA problem's cap (a CPU problem keeps one: a second would contend
    for the cores its loops are timed on); a value that is not a whole number >= 1 is refused, not guessed."""
    from tools.judge._plan import truth_servers
    from tools.problem import load_problem
    from tools.supervise.pool import TRUTH_SERVERS, TRUTH_SERVERS_ENV

    cuda = load_problem(REPO / "problems" / "selective_scan.yaml")
    cpu = load_problem(REPO / "problems" / "selective_scan_cpu.yaml")
    monkeypatch.delenv(TRUTH_SERVERS_ENV, raising=False)
    assert (truth_servers(cuda), truth_servers(cpu)) == (TRUTH_SERVERS, 1)
    monkeypatch.setenv(TRUTH_SERVERS_ENV, "5")
    assert (truth_servers(cuda), truth_servers(cpu)) == (5, 1)
    for bad in ("0", "-1", "two", "2.5", "²"):
        monkeypatch.setenv(TRUTH_SERVERS_ENV, bad)
        with pytest.raises(ValueError, match=TRUTH_SERVERS_ENV):
            truth_servers(cuda)
