"""The compiler torch's ninja runs during the harness's builds: an object cache and a precompiled header.

`tools.worker.build` writes two tiny shell scripts that exec this file, and points torch at them (CXX for the C++
compiler, PYTORCH_NVCC for nvcc) for the duration of one build, so ninja still drives the build:

  ccshim.py KIND CACHE TOOLCHAIN REAL_COMPILER ARGS...

A single-source compile (`-c SRC -o OUT`) is looked up in the object cache (`CACHE/.objects/<key>`, key:
the real compiler, torch/CUDA/Python versions and installs, the arguments with the build folder's paths
taken out, the source's bytes; the headers its depfile lists, which for gcc's -MMD are those outside the
-isystem dirs, are checked by size and mtime). A hit
copies the object and replays the compiler's output (ptxas reports included). A C++ source whose first
line includes <torch/extension.h> is compiled against the harness's precompiled header
(`CACHE/.pch/<key>/torch/extension.h.gch`, found by gcc through `-I` before the real header), built once
per flag set (on its second sighting: a one-off flag set would not repay it) by whoever gets its lock first.
A shared-library link uses gold where it exists, else the default linker. Anything unexpected, and every
other invocation (version probes), runs the real compiler unchanged: the shim can make a build faster,
never break one.
Each compile appends one JSON line to `kagent_compiles.jsonl` beside its output (the build's record), and
one to `kagent_started.jsonl` as it starts, which the worker watches to report the build's progress.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.cache import builds as cache  # noqa: E402  (the harness root is put on the path above: this runs as a script)

VERSION = "1"
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".cu")
PCH_HEADER = "torch/extension.h"
PCH_ENV = "KERNEL_AGENT_PCH"  # "0": no precompiled header
PCH_MIN_FREE = 3 << 30  # a torch/extension.h PCH is ~0.8 GB: never build one onto a nearly full disk
PCH_MIN_CAP = 1536 << 20  # nor into a cache capped so small that it would evict everything else
RECORDS = "kagent_compiles.jsonl"
STARTED = "kagent_started.jsonl"  # one line per compile or link as it starts: what the build is doing now
FAILED_RETRY_S = 3600  # a failed PCH build (full disk, a killed compiler) is tried again after an hour
# Compiler environment that changes what a compile produces.
KEY_ENV = ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")


class Compile:
    """One `-c SRC -o OUT` invocation, parsed; None from `parse` for anything else."""

    def __init__(self, args: list[str], src: str, out: str, depfile: str | None) -> None:
        self.args, self.src, self.out, self.depfile = args, src, out, depfile

    @staticmethod
    def parse(args: list[str]) -> Compile | None:
        if "-c" not in args or args.count("-o") != 1:
            return None
        out = _value_after(args, "-o")
        depfile = _value_after(args, "-MF") or _value_after(args, "--dependency-output")
        sources = [a for a in args if a.endswith(SOURCE_SUFFIXES) and Path(a).is_file()]
        if out is None or len(sources) != 1:
            return None
        return Compile(args, sources[0], out, depfile)

    def normalized(self) -> list[str]:
        """The arguments without the paths that differ per build folder."""
        swap = {self.out: "@out", self.src: "@src"}
        if self.depfile:
            swap[self.depfile] = "@dep"
        return [swap.get(a, a) for a in self.args]


def _value_after(args: list[str], flag: str) -> str | None:
    i = args.index(flag) if flag in args else -1
    return args[i + 1] if 0 <= i < len(args) - 1 else None


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else json.dumps(p, sort_keys=True).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def compiler_id(real: list[str]) -> list[object]:
    path = Path(shutil.which(real[0]) or real[0]).resolve()
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns, real[1:]]


def _env_key() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in KEY_ENV}


# ---- the object cache ----------------------------------------------------------------------------------


def _dependencies(depfile: str | None, skip: tuple[str, ...]) -> list[str]:
    """Headers from a make-style depfile, minus the source and the harness's own files."""
    if not depfile or not Path(depfile).is_file():
        return []
    text = Path(depfile).read_text(errors="replace").replace("\\\n", " ")
    _, _, deps = text.partition(": ")
    paths = deps.replace("\\ ", "\0").split()
    return [p.replace("\0", " ") for p in paths if not p.startswith(skip)]


def _stamps(paths: list[str]) -> list[list[object]]:
    stamps = []
    for p in paths:
        st = Path(p).stat()
        stamps.append([p, st.st_size, st.st_mtime_ns])
    return stamps


def _still_valid(entry: Path) -> bool:
    try:
        recorded: list[list[object]] = json.loads((entry / "deps.json").read_text())
        return recorded == _stamps([str(r[0]) for r in recorded])
    except (OSError, ValueError):
        return False


