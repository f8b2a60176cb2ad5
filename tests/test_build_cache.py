"""The build cache's fast paths with real compiles: the harness's precompiled torch/extension.h, binding
objects reused across candidates, and the size cap's LRU eviction (tools/worker/ccshim.py, tools/cache/builds.py).

The CUDA candidates compile without a GPU. They pass `-H` to the C++ compiler, so gcc itself says in the
build log whether it read the precompiled header (`! .../extension.h.gch`) or refused it (`x ...`); the flag
also gives this module a precompiled header of its own, which the last build garbles on purpose.

Those real CUDA builds (~6 min on 2 cores: five nvcc builds and a precompiled header) are in the long tier
(docs/testing.md). CI still builds through the same shim every run: its C++ candidates get a precompiled
header on a flag set's second build and reuse objects (every evaluator test after the first build), and the
eviction, pinning and lock tests here run on the CPU.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO
from tools import compile_kernel
from tools.cache import build_cache_dir
from tools.cache import builds as cache
from tools.problem import Problem, load_problem
from tools.results import BuildInfo, CompileResult, CompileStep
from tools.worker import ccshim

AXPY = (Path(__file__).parent / "candidates" / "cuda_axpy.py").read_text()
RUN = os.urandom(4).hex()  # fresh sources on every run


def candidate(binding: str, kernel: str, include_twice: bool = False) -> str:
    """cuda_axpy with tagged binding and kernel sources (same extension name, same flags)."""
    twice = "#include <torch/extension.h>\n" if include_twice else ""
    edits = {
        "#include <torch/extension.h>\n": f"#include <torch/extension.h>\n{twice}",
        'name="test_cuda_axpy"': 'name="test_cache_axpy"',
        'CPP_SRC = r"""\n': f'CPP_SRC = r"""\n// binding {RUN}-{binding}\n',
        'CUDA_SRC = r"""\n': f'CUDA_SRC = r"""\n// kernel {RUN}-{kernel}\n',
        'extra_cuda_cflags=["-O3"],': 'extra_cuda_cflags=["-O3"],\n    extra_cflags=["-H"],',
    }
    source = AXPY
    for old, new in edits.items():
        assert old in source
        source = source.replace(old, new)
    return source


def step(build: BuildInfo, output: str) -> CompileStep:
    return next(s for s in build.compiles if s.output == output)


def log_of(build: BuildInfo) -> str:
    return (build_cache_dir() / f"{build.name}-{build.key}" / "build.log").read_text()


def pch_line(log: str) -> str:
    return next((ln for ln in log.splitlines() if ln.endswith("torch/extension.h.gch")), "")


@pytest.fixture(scope="module")
def problem() -> Problem:
    return load_problem(REPO / "problems" / "selective_scan.yaml")


@pytest.fixture(scope="module")
def builds(problem: Problem, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, CompileResult]]:
    """Four candidates in order, as an agent would make them, in a cache of this module's own."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNEL_AGENT_CACHE", str(root))
        done = {}
        for label, binding, kernel in (
            ("a", "B0", "K0"),
            ("b", "B1", "K0"),
            ("c", "B1", "K1"),
            ("d", "B2", "K1"),
        ):
            result = compile_kernel(problem, candidate(binding, kernel, include_twice=label == "d"))
            assert result.status == "ok", result.message + result.output[-3000:]
            assert not result.cached
            done[label] = result
        yield done
    shutil.rmtree(root, ignore_errors=True)  # its precompiled header alone is ~0.8 GB


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.nvcc
def test_the_precompiled_header_is_built_on_a_flag_sets_second_build_and_then_used(builds) -> None:
    a, b, d = (builds[k].builds[0] for k in "abd")
    assert step(a, "main.o").pch == "first_sighting"
    assert pch_line(log_of(a)) == ""  # no PCH yet: gcc read the real header
    assert step(b, "main.o").pch == "built"
    # d's binding is new (compiled, not reused) and gcc itself reports reading the PCH ("!" = used); it
    # includes the header twice, as load_inline's implicit include plus a candidate's own one does
    assert step(d, "main.o").object == "miss"
    assert step(d, "main.o").pch == "used"
    line = pch_line(log_of(d))
    assert line.startswith("! "), line
    assert f"{os.sep}.pch{os.sep}" in line


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.nvcc
def test_an_unchanged_binding_or_kernel_is_not_compiled_again(builds) -> None:
    b, c, d = (builds[k].builds[0] for k in "bcd")
    assert step(b, "cuda.cuda.o").object == "hit"  # b changed only the binding: a's kernel object served
    assert step(c, "main.o").object == "hit"  # c changed only the kernel: b's binding object served
    assert step(c, "cuda.cuda.o").object == "miss"
    assert step(d, "cuda.cuda.o").object == "hit"
    # a served object still carries its ptxas report
    assert any("axpy_kernel" in k.name and k.registers for k in builds["c"].kernels)
    assert any("axpy_kernel" in k.name and k.registers for k in builds["d"].kernels)
    assert step(c, "main.o").seconds < 2


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.nvcc
def test_a_garbled_precompiled_header_falls_back_to_the_real_header(builds, problem: Problem) -> None:
    gch = Path(pch_line(log_of(builds["d"].builds[0]))[2:])
    gch.write_bytes(b"not a precompiled header" * 1000)
    result = compile_kernel(problem, candidate("B3-garbled", "K1"))
    assert result.status == "ok", result.message + result.output[-3000:]
    build = result.builds[0]
    assert step(build, "main.o").pch == "rejected"
    assert pch_line(log_of(build)).startswith("x ")  # gcc: "x" = found, invalid, not used
    assert (gch.parent.parent.parent / f".failed-{gch.parent.parent.name}").is_file()  # not rebuilt at once
    assert not gch.exists()  # the bad one is gone


