"""The harness's `load_inline`: a content-keyed build cache, ptxas reports, errors in the candidate's lines.

Installed in the candidate's process before its module is imported. The build directory is keyed on
load_inline's real arguments (sources, flags, includes) plus torch/CUDA/Python versions and the target
arch, so a Python-only edit of a candidate is a cache hit. In a candidate's worker a miss is built by the
harness's trusted builder (tools/worker/build_client.py asks; tools/supervise/builder.py, which runs
`_build_fresh` below in a contained process of its own), and the worker loads what it published; elsewhere
(benches, in-process tests) it is built here. A build happens in a private temporary folder that is renamed
into the cache only on success: a killed build never leaves a lock in the cache. torch's ninja runs the
build, through the harness's compiler shim (tools/worker/ccshim.py: reused objects, a precompiled
torch/extension.h); afterwards the cache is trimmed to its cap (tools/cache/builds.py). What the build's
log says (errors, ptxas resources) is read by tools/worker/buildlog.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.utils.cpp_extension as cpp_extension
from pydantic import ValidationError

from tools import orders, wire
from tools.cache import builds as cache
from tools.results import BuildInfo, CompileStep, Diagnostic, KernelResources
from tools.worker import guard
from tools.worker.build_client import loading_root
from tools.worker.build_progress import watched
from tools.worker.buildlog import as_list, parse_errors, parse_ptxas
from tools.worker.ccshim import RECORDS
from tools.worker.instrument import ASAN_CFLAGS, ASAN_LDFLAGS, SANITIZE_BUILD_ENV, kernel_names

_ORIGINAL_LOAD_INLINE: Callable[..., Any] = cpp_extension.load_inline
_SIGNATURE = inspect.signature(_ORIGINAL_LOAD_INLINE)
DONE_MARKER = "kernel_agent_build.json"
LOG_NAME = "build.log"
SHIM = Path(__file__).resolve().parent / "ccshim.py"


class BuildRegistry:
    """What this process built: the worker reports it, and the kernel-launch check reads kernel names."""

    def __init__(self) -> None:
        self.builds: list[BuildInfo] = []
        self.errors: list[Diagnostic] = []
        self.own_kernel_names: set[str] = set()
        self.failed = False
        self.extension_calls = 0
        self.profiling = False  # while the CPU usage check records a call (tools/worker/usage.py)


REGISTRY = BuildRegistry()
OWN_SPAN = "kernel_agent::own::"


def cuda_arch() -> str:
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    return "9.0"


def build_key(args: dict[str, Any]) -> str:
    relevant = {
        k: args.get(k)
        for k in (
            "name",
            "cpp_sources",
            "cuda_sources",
            "functions",
            "extra_cflags",
            "extra_cuda_cflags",
            "extra_ldflags",
            "extra_include_paths",
            "with_cuda",
            "is_python_module",
            "with_pytorch_error_handling",
            "no_implicit_headers",
        )
    }
    relevant["_env"] = [torch.__version__, torch.version.cuda, cuda_arch(), sys.version_info[:2]]
    blob = json.dumps(relevant, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


@contextlib.contextmanager
def _stdout_to(path: Path) -> Iterator[None]:
    """ninja's output goes to fd 1 under verbose=True; send it to the build log instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


class CountingModule:
    """Wraps an extension module so calls into it are counted (the CPU problems' kernel-launch evidence)."""

    def __init__(self, module: Any) -> None:
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if callable(attr) and not name.startswith("__"):

            def counted(*args: Any, **kwargs: Any) -> Any:
                REGISTRY.extension_calls += 1
                if REGISTRY.profiling:  # the call's span, for the CPU's own-code time
                    with torch.profiler.record_function(f"{OWN_SPAN}{name}"):
                        return attr(*args, **kwargs)
                return attr(*args, **kwargs)

            return counted
        return attr


def ninja_wrapper(real: str, limit_kb: int) -> str:
    """A `ninja` that caps the address space of itself and every compiler it starts (inherited rlimit):
    set around the build only, since the worker itself maps far more virtual memory (torch, CUDA)."""
    return f'#!/bin/sh\nulimit -v {limit_kb} || exit 1\nexec "{real}" "$@"\n'