def object_hit(entry: Path, c: Compile) -> str | None:
    """Copy a cached object into place; its compiler output, or None on a miss."""
    with cache.pinned(entry) as present:
        if not present or not (entry / "obj").is_file() or not _still_valid(entry):
            return None
        tmp = Path(f"{c.out}.{uuid.uuid4().hex[:8]}.tmp")
        shutil.copyfile(entry / "obj", tmp)
        tmp.replace(c.out)
        output = (entry / "output.txt").read_text(errors="replace")
    if c.depfile:  # ninja reads (and drops) the depfile; the build folder is never rebuilt in place
        Path(c.depfile).write_text(f"{c.out}: {c.src}\n")
    cache.touch(entry)
    return output


def object_store(entry: Path, c: Compile, output: str, skip: tuple[str, ...]) -> None:
    if entry.exists():
        return
    tmp = entry.parent / f".tmp-{entry.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        shutil.copyfile(c.out, tmp / "obj")
        (tmp / "output.txt").write_text(output)
        (tmp / "deps.json").write_text(json.dumps(_stamps(_dependencies(c.depfile, skip))))
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    cache.publish(tmp, entry)


# ---- the precompiled header ----------------------------------------------------------------------------


def wants_pch(src: str) -> bool:
    """gcc uses a PCH only for the first include, before any code: the source must start with it.
    KERNEL_AGENT_PCH=0 turns the precompiled header off (a disk without ~1 GB per flag set to spare, or a
    flag set seen only twice, as the tests' ASan builds, where building it costs more than it saves)."""
    if os.environ.get(PCH_ENV, "1") == "0":
        return False
    with open(src, errors="replace") as f:
        for line in f:
            s = line.strip()
            if not s or s.startswith("//"):
                continue
            return s.replace(" ", "") == f"#include<{PCH_HEADER}>"
    return False


def pch_flags(c: Compile) -> list[str]:
    """The compile's flags that shape the header: everything but outputs, the source, the extension name."""
    drop = {c.src, c.out, c.depfile}
    flags, skip = [], False
    for a in c.args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF"):
            skip = True
            continue
        if a in drop or a in ("-c", "-MMD", "-MD") or a.startswith("-DTORCH_EXTENSION_NAME="):
            continue
        flags.append(a)
    return flags


def find_header(flags: list[str]) -> Path | None:
    """The torch/extension.h the compile would include: gcc searches -I dirs, then -isystem dirs, in order."""
    found: dict[str, list[str]] = {"-I": [], "-isystem": []}
    for i, a in enumerate(flags):
        for opt, dirs in found.items():
            if a == opt and i + 1 < len(flags):
                dirs.append(flags[i + 1])
            elif a.startswith(opt) and len(a) > len(opt) and not (opt == "-I" and a.startswith("-isystem")):
                dirs.append(a[len(opt) :])
    for d in found["-I"] + found["-isystem"]:
        if (Path(d) / PCH_HEADER).is_file():
            return (Path(d) / PCH_HEADER).resolve()
    return None


def _room_for_pch(root: Path) -> bool:
    cap = cache.max_bytes()
    if 0 < cap < PCH_MIN_CAP:
        return False
    return shutil.disk_usage(root).free >= PCH_MIN_FREE


