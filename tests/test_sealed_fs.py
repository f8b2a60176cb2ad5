"""The candidate worker's filesystem, sealed (issue 23): every mount read-only but the job's working dir and
the build cache seen through an overlay onto the job's staging folder, which the harness (trusted code)
reviews afterwards and never publishes from (its builds come from the trusted builder); a /dev with only null, zero, random and the GPU's nodes. On the warm path (forked
from the zygote) and the cold path (`unshare ... seal.py ... setpriv ...`).

The candidate writes through libc, which the runtime guard's audit hook does not see: only the mounts stand
between its native code and the build cache, the reference-time cache, the harness and /tmp.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.adversarial.candidates import with_module_code
from tests.candidates.scan_variants import RETURN, baseline
from tests.helpers.containment import BARE, BOTH_PATHS, FULL
from tools import benchmark
from tools.cache import build_cache_dir, builds, cache_root, staged
from tools.problem import Problem
from tools.results import BenchResult
from tools.supervise import WarmPool, isolation
from tools.worker import seal

namespaces = pytest.mark.skipif(
    isolation.mode() != isolation.PIDNS or isolation.cold_support().netns != "",
    reason="this machine refuses PID or network namespaces (needs root or user namespaces)",
)


def native_writes(targets: dict[str, str]) -> str:
    """The baseline, plus import-time writes through libc to each of `targets` (label: path), and a listing
    of /dev; what happened is printed as JSON. A write into the real cache that lands makes every output
    wrong, so the verdict tells too."""
    src = with_module_code(
        "import ctypes, json, os",
        "_libc = ctypes.CDLL(None, use_errno=True)",
        "def _write(path):",
        "    fd = _libc.open(path.encode(), 0o1101, 0o644)  # O_WRONLY | O_CREAT | O_TRUNC",
        "    if fd < 0:",
        "        return ctypes.get_errno()",
        "    _libc.write(fd, b'poison', 6)",
        "    _libc.close(fd)",
        "    return 0",
        f"WRITES = {{label: _write(path) for label, path in {targets!r}.items()}}",
        "print('SEALED ' + json.dumps({'writes': WRITES, 'dev': sorted(os.listdir('/dev'))}), flush=True)",
    )
    at = src.rfind(RETURN)
    assert at > 0, "baseline.py changed: update tests/test_sealed_fs.py"
    return f"{src[:at]}\n        if WRITES.get('reference_times') == 0:\n            y = y + 1{src[at:]}"


def _seen(result: BenchResult) -> dict[str, object]:
    line = next(x for x in result.output.splitlines() if x.startswith("SEALED "))
    return json.loads(line.removeprefix("SEALED "))


def _evaluate(
    tiny: Problem, code: str, path: str, warm: WarmPool, monkeypatch: pytest.MonkeyPatch
) -> BenchResult:
    if path == "cold":
        monkeypatch.setenv("KERNEL_AGENT_WARM", "0")
        result = benchmark(tiny, code, prefetch_next=False)
    else:
        result = benchmark(tiny, code, pool=warm, prefetch_next=False)
    assert result.workers == path
    return result


EROFS = 30


@namespaces
@pytest.mark.serial  # checks that the shared cache's staging folder is empty after: another test's job is in it
@pytest.mark.parametrize("path", BOTH_PATHS)
def test_native_writes_reach_only_the_job_and_the_staged_cache(
    tiny: Problem, warm: WarmPool, path: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = build_cache_dir()
    poison = f"poison-{path}-{os.getpid()}"
    targets = {
        "work": f"./{poison}",
        "build_cache": str(cache / poison),
        "object_cache": str(cache / builds.OBJECTS / poison),
        "reference_times": str(cache_root() / poison),
        "tmp": f"/tmp/{poison}",
        "harness_tree": str(Path(__file__).resolve().parents[1] / poison),
    }
    (cache / builds.OBJECTS).mkdir(exist_ok=True)
    result = _evaluate(tiny, native_writes(targets), path, warm, monkeypatch)
    seen = _seen(result)
    writes = seen["writes"]
    assert isinstance(writes, dict)
    assert writes["work"] == 0  # its own working dir stays writable
    assert writes["build_cache"] == writes["object_cache"] == 0  # ... and the cache, but through the overlay
    assert {k: writes[k] for k in ("reference_times", "tmp", "harness_tree")} == dict.fromkeys(
        ("reference_times", "tmp", "harness_tree"), EROFS
    )
    for target in (
        cache / poison,
        cache / builds.OBJECTS / poison,
        cache_root() / poison,
        Path("/tmp") / poison,
    ):
        assert not target.exists(), f"{target} reached the host"
    assert not list((cache_root() / "staging").glob("*")), "staging folders are removed after the job"
    assert any("not published" in n and poison in n for n in result.notices), result.notices
    assert result.status == "ok", result.message
    assert result.env.containment == FULL
    dev = seen["dev"]
    assert isinstance(dev, list)
    assert "null" in dev
    assert "urandom" in dev
    assert seal.unexpected_devices(dev) == []
    assert not {"vda", "sda", "kmsg", "mem", "port", "tty"} & set(dev)


@pytest.mark.slow  # a fresh build of its own: 16-63 s
@namespaces
def test_a_build_in_a_sealed_worker_is_published_and_then_hit(
    tiny: Problem, warm: WarmPool, tmp_path: Path
) -> None:
    """The cache works through the seal: what the trusted builder published for one evaluation is the next
    one's cache hit."""
    include = "#include <torch/extension.h>"
    code = baseline().replace(include, f"{include}\n// a build of its own: {time.time_ns()}", 1)
    assert code != baseline(), "baseline.py changed: update tests/test_sealed_fs.py"
    first = benchmark(tiny, code, pool=warm, prefetch_next=False)
    assert first.status == "ok", first.message
    assert first.compile is not None
    assert not first.compile.cached
    key = first.compile.builds[0].key
    assert any(p.name.endswith(key) for p in build_cache_dir().iterdir())  # published by the harness
    second = benchmark(tiny, code, pool=warm, prefetch_next=False)
    assert second.compile is not None
    assert second.compile.cached, second.compile


