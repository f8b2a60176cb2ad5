"""Builds are published only by trusted code (issue 52): a candidate cannot write into the build cache, a
run folder, the problem folder or the repo, and cannot replace another candidate's cached extension (its
.so, its folder, its pin, the cache's lock and object folders).

The candidate tries, at import and again in forward, to write, rename, chmod and delete in each place, once
through Python (the runtime guard refuses and flags it: `forbidden_file_access`) and once through libc,
which no audit hook sees: there the mounts refuse (EROFS) everywhere but the build cache, which the worker
sees through an overlay onto its staging folder; what it changed there is dropped and flagged
(`cache_tampering`). Afterwards every file the harness keeps is as it was, byte for byte and mode for mode.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adversarial.candidates import with_module_code
from tests.helpers import REPO, TESTS
from tests.helpers.containment import BOTH_PATHS
from tools import benchmark
from tools.cache import build_cache_dir, builds, staged
from tools.problem import Problem, load_problem
from tools.results import BenchResult
from tools.supervise import WarmPool, isolation

EROFS = 30
namespaces = pytest.mark.skipif(
    isolation.mode() != isolation.PIDNS or isolation.cold_support().netns != "",
    reason="this machine refuses PID or network namespaces (needs root or user namespaces)",
)

ATTEMPTS = r"""
import ctypes, json, os
_libc = ctypes.CDLL(None, use_errno=True)
def _native(op, *paths):
    args = [p.encode() for p in paths]
    if op == "write":
        fd = _libc.open(args[0], 0o1101, 0o644)  # O_WRONLY | O_CREAT | O_TRUNC
        rc = -1 if fd < 0 else _libc.write(fd, b"poison", 6)
        _libc.close(fd) if fd >= 0 else None
    elif op == "rename":
        rc = _libc.rename(args[0], args[1])
    elif op == "chmod":
        rc = _libc.chmod(args[0], 0o777)
    else:
        rc = _libc.unlink(args[0]) if op == "delete" else _libc.rmdir(args[0])
    return 0 if rc >= 0 else ctypes.get_errno()
def _python(op, *paths):
    try:
        if op == "write":
            with open(paths[0], "w") as fh:
                fh.write("poison")
        elif op == "rename":
            os.rename(paths[0], paths[1])
        elif op == "chmod":
            os.chmod(paths[0], 0o777)
        elif op == "delete":
            os.remove(paths[0])
        else:
            os.rmdir(paths[0])
    except OSError as exc:
        return exc.errno or -1
    return 0
def _attack(where):
    seen = {}
    for label, (op, *paths) in TARGETS.items():
        seen[f"{label}:native"] = _native(op, *paths)
        seen[f"{label}:python"] = _python(op, *paths)
    print(f"ATTEMPTS-{where} " + json.dumps(seen), flush=True)
_attack("import")
"""


def attacker(targets: dict[str, list[str]]) -> str:
    """The baseline, trying every target (label: [op, path, (new path)]) at import and in forward."""
    src = with_module_code(f"TARGETS = {targets!r}", *ATTEMPTS.strip("\n").splitlines())
    head = "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
    assert head in src, "baseline.py changed: update tests/test_candidate_writes.py"
    return src.replace(head, head + '        _attack("forward")\n', 1)


def snapshot(*roots: Path) -> dict[str, tuple[str, int]]:
    """Every file and folder under `roots`: its content's hash (files) and its mode. Pins are left out: the
    harness itself opens them."""
    seen = {}
    for root in roots:
        for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
            if path.name in (builds.PIN, ".evict.lock") or ".tmp" in path.parts or ".trash" in path.parts:
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            seen[str(path)] = (digest, path.lstat().st_mode)
    return seen


def other_candidates_build(cache: Path) -> Path:
    """A published build of another candidate (its folder, its .so, its done marker) and a compiled object."""
    entry = cache / "other_ext-0123456789abcdef0123"
    if not entry.is_dir():
        tmp = cache / f".other-{os.getpid()}"
        tmp.mkdir(parents=True)
        (tmp / "other_ext.so").write_bytes(b"\x7fELF honest")
        (tmp / staged.DONE_MARKER).write_text(json.dumps({"key": "0123456789abcdef0123"}))
        builds.publish(tmp, entry)
    obj = cache / builds.OBJECTS / "other_obj-0123456789"
    obj.mkdir(parents=True, exist_ok=True)
    (obj / "main.o").write_bytes(b"object")
    (cache / ".evict.lock").touch()
    return entry


@pytest.fixture
def places(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A run folder (its log and best.py), a problem folder (its spec and reference), and a file in the repo."""
    run = tmp_path / "runs" / "20261206-run"
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text('{"event": "run_start"}\n')
    (run / "best.py").write_text("# the best kernel\n")
    problem = tmp_path / "problem"
    problem.mkdir()
    spec = (TESTS / "problems" / "scan_tiny.yaml").read_text()
    (problem / "reference.py").write_text((REPO / "problems" / "selective_scan" / "reference.py").read_text())
    (problem / "scan_tiny.yaml").write_text(
        spec.replace("../../problems/selective_scan/reference.py", "reference.py")
    )
    repo_file = REPO / f".candidate-writes-probe-{os.getpid()}"
    repo_file.write_text("the repo's own file\n")
    yield {"run": run, "problem": problem, "repo_file": repo_file}
    repo_file.unlink(missing_ok=True)


