"""Channels between candidates in flight at once (issue 52; what issue 51's shared truth needs closed): two
candidates evaluated at the same time, as in a parallel run or beside the next evaluation made ahead. One
(the holder) keeps a secret in its job folder, a System V shared memory segment and an abstract unix socket
open; the other (the prober) tries to reach each, by Python and by native means (libc through ctypes,
which the runtime guard's audit hook does not see), through its jobs folder, /dev/shm, the folder of jobs
made ahead and every /proc/<pid>/root and cwd it can see. Every attempt fails, and both results say what
closed it: `ipc_namespace`, `private_jobs`, `net_namespace` and `no_keyrings`, read by the harness in /proc.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.candidates import with_module_code
from tests.candidates.scan_variants import baseline
from tests.helpers import REPO
from tools import benchmark, compile_kernel
from tools.judge import check_source
from tools.problem import Problem
from tools.results import CompileResult
from tools.supervise import WarmPool, isolation
from tools.supervise.jobs import default_jobs_dir, scratch_home
from tools.worker.seal import SealSpec

pytestmark = pytest.mark.skipif(
    isolation.mode() != isolation.PIDNS or isolation.cold_support().ipcns != "",
    reason="this machine refuses PID or IPC namespaces (needs root or user namespaces)",
)

SECRET = "holder-secret.txt"
READY = "holder-ready"
RELEASE = "release"  # the test writes it into the holder's working dir once the prober is done
EPERM, ENOENT, ECONNREFUSED = 1, 2, 111
KEYRING_CALLS = "_ADD_KEY, _REQUEST_KEY = {'x86_64': (248, 249), 'aarch64': (217, 218)}[os.uname().machine]"


def holder(key: int, name: str) -> str:
    """The baseline; at import it makes a SysV segment under `key` and writes `name` into it, listens on the
    abstract socket `name`, writes its secret beside it, then waits (at most 120 s) for the test's release."""
    return with_module_code(
        "import ctypes, os, struct, time",
        "_libc = ctypes.CDLL(None, use_errno=True)",
        KEYRING_CALLS,
        "_libc.shmat.restype = ctypes.c_void_p",
        f"_shm = _libc.shmget({key}, 4096, 0o1000 | 0o666)  # IPC_CREAT",
        "_at = _libc.shmat(_shm, None, 0)",
        f"ctypes.memmove(_at, {name.encode()!r}, {len(name)})",
        "_sock = _libc.socket(1, 1, 0)  # AF_UNIX, SOCK_STREAM",
        f"_addr = struct.pack('=H', 1) + b'\\0' + {name.encode()!r}",
        "_bound = _libc.bind(_sock, _addr, len(_addr)) == 0 and _libc.listen(_sock, 4) == 0",
        "_libc.syscall.restype = ctypes.c_long",
        f"_key = _libc.syscall(_ADD_KEY, b'user', {name.encode()!r}, b'payload', 7, -4)  # the user keyring",
        "print('holder add_key', _key if _key >= 0 else f'errno {ctypes.get_errno()}', flush=True)",
        f"open({SECRET!r}, 'w').write({name!r})",
        f"open({READY!r}, 'w').close()  # after the secret: the test reads it once this is there",
        "print('holder ready: shm', _shm, 'socket', _bound, flush=True)",
        "_until = time.monotonic() + 120",
        f"while not os.path.exists({RELEASE!r}) and time.monotonic() < _until:",
        "    time.sleep(0.05)",
        "_libc.shmctl(_shm, 0, None)  # IPC_RMID: nothing left behind if the namespace were the host's",
    )