# --- the pieces, without a build -------------------------------------------------------------------------


def _staged_build(upper: Path, name: str, key: str, marker_key: str | None = None) -> Path:
    entry = upper / f"{name}-{key}"
    entry.mkdir(parents=True)
    (entry / f"{name}.so").write_bytes(b"\x7fELF")
    (entry / staged.DONE_MARKER).write_text(json.dumps({"key": marker_key or key}))
    return entry


def test_nothing_a_worker_staged_is_published_however_well_formed(tmp_path: Path) -> None:
    """Only the harness's trusted builder publishes (tests/test_trusted_builder.py): a staged entry, well formed
    or not, is named in the review and left behind; an existing entry the job used is marked used."""
    upper, cache = tmp_path / "upper", tmp_path / "cache"
    cache.mkdir()
    _staged_build(upper, "good", "k1")
    _staged_build(upper, "forged", "k2", marker_key="k9")
    (upper / "unfinished-k3").mkdir()
    (upper / "loose-file").write_text("x")
    (upper / ".tmp").mkdir()
    (upper / builds.OBJECTS / "obj1").mkdir(parents=True)
    (upper / builds.OBJECTS / "obj1" / "main.o").write_bytes(b"o")
    (upper / builds.PCH / ".seen-pch1").parent.mkdir(parents=True)
    (upper / builds.PCH / ".seen-pch1").write_text("")
    used = cache / "used-k5"
    used.mkdir()
    os.utime(used, (1, 1))
    (upper / "used-k5").mkdir()  # overlayfs copied it up: the job touched it

    done = staged.review_staged(upper, cache)

    assert sorted(r.split(":")[0] for r in done.rejected) == [
        "forged-k2",
        "good-k1",
        "loose-file",
        "obj1",
        "unfinished-k3",
    ]
    assert all(staged.NOT_PUBLISHED in r for r in done.rejected)
    assert sorted(p.name for p in cache.rglob("*")) == ["used-k5"]
    assert done.used == ["used-k5"]
    assert used.stat().st_mtime > 1
    assert done.tampered == []