def targets_in(places: dict[str, Path], other: Path) -> dict[str, list[str]]:
    run, problem, repo_file = places["run"], places["problem"], places["repo_file"]
    cache = other.parent
    return {
        "run_log": ["write", str(run / "events.jsonl")],
        "run_best": ["rename", str(run / "best.py"), str(run / "best-old.py")],
        "run_folder": ["chmod", str(run)],
        "problem_spec": ["write", str(problem / "scan_tiny.yaml")],
        "problem_reference": ["delete", str(problem / "reference.py")],
        "repo_file": ["write", str(repo_file)],
        "repo_rename": ["rename", str(repo_file), str(repo_file) + ".moved"],
        "other_so": ["write", str(other / "other_ext.so")],
        "other_marker": ["delete", str(other / staged.DONE_MARKER)],
        "other_chmod": ["chmod", str(other / "other_ext.so")],
        "other_folder": ["rename", str(other), str(cache / "other_ext-stolen")],
        "evict_lock": ["write", str(cache / ".evict.lock")],
        "objects": ["delete", str(cache / builds.OBJECTS / "other_obj-0123456789" / "main.o")],
    }


def _attempts(result: BenchResult) -> dict[str, int]:
    line = next(x for x in result.output.splitlines() if x.startswith("ATTEMPTS-import "))
    return json.loads(line.removeprefix("ATTEMPTS-import "))


@namespaces
@pytest.mark.parametrize("path", BOTH_PATHS)
def test_a_candidate_cannot_alter_what_the_harness_keeps(
    places: dict[str, Path], warm: WarmPool, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = build_cache_dir()
    other = other_candidates_build(cache)
    problem = load_problem(places["problem"] / "scan_tiny.yaml")
    kept = [places["run"], places["problem"], places["repo_file"], cache]
    before = snapshot(*kept)
    code = attacker(targets_in(places, other))
    if path == "cold":
        monkeypatch.setenv("KERNEL_AGENT_WARM", "0")
        result = benchmark(problem, code, prefetch_next=False)
    else:
        result = benchmark(problem, code, pool=warm, prefetch_next=False)
    assert result.workers == path

    seen = _attempts(result)
    refused = {
        k: v
        for k, v in seen.items()
        if k.endswith(":native") and not k.startswith(("other", "evict", "objects"))
    }
    assert refused == dict.fromkeys(refused, EROFS)  # the mounts: read-only everywhere but its own job
    assert all(v != 0 for k, v in seen.items() if k.endswith(":python"))  # the guard refused first
    assert seen["other_so:native"] == 0  # ... the cache's overlay took it, into the job's staging only
    flags = {f.name: f.message for f in result.flag_details}
    assert "forbidden_file_access" in flags
    assert "cache_tampering" in flags, result.flag_details
    for name in ("other_ext-0123456789abcdef0123", ".evict.lock", "other_obj-0123456789"):
        assert name in flags["cache_tampering"]
    assert result.status == "incorrect"
    assert result.compile is not None
    assert "cache_tampering" in result.compile.message  # what the compile tool would say too
    assert snapshot(*kept) == before  # nothing the harness keeps was altered
    assert not (cache / "other_ext-stolen").exists()
    assert (other / "other_ext.so").read_bytes() == b"\x7fELF honest"


@namespaces
def test_an_honest_candidate_that_hits_the_cache_is_not_tampering(tiny: Problem, warm: WarmPool) -> None:
    """Its import pins and touches the cached build it loads (overlayfs copies the folder and the pin up):
    a use, not a change."""
    from tests.candidates.scan_variants import baseline

    first = benchmark(tiny, baseline(), pool=warm, prefetch_next=False)
    again = benchmark(tiny, baseline(), pool=warm, prefetch_next=False)
    assert first.status == again.status == "ok", (first.message, again.message)
    assert again.compile is not None
    assert again.compile.cached
    assert again.flags == []


# --- the pieces, without a build -------------------------------------------------------------------------


def test_publish_sees_what_a_worker_changed_in_existing_entries(tmp_path: Path) -> None:
    """Staging as overlayfs leaves it: copied-up files, whiteouts (0/0 character devices) for deletions."""
    cache, upper = tmp_path / "cache", tmp_path / "upper"
    for name in ("used-k1", "written-k2", "gone-k3", "chmod-k4"):
        (cache / name).mkdir(parents=True)
        (cache / name / "lib.so").write_bytes(b"so")
    (cache / builds.OBJECTS / "obj1").mkdir(parents=True)
    (cache / ".evict.lock").write_text("")
    (upper / "used-k1").mkdir(parents=True)
    (upper / "used-k1" / builds.PIN).write_text("")
    (upper / "written-k2").mkdir()
    (upper / "written-k2" / "lib.so").write_bytes(b"evil")
    os.mknod(upper / "gone-k3", 0o600 | 0o020000, 0)  # S_IFCHR, device 0/0
    (upper / "chmod-k4").mkdir(mode=0o700)  # a chmod of the folder copies up the folder alone
    (upper / "chmod-k4").chmod(0o700)
    (upper / builds.OBJECTS).mkdir()
    os.mknod(upper / builds.OBJECTS / "obj1", 0o600 | 0o020000, 0)
    (upper / ".evict.lock").write_text("x")

    done = staged.review_staged(upper, cache)

    assert done.used == ["used-k1"]
    assert sorted(done.tampered) == [
        ".evict.lock: written",
        "chmod-k4: (permissions)",
        "gone-k3: deleted or moved",
        "obj1: deleted or moved",
        "written-k2: lib.so",
    ]
    assert (cache / "written-k2" / "lib.so").read_bytes() == b"so"