@contextlib.contextmanager
def uninstrumented_children() -> Iterator[None]:
    """The ASan runtime preloaded into a sanitized worker stays out of its build's processes: compilers are
    not instrumented, and under the build's `ulimit -v` ASan could not even map its shadow memory."""
    saved = os.environ.pop("LD_PRELOAD", None) if os.environ.get(SANITIZE_BUILD_ENV) else None
    try:
        yield
    finally:
        if saved is not None:
            os.environ["LD_PRELOAD"] = saved


@contextlib.contextmanager
def compile_limits() -> Iterator[None]:
    """Put the memory-capped ninja first on PATH for the duration of one build."""
    gb = float(os.environ.get("KERNEL_AGENT_COMPILE_MEMORY_GB") or 0)
    real = shutil.which("ninja")
    if gb <= 0 or real is None:
        yield
        return
    bindir = Path(tempfile.mkdtemp(prefix="ninja-limit-"))
    script = bindir / "ninja"
    script.write_text(ninja_wrapper(real, int(gb * (1 << 20))))
    script.chmod(0o755)
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{bindir}{os.pathsep}{saved}"
    try:
        yield
    finally:
        os.environ["PATH"] = saved
        shutil.rmtree(bindir, ignore_errors=True)


def toolchain() -> str:
    """What the shim's cache keys need beyond a compile's arguments: the installs behind the -isystem dirs."""
    nvcc = Path(cpp_extension.CUDA_HOME or "/nonexistent") / "bin" / "nvcc"
    stamp = [nvcc.stat().st_size, nvcc.stat().st_mtime_ns] if nvcc.is_file() else None
    return json.dumps([torch.__version__, torch.version.cuda, torch.__file__, sys.version, str(nvcc), stamp])


def _shim_script(kind: str, root: Path, real: str) -> str:
    """Compiles and links go to the shim; anything else (torch's version probes) straight to the compiler."""
    shim = " ".join(
        shlex.quote(a) for a in [sys.executable, "-S", str(SHIM), kind, str(root), toolchain(), real]
    )
    compiler = " ".join(shlex.quote(a) for a in shlex.split(real))
    return (
        f'#!/bin/sh\ncase " $* " in *" -c "*|*" -shared "*) exec {shim} "$@" ;; esac\nexec {compiler} "$@"\n'
    )


@contextlib.contextmanager
def compiler_shims(root: Path, with_cuda: bool) -> Iterator[None]:
    """Point torch's build at the compiler shim (CXX, and PYTORCH_NVCC for CUDA) for one build.

    The C++ shim is named g++ so torch's compiler check accepts it by name (it execs the real compiler).
    KERNEL_AGENT_COMPILER_SHIM=0 turns it off (torch's plain build, as before the shim existed)."""
    if os.environ.get("KERNEL_AGENT_COMPILER_SHIM", "1") == "0":
        yield
        return
    bindir = Path(tempfile.mkdtemp(prefix="kagent-shim-"))
    env = {"CXX": str(bindir / "g++"), "TORCH_NO_COMPILER_WRAPPER": "1"}
    (bindir / "g++").write_text(_shim_script("cxx", root, os.environ.get("CXX", "c++")))
    if with_cuda and cpp_extension.CUDA_HOME:
        real_nvcc = os.environ.get("PYTORCH_NVCC") or shlex.quote(
            str(Path(cpp_extension.CUDA_HOME) / "bin" / "nvcc")
        )
        (bindir / "nvcc").write_text(_shim_script("nvcc", root, real_nvcc))
        env["PYTORCH_NVCC"] = str(bindir / "nvcc")
    for script in bindir.iterdir():
        script.chmod(0o755)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(bindir, ignore_errors=True)


def compile_steps(build_dir: Path) -> list[CompileStep]:
    path = build_dir / RECORDS
    if not path.is_file():
        return []
    steps = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            steps.append(CompileStep.model_validate_json(line))
    return steps


# Where a fresh build's progress goes (the worker's channel), if anywhere: set by `install`.
PROGRESS: wire.BuildProgress | None = None
# Who builds what the cache lacks, where not this process: set by `install` (tools/worker/build_client.py).
Builder = Callable[[wire.BuildCall], orders.BuildAnswer]
BUILDER: Builder | None = None