def test_mountinfo_parsing_and_what_a_sealed_worker_may_write(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "1 0 8:1 / / ro,relatime - ext4 /dev/vda rw\n"
        "2 1 0:5 / /proc rw,nosuid - proc proc rw\n"
        "3 2 0:6 / /proc/sys ro - proc proc rw\n"
        "4 1 0:7 / /dev rw - devtmpfs devtmpfs rw\n"  # the machine's /dev, covered by 5
        "5 4 0:8 / /dev ro - tmpfs tmpfs rw\n"
        "6 4 0:9 / /dev/pts rw - devpts devpts rw\n"  # under the covered /dev: unreachable
        "7 1 8:1 /job /tmp/my\\040job rw - ext4 /dev/vda rw\n"
        "8 1 0:10 / /cache rw - overlay overlay rw,lowerdir=/cache,upperdir=/stage/upper,workdir=/stage/work\n"
        "9 1 0:11 / /scratch rw - tmpfs tmpfs rw\n"
    )
    mounts = seal.read_mounts(str(info))
    assert [m.target for m in seal.visible(mounts)] == [
        "/",
        "/proc",
        "/proc/sys",
        "/dev",
        "/tmp/my job",
        "/cache",
        "/scratch",
    ]
    spec = seal.SealSpec(writable=["/tmp/my job"], cache="/cache", upper="/stage/upper")
    assert seal.writable_mounts(mounts, spec) == ["/scratch"]
    other = seal.SealSpec(writable=["/tmp/my job"], cache="/cache", upper="/elsewhere/upper")
    assert seal.writable_mounts(mounts, other) == [
        "/cache",
        "/scratch",
    ]  # an overlay onto someone else's staging


@namespaces
def test_the_seal_refuses_a_mount_table_that_propagates(tmp_path: Path) -> None:
    """Where a mount still propagates to other namespaces (a `shared:` peer group), sealing would change
    them too: it changes nothing and says why. Staged in a namespace of the test's own, where one mount is
    made shared."""
    repo = str(Path(__file__).resolve().parents[1])
    script = (
        f"import json, sys; sys.path.insert(0, {repo!r}); from tools.worker import seal; "
        f"print(json.dumps(seal.seal(seal.SealSpec(writable=[{str(tmp_path)!r}]))))"
    )
    shell = f"mount --bind {tmp_path} {tmp_path} && mount --make-shared {tmp_path} && {sys.executable} -c {shlex.quote(script)}"
    probe = subprocess.run(
        ["unshare", "--mount", "--fork", "sh", "-c", shell], capture_output=True, text=True, timeout=60
    )
    assert probe.returncode == 0, probe.stderr
    why = json.loads(probe.stdout.strip().splitlines()[-1])
    assert set(why) == {"mounts", "cache", "devices", "jobs"}
    assert all("propagate" in reason for reason in why.values()), why


@namespaces
def test_observe_reads_the_seal_in_proc(tmp_path: Path) -> None:
    work, stage = tmp_path / "work", tmp_path / "stage"
    for folder in (work, stage / "work"):
        folder.mkdir(parents=True)
    spec = seal.SealSpec(writable=[str(work)], overlay_work=str(stage / "work"))
    sleeper = [sys.executable, "-c", "import time; time.sleep(5)"]
    sealed = subprocess.Popen(isolation.wrap(sleeper, spec), cwd=work)
    unsealed = subprocess.Popen(isolation.wrap(sleeper), cwd=work)
    try:
        time.sleep(1.0)
        assert isolation.observe(sealed.pid, True, {}, spec) == BARE
        seen = isolation.observe(unsealed.pid, True, {}, spec)
        assert seen[:5] == BARE[:5]
        assert seen[5].startswith("uncontained: mounts (writable: /")
        assert seen[6].startswith("uncontained: devices")
    finally:
        for proc in (sealed, unsealed):
            proc.kill()
            proc.wait()
