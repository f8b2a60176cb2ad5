"""Kernel-enforced containment of candidate workers (issue 23): each one, and every build it runs, is in a
network namespace of its own with no route anywhere, and holds no capabilities, on the warm path (forked
from the zygote) and the cold path (`unshare --net ... setpriv ...`). The result says what contained it,
as the harness saw it in /proc, and says "uncontained" where a guard was missing. Nothing of the host's
mount table or network changes.

The candidate connects through libc, which the runtime guard's audit hook does not see: only the network
namespace stands between it and a listener the test opens on the host's loopback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.views.result import compile_view, measured_line
from tests.adversarial.candidates import with_module_code
from tests.candidates.scan_variants import RETURN
from tests.helpers.containment import BARE, BOTH_PATHS, FULL
from tools import benchmark, compile_kernel
from tools.judge import check_source
from tools.problem import Problem
from tools.results import BenchResult, CompileResult, EnvInfo
from tools.supervise import WarmPool, isolation
from tools.worker import contain

pytestmark = pytest.mark.skipif(
    isolation.mode() != isolation.PIDNS or isolation.cold_support().netns != "",
    reason="this machine refuses PID or network namespaces (needs root or user namespaces)",
)


def native_connect(port: int) -> str:
    """The baseline, plus an import-time TCP connect to 127.0.0.1:`port` through libc (no audit event); a
    connect that succeeds makes every output wrong, so the verdict tells too."""
    src = with_module_code(
        "import ctypes, struct",
        "_libc = ctypes.CDLL(None, use_errno=True)",
        "_fd = _libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM",
        f"_addr = struct.pack('=H', 2) + struct.pack('>H', {port}) + bytes([127, 0, 0, 1]) + bytes(8)",
        "NET_REACHED = _fd >= 0 and _libc.connect(_fd, _addr, len(_addr)) == 0",
        "_why = 'connected' if NET_REACHED else f'failed, errno {ctypes.get_errno()}'",
        f"print('native connect to 127.0.0.1:{port}:', _why, flush=True)",
    )
    at = src.rfind(RETURN)
    assert at > 0, "baseline.py changed: update tests/test_net_containment.py"
    return f"{src[:at]}\n        if NET_REACHED:\n            y = y + 1{src[at:]}"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on the host's loopback; a connection made to it waits in its backlog."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def _connections(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def _evaluate(
    tiny: Problem, code: str, path: str, warm: WarmPool, monkeypatch: pytest.MonkeyPatch
) -> BenchResult:
    if path == "cold":
        monkeypatch.setenv("KERNEL_AGENT_WARM", "0")
        result = benchmark(tiny, code, prefetch_next=False)
    else:
        result = benchmark(tiny, code, pool=warm, prefetch_next=False)
    assert result.workers == path
    # warm means warm: no fallback to a fresh process (a paired check's word on the reference, and one on a
    # busy host, aside: a 2-core CI machine is busy at times)
    said = [n for n in result.notices if "reference's cached median" not in n and "CPUs busy" not in n]
    if os.environ.get("KERNEL_AGENT_ISOLATION") == isolation.GROUP:  # forced off: a fresh build says so too
        said = [n for n in said if not n.startswith("the harness's builder ran with uncontained: pid")]
    assert said == []
    return result


def test_the_candidate_bypasses_the_audit_hook() -> None:
    assert check_source(native_connect(9))[0] == []  # ctypes is allowed: the namespace is the boundary


@pytest.mark.parametrize("path", BOTH_PATHS)
def test_a_native_connect_to_the_host_loopback_fails(
    tiny: Problem, warm: WarmPool, listener: socket.socket, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = listener.getsockname()[1]
    result = _evaluate(tiny, native_connect(port), path, warm, monkeypatch)
    assert f"native connect to 127.0.0.1:{port}: failed, errno 101" in result.output  # ENETUNREACH
    assert _connections(listener) == 0
    assert result.status == "ok", result.message
    assert result.env.containment == FULL
    assert result.compile is not None
    assert result.compile.containment == FULL


@pytest.mark.parametrize("path", BOTH_PATHS)
def test_a_compile_is_contained_too(
    tiny: Problem, warm: WarmPool, listener: socket.socket, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = listener.getsockname()[1]
    if path == "cold":
        monkeypatch.setenv("KERNEL_AGENT_WARM", "0")
    result = compile_kernel(tiny, native_connect(port), pool=warm if path == "warm" else None)
    assert result.status == "ok", result.message
    assert "failed, errno 101" in result.output
    assert _connections(listener) == 0
    assert result.containment == FULL


@pytest.mark.parametrize("path", BOTH_PATHS)
def test_with_containment_forced_off_the_result_says_uncontained(
    tiny: Problem, warm: WarmPool, listener: socket.socket, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_AGENT_ISOLATION", isolation.GROUP)
    port = listener.getsockname()[1]
    result = _evaluate(tiny, native_connect(port), path, warm, monkeypatch)
    assert f"native connect to 127.0.0.1:{port}: connected" in result.output  # the test can tell
    assert _connections(listener) >= 1
    assert result.status == "incorrect"
    why = "(KERNEL_AGENT_ISOLATION=group)"
    assert result.env.containment == [
        isolation.GROUP,
        f"uncontained: pid {why}",
        f"uncontained: network {why}",
        f"uncontained: capabilities {why}",
        f"uncontained: ipc {why}",
        isolation.NO_KEYRINGS,  # the worker's own filter: no namespace needed
        f"uncontained: mounts {why}",
        f"uncontained: devices {why}",
        f"uncontained: jobs {why}",
    ]


def _host_state() -> dict[str, object]:
    """The host's mount table and network as this (harness) process sees them."""
    interfaces = {
        link.name: ((link / "flags").read_text(), (link / "operstate").read_text())
        for link in sorted(Path("/sys/class/net").iterdir())
    }
    return {
        "mountinfo": Path("/proc/self/mountinfo").read_text(),
        "interfaces": interfaces,
        "routes": Path("/proc/net/route").read_text(),
        "netns": str(Path("/proc/self/ns/net").readlink()),
    }