def harness_load_inline(*args: Any, **kwargs: Any) -> Any:
    """The candidate's load_inline. In a candidate's worker it spawns and writes nothing (the harness builds),
    so the guard grants it nothing; built here (no `BUILDER`), it may spawn compilers and write the cache."""
    if BUILDER is not None:
        return _load_inline(*args, **kwargs)
    with guard.building():
        return _load_inline(*args, **kwargs)


def normalised_call(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """load_inline's arguments as the harness builds them: sources as lists, no torch PCH, ptxas reports on,
    a sanitizer's flags appended; validated as a `wire.BuildCall` (what the key and the builder see)."""
    bound = _SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    call = dict(bound.arguments)
    call["cpp_sources"] = as_list(call["cpp_sources"])
    call["cuda_sources"] = as_list(call.get("cuda_sources")) or None
    if call["cuda_sources"]:
        flags = list(call.get("extra_cuda_cflags") or [])
        if not any("ptxas" in f and "-v" in f for f in flags):
            flags.append("-Xptxas=-v")
        call["extra_cuda_cflags"] = flags
    if os.environ.get(SANITIZE_BUILD_ENV) == "asan" and not call["cuda_sources"]:
        call["extra_cflags"] = [*as_list(call.get("extra_cflags")), *ASAN_CFLAGS]
        call["extra_ldflags"] = [*as_list(call.get("extra_ldflags")), *ASAN_LDFLAGS]
    try:
        wanted = wire.BuildCall.model_validate({k: call[k] for k in wire.BuildCall.model_fields})
    except ValidationError as exc:
        raise TypeError(f"load_inline: arguments the harness cannot build: {exc}") from None
    # torch's PCH lives in its install folder: shared and unsafe in parallel (the shim has its own)
    return {**call, **wanted.model_dump(), "use_pch": False}


def _load_inline(*args: Any, **kwargs: Any) -> Any:
    call = normalised_call(*args, **kwargs)
    for src in call["cuda_sources"] or []:
        REGISTRY.own_kernel_names.update(kernel_names(src))
    key = build_key(call)
    cache_dir = Path(
        os.environ.get("KERNEL_AGENT_BUILD_CACHE") or Path.home() / ".cache" / "kernel-agent" / "builds"
    )
    start = time.perf_counter()
    if BUILDER is not None:  # a candidate's worker: the harness builds, this process only loads
        return _load_or_ask(call, key, cache_dir, start, BUILDER)
    final = cache_dir / f"{call['name']}-{key}"
    # Pinned for this process's life: eviction skips it. Pinned before the check, so it cannot go in between.
    if cache.pin(final, for_process=True) is not None and (final / DONE_MARKER).is_file():
        return load_cached(call, key, final, start)
    return _build_fresh(call, key, cache_dir, final, start)


def load_cached(call: dict[str, Any], key: str, final: Path, start: float, used: Path | None = None) -> Any:
    """Import a published build; its record says it came from the cache. `used`: where its use is marked,
    if not `final` (a sealed worker's overlay: the harness marks the real entry from its staging)."""
    module = cpp_extension._import_module_from_library(call["name"], str(final), call["is_python_module"])
    with guard.building():  # a use, for the cache's LRU order (a worker's: copied up, marked by the harness)
        cache.touch(used or final)
    meta = json.loads((final / DONE_MARKER).read_text())
    kernels = [KernelResources.model_validate(k) for k in meta.get("kernels", [])]
    REGISTRY.builds.append(
        BuildInfo(
            name=call["name"],
            key=key,
            cached=True,
            seconds=time.perf_counter() - start,
            ok=True,
            kernels=kernels,
        )
    )
    return CountingModule(module) if call["is_python_module"] else module


def _load_or_ask(call: dict[str, Any], key: str, cache_dir: Path, start: float, builder: Builder) -> Any:
    """A hit where the harness published it, else the harness's trusted builder builds it and says where."""
    root, entry = loading_root(cache_dir), f"{call['name']}-{key}"
    if (root / entry / DONE_MARKER).is_file():
        return load_cached(call, key, root / entry, start, used=cache_dir / entry)
    answer = builder(wire.BuildCall.model_validate({k: call[k] for k in wire.BuildCall.model_fields}))
    seconds = time.perf_counter() - start
    if answer.status != "built":
        REGISTRY.failed = True
        REGISTRY.errors.extend(answer.errors or [Diagnostic(message=answer.message)])
        failed = BuildInfo(name=call["name"], key=key, cached=False, seconds=seconds, ok=False)
        REGISTRY.builds.append(answer.build or failed)
        summary = answer.message or "; ".join(d.message for d in answer.errors[:3]) or "see build log"
        how = "was refused" if answer.status == "refused" else "failed to build"
        raise RuntimeError(f"load_inline({call['name']!r}) {how}: {summary}")
    module = cpp_extension._import_module_from_library(
        call["name"], str(root / answer.entry), call["is_python_module"]
    )
    info = answer.build or BuildInfo(name=call["name"], key=key, cached=False, seconds=seconds, ok=True)
    REGISTRY.builds.append(info.model_copy(update={"seconds": seconds}))
    return CountingModule(module) if call["is_python_module"] else module


def _build_fresh(call: dict[str, Any], key: str, cache_dir: Path, final: Path, start: float) -> Any:
    # Named after the job: if the build is killed, the parent removes this folder (see jobs.sweep_build_tmp).
    job = os.environ.get("KERNEL_AGENT_JOB", "nojob")
    tmp = cache_dir / ".tmp" / f"{call['name']}-{key}-{job}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    log_path = tmp / LOG_NAME
    try:
        with (
            _stdout_to(log_path),
            uninstrumented_children(),
            compile_limits(),
            compiler_shims(cache_dir, bool(call["cuda_sources"])),
            watched(call["name"], tmp, PROGRESS),
        ):
            module = _ORIGINAL_LOAD_INLINE(**{**call, "build_directory": str(tmp), "verbose": True})
    except Exception as exc:
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        diags = parse_errors(log + "\n" + str(exc), tmp, call)
        REGISTRY.failed = True
        REGISTRY.errors.extend(diags)
        REGISTRY.builds.append(
            BuildInfo(
                name=call["name"],
                key=key,
                cached=False,
                seconds=time.perf_counter() - start,
                ok=False,
                compiles=compile_steps(tmp),
            )
        )
        shutil.rmtree(tmp, ignore_errors=True)
        summary = "; ".join(d.message for d in diags[:3]) or "see build log"
        raise RuntimeError(f"load_inline({call['name']!r}) failed to build: {summary}") from None
    log = log_path.read_text(errors="replace")
    kernels = parse_ptxas(log)
    seconds = time.perf_counter() - start
    (tmp / DONE_MARKER).write_text(
        json.dumps({"key": key, "seconds": seconds, "kernels": [k.model_dump() for k in kernels]})
    )
    steps = compile_steps(tmp)
    published = _kept_for_symbols(tmp) if os.environ.get(SANITIZE_BUILD_ENV) else tmp
    cache.publish(published, final)  # False: another process finished the same build first; theirs is as good
    cache.pin(final, for_process=True)
    cache.evict(cache_dir)
    REGISTRY.builds.append(
        BuildInfo(
            name=call["name"],
            key=key,
            cached=False,
            seconds=seconds,
            ok=True,
            kernels=kernels,
            compiles=steps,
        )
    )
    return CountingModule(module) if call["is_python_module"] else module


def _kept_for_symbols(tmp: Path) -> Path:
    """A sanitized build publishes a copy: this process keeps the library it loaded where it was built, and
    ASan's symbolizer reads it there when it reports (renamed away, the candidate's frames go unnamed). The
    parent removes the build folder once the worker is done (tools.supervise.jobs.sweep_build_tmp)."""
    copy = tmp.with_name(f"{tmp.name}-publish")
    shutil.copytree(tmp, copy, symlinks=True)
    return copy


def install(progress: wire.BuildProgress | None = None, builder: Builder | None = None) -> None:
    """Route every load_inline of the candidate through the harness's build cache; `builder` (a candidate's
    worker: tools/worker/build_client.py) builds what the cache lacks in the harness's trusted builder, else
    this process builds it; `progress` gets what each fresh build here is compiling as it changes."""
    global PROGRESS, BUILDER
    PROGRESS, BUILDER = progress, builder
    cpp_extension.load_inline = harness_load_inline