def test_a_pch_being_built_elsewhere_is_not_waited_for(tmp_path: Path) -> None:
    entry = tmp_path / cache.PCH / "somekey"
    entry.parent.mkdir(parents=True)
    (entry.parent / ".seen-somekey").touch()
    fd = os.open(entry.parent / ".lock-somekey", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        start = time.perf_counter()
        assert ccshim.build_pch(["c++"], [], entry) == "busy"
        assert time.perf_counter() - start < 1
    finally:
        os.close(fd)
    assert not entry.exists()


def test_a_source_starting_with_the_header_wants_the_pch_unless_it_is_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "main.cpp"
    src.write_text("// binding\n#include <torch/extension.h>\nint f() { return 1; }\n")
    assert ccshim.wants_pch(str(src))
    monkeypatch.setenv("KERNEL_AGENT_PCH", "0")
    assert not ccshim.wants_pch(str(src))
    from tools.supervise.jobs import BUILD_SETTINGS

    assert "KERNEL_AGENT_PCH" in BUILD_SETTINGS  # the worker's build sees the user's setting


def test_publish_lets_the_first_of_two_racing_builds_win(tmp_path: Path) -> None:
    final = tmp_path / "entry"
    for n in (1, 2):
        tmp = tmp_path / f".tmp-{n}"
        tmp.mkdir()
        (tmp / "which").write_text(str(n))
    assert cache.publish(tmp_path / ".tmp-1", final)
    assert not cache.publish(tmp_path / ".tmp-2", final)
    assert (final / "which").read_text() == "1"
    assert not (tmp_path / ".tmp-2").exists()


# ---- eviction ------------------------------------------------------------------------------------------


def make_entry(path: Path, mb: float, age_s: float) -> Path:
    path.mkdir(parents=True)
    (path / "blob").write_bytes(os.urandom(int(mb * 2**20)))
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


def test_eviction_removes_least_recently_used_first_down_to_the_cap(tmp_path: Path) -> None:
    old = make_entry(tmp_path / "ext-old", 1, age_s=300)
    pch = make_entry(tmp_path / cache.PCH / "k1", 1, age_s=200)
    obj = make_entry(tmp_path / cache.OBJECTS / "k2", 1, age_s=100)
    new = make_entry(tmp_path / "ext-new", 1, age_s=0)
    cache.touch(old)  # a hit on the oldest: now the most recently used
    removed = cache.evict(tmp_path, limit=int(2.5 * 2**20))
    assert removed == [pch, obj]
    assert old.is_dir()
    assert new.is_dir()
    assert cache.evict(tmp_path, limit=int(2.5 * 2**20)) == []  # within the cap: nothing more


def test_eviction_skips_entries_in_use_and_builds_in_progress(tmp_path: Path) -> None:
    used = make_entry(tmp_path / "ext-used", 1, age_s=300)
    idle = make_entry(tmp_path / "ext-idle", 1, age_s=200)
    in_progress = make_entry(tmp_path / ".tmp" / "ext-building", 1, age_s=400)
    renaming_in = make_entry(tmp_path / cache.OBJECTS / ".tmp-k-1234", 1, age_s=400)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from tools.cache import builds as cache; "
         "cache.pin(Path(sys.argv[1]), for_process=True); print('pinned', flush=True); sys.stdin.read()",
         str(used)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "pinned"
        assert cache.evict(tmp_path, limit=1) == [idle]
        assert used.is_dir()
        assert in_progress.is_dir()
        assert renaming_in.is_dir()
    finally:
        holder.communicate("")
    assert cache.evict(tmp_path, limit=1) == [used]  # its user exited: the pin went with it


def test_the_cap_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_AGENT_CACHE_MAX_MB", "300")
    assert cache.max_bytes() == 300 * 2**20
    monkeypatch.delenv("KERNEL_AGENT_CACHE_MAX_MB")
    assert cache.max_bytes() == cache.DEFAULT_MAX_MB * 2**20


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.nvcc
def test_a_real_build_under_a_small_cap_evicts_older_builds_but_not_itself(
    builds, problem: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache seeded with copies of this module's real builds and objects, all older than the next build.
    seeded = tmp_path / "builds"
    seeded.mkdir()
    for result in builds.values():
        b = result.builds[0]
        shutil.copytree(build_cache_dir() / f"{b.name}-{b.key}", seeded / f"{b.name}-{b.key}")
    shutil.copytree(build_cache_dir() / cache.OBJECTS, seeded / cache.OBJECTS)
    for path in cache.entries(seeded):
        os.utime(path.path, (time.time() - 600, time.time() - 600))
    monkeypatch.setenv("KERNEL_AGENT_CACHE", str(tmp_path))
    monkeypatch.setenv("KERNEL_AGENT_CACHE_MAX_MB", "1")
    # a's binding with c's kernel: a new build whose objects are both seeded, so only the link runs
    fresh = compile_kernel(problem, candidate("B0", "K1"))
    assert fresh.status == "ok", fresh.message + fresh.output[-3000:]
    steps = fresh.builds[0].compiles
    assert {s.object for s in steps if s.kind != "link"} == {"hit"}
    assert [s.linker for s in steps if s.kind == "link"] == (["gold"] if shutil.which("ld.gold") else [])
    left = {e.path.name for e in cache.entries(seeded)}
    new = f"{fresh.builds[0].name}-{fresh.builds[0].key}"
    assert left == {new}  # everything older went; the new one stays


def test_eviction_sweeps_private_folders_of_dead_builders_only_when_old(tmp_path: Path) -> None:
    dead = make_entry(tmp_path / cache.PCH / ".tmp-k-dead", 1, age_s=2 * 3600)
    live = make_entry(tmp_path / cache.PCH / ".tmp-k-live", 1, age_s=60)
    cache.evict(tmp_path, limit=100 * 2**20)
    assert not dead.exists()
    assert live.is_dir()


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.nvcc
def test_the_shim_can_be_turned_off(
    problem: Problem, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KERNEL_AGENT_CACHE", str(tmp_path))
    monkeypatch.setenv("KERNEL_AGENT_COMPILER_SHIM", "0")
    result = compile_kernel(problem, candidate("B0-plain", "K0-plain"))
    assert result.status == "ok", result.message + result.output[-3000:]
    assert result.builds[0].compiles == []  # torch's plain build: no shim records, nothing reused
    assert not (tmp_path / "builds" / cache.OBJECTS).exists()