def _loopback_works() -> bool:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5):
            conn, _ = server.accept()
            conn.close()
    return True


def test_contained_runs_leave_the_host_mounts_and_network_unchanged(
    tiny: Problem, warm: WarmPool, listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _host_state()
    code = native_connect(listener.getsockname()[1])
    results = [
        _evaluate(tiny, code, "warm", warm, monkeypatch),
        _evaluate(tiny, code, "cold", warm, monkeypatch),
    ]
    assert [r.env.containment for r in results] == [FULL, FULL]
    assert _host_state() == before
    assert _loopback_works()


# --- the pieces, without a build -------------------------------------------------------------------------


def test_observe_reads_the_guards_in_proc_not_the_workers_word() -> None:
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    wrapped = subprocess.Popen(isolation.wrap([sys.executable, "-c", "import time; time.sleep(5)"]))
    try:
        time.sleep(0.5)
        refusals = {isolation.NETNS: "refused here"}
        assert isolation.observe(plain.pid, False, refusals) == [
            isolation.GROUP,
            "uncontained: pid (not seen on the worker)",
            "uncontained: network (refused here)",
            "uncontained: capabilities (not seen on the worker)",
            "uncontained: ipc (not seen on the worker)",
            "uncontained: keyrings (not seen on the worker)",
        ]
        assert isolation.observe(wrapped.pid, True, {}) == BARE[:5]  # no seal asked for: not checked
        assert isolation.observe(plain.pid, True, {})[0].startswith("uncontained: unverified")  # no child
    finally:
        for proc in (plain, wrapped):
            proc.kill()
            proc.wait()


def test_a_worker_without_capabilities_cannot_leave_its_namespaces() -> None:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked child: contain itself, then try to get out
        outcome = ["child died"]
        try:
            host = os.open("/proc/self/ns/net", os.O_RDONLY)  # the host's namespace, held open
            steps = (contain.enter_net_namespace, contain.drop_capabilities, contain.enter_net_namespace)
            setns = lambda: contain.check(contain.libc().setns(host, 0), "setns")  # noqa: E731
            outcome = [contain.attempt(step) for step in (*steps, setns)]
        finally:
            os.write(write_fd, json.dumps(outcome).encode())
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        entered, dropped, unshare_again, setns_back = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert (entered, dropped) == ("", "")
    assert "Operation not permitted" in unshare_again
    assert "Operation not permitted" in setns_back


def test_views_say_how_the_worker_was_contained() -> None:
    contained = BenchResult(status="ok", correct=True, speedup=1.0, message="", env=EnvInfo(containment=FULL))
    assert "contained: pid namespace, net namespace, no capabilities" in measured_line(contained).plain
    missing = ["process_group", "uncontained: network (KERNEL_AGENT_ISOLATION=group)"]
    comp = CompileResult(
        status="ok", message="compiled 1 extension from the build cache", containment=missing
    )
    lines = [line.plain for line in compile_view(comp, None)]
    assert "uncontained: network (KERNEL_AGENT_ISOLATION=group)" in lines
    assert not any(
        "uncontained" in line.plain
        for line in compile_view(comp.model_copy(update={"containment": FULL}), None)
    )