def prober(key: int, name: str, target: Path, folders: list[Path]) -> str:
    """The baseline; at import it tries to reach the holder's secret, segment and socket, and lists
    `folders` (its jobs folder, /dev/shm, the folder of jobs made ahead) natively and in Python, then
    prints what it found as one `PROBE {json}` line."""
    paths = [str(target / "work" / SECRET)]
    return with_module_code(
        "import ctypes, json, os, struct",
        "_libc = ctypes.CDLL(None, use_errno=True)",
        KEYRING_CALLS,
        "_found = {}",
        "_libc.syscall.restype = ctypes.c_long",
        f"_k = _libc.syscall(_REQUEST_KEY, b'user', {name.encode()!r}, None, 0)",
        "_found['request_key'] = _k if _k >= 0 else f'errno {ctypes.get_errno()}'",
        "def _native_read(path):",
        "    fd = _libc.open(path.encode(), 0)",
        "    if fd < 0:",
        "        return f'errno {ctypes.get_errno()}'",
        "    buf = ctypes.create_string_buffer(256)",
        "    n = _libc.read(fd, buf, 255)",
        "    _libc.close(fd)",
        "    return buf.raw[: max(n, 0)].decode(errors='replace')",
        "def _py_read(path):",
        "    try:",
        "        return open(path).read()",
        "    except OSError as exc:",
        "        return f'errno {exc.errno}'",
        "def _listing(path):",
        "    try:",
        "        return sorted(os.listdir(path))",
        "    except OSError as exc:",
        "        return f'errno {exc.errno}'",
        f"for _p in {paths!r}:",
        "    _found['native ' + _p] = _native_read(_p)",
        "    _found['python ' + _p] = _py_read(_p)",
        f"for _d in {list(map(str, folders))!r}:",
        "    _found['native dir ' + _d] = _native_read(_d)  # EISDIR where it is there",
        "    _found['list ' + _d] = _listing(_d)",
        "for _pid in sorted(p for p in os.listdir('/proc') if p.isdigit()):",
        "    for _how in ('root', 'cwd'):",
        f"        _p = f'/proc/{{_pid}}/{{_how}}' + {str(target / 'work' / SECRET)!r}",
        f"        _q = f'/proc/{{_pid}}/cwd/{SECRET}'",
        "        _found[f'proc {_pid} {_how}'] = [_native_read(_p), _native_read(_q)]",
        "_fds = [f'/proc/self/fd/{fd}' for fd in os.listdir('/proc/self/fd')]",
        "_links = [os.readlink(fd) for fd in _fds if os.path.exists(fd)]",
        "_found['sockets held'] = [link for link in _links if link.startswith('socket:')]",
        f"_shm = _libc.shmget({key}, 0, 0)",
        "_found['shmget'] = _shm if _shm >= 0 else f'errno {ctypes.get_errno()}'",
        "_sock = _libc.socket(1, 1, 0)",
        f"_addr = struct.pack('=H', 1) + b'\\0' + {name.encode()!r}",
        "_c = _libc.connect(_sock, _addr, len(_addr))",
        "_found['abstract connect'] = 'connected' if _c == 0 else f'errno {ctypes.get_errno()}'",
        "_found['own job'] = os.path.dirname(os.getcwd())",
        "print('PROBE ' + json.dumps(_found), flush=True)",
    )


def _probe_of(output: str) -> dict[str, Any]:
    lines = [ln for ln in output.splitlines() if ln.startswith("PROBE ")]
    assert lines, output[-2000:]
    found: dict[str, Any] = json.loads(lines[-1][len("PROBE ") :])
    return found


class Holder:
    """The holder compiled in a thread (`run`: compile_kernel on a pool or cold), found in `jobs` once its
    secret is written, released when the test is done with it."""

    def __init__(self, run: Callable[[str], CompileResult], jobs: Path) -> None:
        self.key = int.from_bytes(os.urandom(3), "big") + 0x10000
        self.name = f"kagent-channels-{uuid.uuid4().hex[:12]}"
        self.results: list[CompileResult] = []
        self.thread = threading.Thread(target=lambda: self.results.append(run(holder(self.key, self.name))))
        self.jobs = jobs

    def __enter__(self) -> Holder:
        self.thread.start()
        deadline = time.monotonic() + 300  # the baseline's build, on a session's fresh cache, comes first
        while time.monotonic() < deadline and self.thread.is_alive():
            found = list(self.jobs.glob(f"*/work/{READY}"))
            if found:
                self.job = found[0].parents[1]
                return self
            time.sleep(0.05)
        raise AssertionError(f"the holder never wrote its secret: {self.results}")

    def release(self) -> CompileResult:
        (self.job / "work" / RELEASE).write_text("")
        self.thread.join(timeout=120)
        assert self.results, "the holder did not finish"
        return self.results[0]

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            self.release()