def build_pch(real: list[str], flags: list[str], entry: Path) -> str:
    """Build `entry` unless it exists or is being built; returns what happened."""
    root = entry.parent
    root.mkdir(parents=True, exist_ok=True)
    failed, seen = root / f".failed-{entry.name}", root / f".seen-{entry.name}"
    if failed.exists() and time.time() - failed.stat().st_mtime < FAILED_RETRY_S:
        return "failed_before"
    if not seen.exists():  # a one-off flag set would pay for a PCH it never uses: wait for a second build
        seen.touch()
        return "first_sighting"
    if not _room_for_pch(root):
        return "no_room"
    lock = os.open(root / f".lock-{entry.name}", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return "busy"  # another build is making it: compile without it rather than wait
        if entry.is_dir():
            return "ready"
        for stale in root.glob(f".tmp-{entry.name}-*"):  # a builder killed mid-way (we hold its lock now)
            shutil.rmtree(stale, ignore_errors=True)
        real_header = find_header(flags)
        if real_header is None:
            return "no_header"
        tmp = root / f".tmp-{entry.name}-{uuid.uuid4().hex[:8]}"
        (tmp / "torch").mkdir(parents=True)
        # gcc reads the header beside the .gch when the source includes it again (its include guard) or when
        # it rejects the .gch: the real one must be there.
        (tmp / PCH_HEADER).symlink_to(real_header)
        header = tmp / "pch.h"
        header.write_text(f"#include <{PCH_HEADER}>\n")
        cmd = [*real, *flags, "-x", "c++-header", str(header), "-o", str(tmp / f"{PCH_HEADER}.gch")]
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            failed.write_text(shlex.join(cmd) + "\n" + (done.stdout + done.stderr)[-4000:])
            return "build_failed"
        return "built" if cache.publish(tmp, entry) else "ready"
    finally:
        os.close(lock)


def pch_rejected(output: str, entry: Path) -> bool:
    return str(entry) in output and ("not used" in output or "invalid" in output)


# ---- the shim ------------------------------------------------------------------------------------------


def record(c: Compile, **fields: object) -> None:
    with contextlib.suppress(OSError), open(Path(c.out).parent / RECORDS, "a") as f:
        f.write(json.dumps({"output": Path(c.out).name, **fields}) + "\n")


def record_start(out: str, kind: str) -> None:
    """Say what starts now (the worker reports it while the build runs); a build never fails for it."""
    with contextlib.suppress(OSError), open(Path(out).parent / STARTED, "a") as f:
        f.write(json.dumps({"output": Path(out).name, "kind": kind}) + "\n")


def compile_(kind: str, root: Path, toolchain: str, real: list[str], c: Compile) -> int:
    start = time.perf_counter()
    skip = (str(Path(c.src).absolute().parent) + os.sep, str(root) + os.sep)
    key = _digest(
        VERSION, kind, compiler_id(real), toolchain, _env_key(), c.normalized(), Path(c.src).read_bytes()
    )
    entry = root / cache.OBJECTS / key
    output = object_hit(entry, c)
    if output is not None:
        sys.stdout.write(output)
        record(c, kind=kind, object="hit", pch=None, seconds=round(time.perf_counter() - start, 3))
        return 0
    args, pch, pch_s = list(c.args), None, 0.0
    pch_entry: Path | None = None
    pch_fd: int | None = None
    if kind == "cxx" and wants_pch(c.src):
        flags = pch_flags(c)
        pch_entry = root / cache.PCH / _digest(VERSION, compiler_id(real), toolchain, _env_key(), flags)
        if not pch_entry.is_dir():
            t = time.perf_counter()
            pch = build_pch(real, flags, pch_entry)
            pch_s = time.perf_counter() - t
        pch_fd = cache.pin(pch_entry) if pch_entry.is_dir() else None
        if pch_fd is not None:
            args = ["-I", str(pch_entry), "-Winvalid-pch", *args]
            pch = "used" if pch in (None, "ready") else pch
            cache.touch(pch_entry)
    try:
        done = subprocess.run([*real, *args], capture_output=True, text=True, errors="replace")
    finally:
        if pch_fd is not None:
            os.close(pch_fd)
    output = done.stdout + done.stderr
    sys.stdout.write(output)
    if pch_entry is not None and pch_fd is not None and pch_rejected(output, pch_entry):
        pch = "rejected"  # gcc read the real header instead; drop this one, rebuild it after a while
        with contextlib.suppress(OSError):
            (pch_entry.parent / f".failed-{pch_entry.name}").write_text(output[-4000:])
            cache.remove(pch_entry, root)
    if done.returncode == 0:
        object_store(entry, c, output, skip)
    seconds = round(time.perf_counter() - start, 3)
    record(
        c, kind=kind, object="miss", pch=pch, pch_build_s=round(pch_s, 3), seconds=seconds, rc=done.returncode
    )
    return done.returncode


def link_with_gold(real: list[str], args: list[str]) -> int | None:
    """Link a shared library with gold where it exists (half of ld.bfd's time against libtorch); None to
    fall back to the plain link (gold missing or failing)."""
    if "-shared" not in args or any(a.startswith("-fuse-ld") for a in args) or not shutil.which("ld.gold"):
        return None
    start = time.perf_counter()
    done = subprocess.run([*real, "-fuse-ld=gold", *args], capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        return None
    sys.stdout.write(done.stdout + done.stderr)
    out = _value_after(args, "-o") or "a.out"
    with contextlib.suppress(OSError), open(Path(out).parent / RECORDS, "a") as f:
        f.write(json.dumps({"output": Path(out).name, "kind": "link", "linker": "gold",
                            "seconds": round(time.perf_counter() - start, 3)}) + "\n")  # fmt: skip
    return 0


def main(argv: list[str]) -> int:
    kind, root, toolchain, real_cmd, *args = argv
    real = shlex.split(real_cmd)
    c = Compile.parse(args)
    if c is None and "-shared" in args:
        record_start(_value_after(args, "-o") or "a.out", "link")
    if c is None and kind == "cxx" and link_with_gold(real, args) == 0:
        return 0
    if c is None:
        os.execvp(real[0], [*real, *args])
    record_start(c.out, kind)
    try:
        return compile_(kind, Path(root), toolchain, real, c)
    except Exception as exc:  # a bug here must not fail the candidate's build: compile the plain way
        sys.stderr.write(f"kernel-agent compiler shim: {type(exc).__name__}: {exc}; compiling without it\n")
        os.execvp(real[0], [*real, *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