@pytest.fixture
def decoy(warm: WarmPool) -> Iterator[Path]:
    """A job made ahead of its evaluation, as the truth server leaves one in the pool's staging folder."""
    folder = warm.staging / "kagent-job-decoy"
    (folder / "shared").mkdir(parents=True)
    (folder / "shared" / "inputs.pt").write_text("the next evaluation's inputs")
    yield folder
    for path in sorted(folder.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    folder.rmdir()


def _assert_nothing_reached(found: dict[str, Any], target: Path, own_jobs: Path) -> None:
    secret = str(target / "work" / SECRET)
    assert found[f"native {secret}"] == f"errno {ENOENT}", found
    assert found[f"python {secret}"] == f"errno {ENOENT}", found
    own = Path(found["own job"]).name
    assert found[f"list {own_jobs}"] == [own], found  # its jobs folder holds its own job, nothing else
    for key, value in found.items():
        if key.startswith("proc "):
            assert value == [f"errno {ENOENT}"] * 2, (key, value)
    assert found["shmget"] == f"errno {ENOENT}", found  # another IPC namespace: no such key
    assert found["abstract connect"] == f"errno {ECONNREFUSED}", found  # another network namespace
    assert found["request_key"] == f"errno {EPERM}", found  # the keyring calls are refused
    assert found["sockets held"] == [], found  # no inherited handle on the zygote or another worker


def _check_holder(result: CompileResult, name: str) -> None:
    """The holder really held what the prober looked for (else the probe proves nothing)."""
    assert result.status == "ok", result.message
    assert "holder ready: shm " in result.output
    assert "holder ready: shm -1" not in result.output
    assert "socket True" in result.output
    assert f"holder add_key errno {EPERM}" in result.output  # nothing reaches the uid's keyring either


def test_the_candidates_pass_the_static_checks() -> None:
    """ctypes, os and a listing are allowed: the kernel's boundaries, not the checks, are under test."""
    assert check_source(holder(1, "x"))[0] == []
    assert check_source(prober(1, "x", Path("/tmp/x"), [Path("/tmp")]))[0] == []


def test_warm_a_candidate_reaches_nothing_of_one_evaluated_beside_it(
    tiny: Problem, warm: WarmPool, decoy: Path
) -> None:
    """Warm: the holder compiles (forked from the zygote) while the prober is evaluated beside it."""
    with Holder(lambda code: compile_kernel(tiny, code, pool=warm), warm.jobs_dir) as held:
        assert (held.job / "work" / SECRET).read_text() == held.name  # there, from the host's side
        folders = [warm.jobs_dir, Path("/dev/shm"), warm.staging, decoy]
        result = benchmark(
            tiny, prober(held.key, held.name, held.job, folders), pool=warm, prefetch_next=False
        )
        assert (decoy / "shared" / "inputs.pt").exists()
        first = held.release()
    _check_holder(first, held.name)
    assert result.workers == "warm"
    assert result.status == "ok", result.message
    found = _probe_of(result.output)
    _assert_nothing_reached(found, held.job, warm.jobs_dir)
    # /dev/shm (where the pool lives, given room) shows only the way to its own job and its harness
    assert found["list /dev/shm"] == ([warm.root.name] if warm.root.parent == Path("/dev/shm") else []), found
    assert found[f"list {warm.staging}"] == f"errno {ENOENT}", found
    assert found[f"native dir {decoy}"] == f"errno {ENOENT}", found
    assert found[f"list {decoy}"] == f"errno {ENOENT}", found
    for containment in (result.env.containment, first.containment):
        assert isolation.IPCNS in containment
        assert isolation.NO_KEYRINGS in containment
        assert isolation.PRIVATE_JOBS in containment
        assert isolation.NETNS in containment
        assert isolation.uncontained(containment) == []


def test_cold_a_candidate_reaches_nothing_of_one_compiled_beside_it(
    tiny: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cold (`unshare ... seal.py ... setpriv`): two compiles in flight, both in this process's jobs folder."""
    monkeypatch.setenv("KERNEL_AGENT_WARM", "0")
    with Holder(lambda code: compile_kernel(tiny, code), default_jobs_dir()) as held:
        probe = prober(held.key, held.name, held.job, [default_jobs_dir(), Path("/dev/shm")])
        result = compile_kernel(tiny, probe)
        first = held.release()
    _check_holder(first, held.name)
    assert result.status == "ok", result.message
    found = _probe_of(result.output)
    _assert_nothing_reached(found, held.job, default_jobs_dir())
    assert found["list /dev/shm"] == [], found
    for containment in (result.containment, first.containment):
        assert isolation.IPCNS in containment
        assert isolation.NO_KEYRINGS in containment
        assert isolation.PRIVATE_JOBS in containment
        assert isolation.uncontained(containment) == []


def test_the_harness_says_when_a_job_folder_is_not_private(tmp_path: Path) -> None:
    """`observe` reads the worker's view through /proc/<pid>/root: a sealed worker whose jobs folder was
    left uncovered (the seal asked for none) is reported, naming what it could see."""
    jobs = tmp_path / "jobs"
    (jobs / "mine" / "work").mkdir(parents=True)
    (jobs / "theirs").mkdir()
    (tmp_path / "stage" / "work").mkdir(parents=True)
    spec = SealSpec(writable=[str(jobs / "mine" / "work")], overlay_work=str(tmp_path / "stage" / "work"))
    asked = dataclasses.replace(spec, private=[str(jobs)], keep=[str(jobs / "mine")])
    sleeper = [sys.executable, "-c", "import time; time.sleep(5)"]
    unsealed = subprocess.Popen(isolation.wrap(sleeper, spec), cwd=jobs / "mine" / "work")
    sealed = subprocess.Popen(isolation.wrap(sleeper, asked), cwd=jobs / "mine" / "work")
    try:
        time.sleep(1.5)
        seen = isolation.observe(unsealed.pid, True, {}, asked)
        assert seen[-1] == f"uncontained: jobs (not covered: {jobs})", seen
        assert isolation.observe(sealed.pid, True, {}, asked)[-1] == isolation.PRIVATE_JOBS
    finally:
        for proc in (unsealed, sealed):
            proc.kill()
            proc.wait()


@pytest.mark.slow  # 32 s on 2 cores: a warm pool and a build of its own (the fast tier's largest call)
def test_warm_a_build_includes_nothing_of_a_job_in_flight_beside_it(tiny: Problem, warm: WarmPool) -> None:
    """The trusted builder runs no candidate code but compiles what a candidate names: its sources include
    the holder's secret by its absolute path. The builder sees the folders that hold jobs as its candidate's
    worker does (only the harness it runs from), so the include fails at once, before the torch headers."""
    with Holder(lambda code: compile_kernel(tiny, code, pool=warm), warm.jobs_dir) as held:
        secret = held.job / "work" / SECRET
        code = baseline().replace('CPP_SOURCE = r"""\n', f'CPP_SOURCE = r"""\n#include "{secret}"\n', 1)
        assert str(secret) in code, "baseline.py changed: update this test"
        result = compile_kernel(tiny, code, pool=warm)
        assert secret.exists()  # there all along, from the host's side
        held.release()
    assert result.status == "compile_error", result.message
    assert f"{SECRET}: No such file" in result.message, result.message


@pytest.mark.gpu
@pytest.mark.parametrize("made_ahead", [False, True])
def test_gpu_a_cuda_worker_runs_with_every_channel_closed(made_ahead: bool) -> None:
    """On the GPU: CUDA starts and the shipped baseline is timed in a worker with its own IPC namespace, an
    empty /dev/shm, only its own job in view and the keyring filter; warm, fresh and made ahead."""
    from tests.helpers import REPO
    from tools.problem import load_problem
    from tools.supervise.pool import pool_for

    problem = load_problem(REPO / "tests" / "adversarial" / "gpu" / "scan_gpu_small.yaml")
    code = (REPO / "problems" / "selective_scan" / "solutions" / "01_naive_fused.py").read_text()
    result = benchmark(problem, code)
    if made_ahead:
        pool = pool_for(None)
        assert pool is not None
        pool.wait_prefetch(problem.data_hash)
        result = benchmark(problem, code)
    assert result.status == "ok", result.message
    assert result.workers == "warm"
    for guard in (isolation.IPCNS, isolation.NO_KEYRINGS, isolation.PRIVATE_JOBS):
        assert guard in result.env.containment
    assert isolation.uncontained(result.env.containment) == []


@contextlib.contextmanager
def other_harness_job() -> Iterator[tuple[Path, str]]:
    """Another harness process (another `agent bench`, say) with a cold job in flight: its root and the
    secret in its working dir. The process lives until the test is done, so nothing removes the job."""
    name = f"kagent-other-{uuid.uuid4().hex[:12]}"
    code = (
        "import sys\n"
        "from tools.supervise.jobs import Job\n"
        "job = Job.create(None)\n"
        f"(job.work / {SECRET!r}).write_text({name!r})\n"
        "print(job.root, flush=True)\n"
        "sys.stdin.read()\n"
        "job.cleanup()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    other = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        root = Path(other.stdout.readline().strip())
        assert (root / "work" / SECRET).read_text() == name, "the other harness made no job"
        yield root, name
    finally:
        if other.stdin is not None:
            other.stdin.close()
        other.wait(timeout=60)


def _assert_other_job_unseen(found: dict[str, Any], other: Path) -> None:
    secret = str(other / "work" / SECRET)
    assert found[f"native {secret}"] == f"errno {ENOENT}", found
    assert found[f"python {secret}"] == f"errno {ENOENT}", found
    assert found[f"list {other.parent}"] == f"errno {ENOENT}", found  # its jobs folder is not there at all


def test_warm_a_candidate_reaches_nothing_of_another_harness_process_cold_job(
    tiny: Problem, warm: WarmPool
) -> None:
    """Every harness process keeps its cold jobs under this user's one scratch home, which a sealed worker
    covers whole: a job another process made (before or after the worker started) is not there to read."""
    with other_harness_job() as (other, name):
        assert other.parent.parent == scratch_home()
        probe = prober(1, name, other, [scratch_home(), other.parent])
        result = compile_kernel(tiny, probe, pool=warm)
        assert (other / "work" / SECRET).exists()  # there all along, from the host's side
    assert result.status == "ok", result.message
    found = _probe_of(result.output)
    _assert_other_job_unseen(found, other)
    # the pool's jobs live on /dev/shm, or under the scratch home, covered
    assert found[f"list {scratch_home()}"] == [], found


@pytest.mark.slow  # the cold path's interpreter and torch import, ~10 s more; the warm variant above stays
def test_cold_a_candidate_reaches_nothing_of_another_harness_process_cold_job(
    tiny: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same from a cold worker, whose own job is under the scratch home too: it sees the way to its
    own jobs folder and nothing else there."""
    monkeypatch.setenv("KERNEL_AGENT_WARM", "0")
    with other_harness_job() as (other, name):
        result = compile_kernel(tiny, prober(1, name, other, [scratch_home(), other.parent]))
    assert result.status == "ok", result.message
    found = _probe_of(result.output)
    _assert_other_job_unseen(found, other)
    assert found[f"list {scratch_home()}"] == [default_jobs_dir().name], found
