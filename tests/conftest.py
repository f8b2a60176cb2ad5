"""Shared test setup: one build cache for the whole run (C++ builds cost ~47 s each on 2 cores), the
`gpu` marker skipped where no CUDA device is visible, `nvcc` where CUDA cannot be compiled (a CPU build of
torch, or no nvcc), and `long` unless the -m expression asks for it (docs/testing.md: the tiers)."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.helpers import REPO, TESTS, TINY
from tests.helpers.host_turns import TURNS_ENV, host_turn

if TYPE_CHECKING:
    from tools.problem import Problem
    from tools.supervise import WarmPool


def _own_folder(env: str, prefix: str) -> None:
    """`$env` names a temporary folder made here, where the caller named none, and removed when this process
    exits; every child process (pytest-xdist's workers among them) inherits it. Only the process that made it
    removes it, not a forked child."""
    if env in os.environ:
        return
    made, owner = tempfile.mkdtemp(prefix=prefix), os.getpid()
    os.environ[env] = made

    def remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(made, ignore_errors=True)

    atexit.register(remove)


# Set before any test imports the harness: the whole run shares one build cache (each run's is ~1.9 GB: left
# behind, a few runs filled a disk) and one folder of host turns' lock files (tests/helpers/host_turns.py).
_own_folder("KERNEL_AGENT_CACHE", "kagent-test-cache-")
_own_folder(TURNS_ENV, "kagent-test-turns-")
# `agent run` sanitizes each new best where it can (ASan here: an instrumented build of ~50 s a kernel); the
# suite's runs test other things, and the sanitizer's own tests ask for it (tests/test_sanitize_run.py).
os.environ.setdefault("KERNEL_AGENT_SANITIZE", "off")

# A shell starts a background job (`pytest &`, nohup) with SIGINT ignored, and every child inherits that:
# Python then installs no KeyboardInterrupt handler, so the tests that press Ctrl-C on a harness process saw
# it run on and exit 0. Those tests are about what Ctrl-C does, as in a terminal: give it back its default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


WORKERS_ENV = "KERNEL_AGENT_TEST_WORKERS"


def _workers_wanted() -> int:
    """`$KERNEL_AGENT_TEST_WORKERS` where set (1: no workers), else one per core, two at most: a test's own
    builds and workers take a core of their own already, and most of the suite's time is builds on one core
    each (a C++ extension is one translation unit)."""
    from tools.knobs import whole_number

    if os.environ.get(WORKERS_ENV, "").strip():
        return whole_number(WORKERS_ENV, 1, "the test workers (1: none)")
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(2, cores)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The whole suite (`pytest`, `pytest -m "not slow"`: no paths named, no -n given) runs on both cores
    where pytest-xdist is installed, a file at a time to each worker (its module fixtures made once), a test
    marked `serial` alone (`pytest_runtest_protocol` below). Not for the GPU tests (one device), nor a
    pytest a test starts (it would start workers of its own), nor paths named on the command line."""
    if not config.pluginmanager.has_plugin("xdist") or config.option.numprocesses is not None:
        return
    if os.environ.get("PYTEST_XDIST_WORKER") or config.args_source is not pytest.Config.ArgsSource.TESTPATHS:
        return
    if "gpu" in (config.option.markexpr or "") or config.option.collectonly or config.option.usepdb:
        return
    workers = _workers_wanted()
    if workers >= 2:
        config.option.numprocesses = workers
        config.option.dist = "loadfile"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """In a distributed run each test's whole protocol (its module's fixtures made or ended with it) holds a
    host turn: alone where marked `serial`, else beside the other worker's tests."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return (yield)
    with host_turn(Path(os.environ[TURNS_ENV]), alone=item.get_closest_marker("serial") is not None):
        return (yield)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run",
        action="store",
        default=None,
        metavar="RUN_DIR",
        help="run folder whose best.py test_replay_best replays (default: $KERNEL_AGENT_REPLAY_RUN, then the "
        "newest selective_scan run under runs/, then the shipped best solution)",
    )


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _why_cuda_cannot_compile() -> str | None:
    """None where CUDA sources can be built here (a CUDA build of torch and an nvcc), else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build: CUDA sources cannot be compiled"
    from tools.supervise._toolchain import cuda_home

    home = cuda_home()
    if home is None or not (Path(home) / "bin" / "nvcc").exists():
        return "no nvcc found (set CUDA_HOME or put nvcc on PATH)"
    return None


LONG_TIER = "the long tier (CI leaves it out; docs/testing.md says what covers it): run it with -m long"


def _skip_the_long_tier(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `long` run only where the -m expression names them (`-m long`, `-m "long or gpu"`); a
    plain `pytest` (CI's command) and the fast tier (`-m "not slow"`) skip them, saying how to run them."""
    if "long" in (config.option.markexpr or ""):
        return
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(pytest.mark.skip(reason=LONG_TIER))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _skip_the_long_tier(config, items)
    needs_nvcc = [item for item in items if item.get_closest_marker("nvcc") is not None]
    if needs_nvcc and (why := _why_cuda_cannot_compile()):
        for item in needs_nvcc:
            item.add_marker(pytest.mark.skip(reason=why))
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200 with: pytest -m gpu)")
    for item in items:
        # The marker, not the keyword: every test under a folder named gpu/ has that keyword.
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="module")
def tiny() -> Problem:
    """The selective scan at tiny CPU sizes (tests/problems/scan_tiny.yaml): seconds an evaluation."""
    from tools.problem import load_problem

    return load_problem(TINY)


@pytest.fixture(scope="module")
def warm(tiny: Problem) -> Iterator[WarmPool]:
    """Warm workers of the module's own (a test that crashes a zygote affects no other module), with the
    CPU problems' thread budget, as `benchmark` would pick them."""
    from tools.host import timing_threads
    from tools.supervise import WarmPool

    ev = WarmPool(threads=timing_threads(tiny))
    yield ev
    ev.shutdown()


@pytest.fixture(scope="session")
def tests_dir() -> Path:
    return TESTS


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """$KERNEL_AGENT_FAILURE_LOG (set by bench/h200_gate.sh): each failure's report, written the moment it
    happens, so a run cut short by its time limit still says why each test failed."""
    timings = os.environ.get("KERNEL_AGENT_DURATIONS_LOG")  # each test's seconds, as it ends (the gate's)
    # A set-up or tear-down of a second or more too: a module's fixture may hold its builds.
    if timings and (report.when == "call" or report.failed or report.skipped or report.duration >= 1.0):
        with Path(timings).open("a") as fh:
            fh.write(f"{report.duration:7.1f} s  {report.outcome:7} {report.when:8} {report.nodeid}\n")
    path = os.environ.get("KERNEL_AGENT_FAILURE_LOG")
    if path and report.failed:
        with Path(path).open("a") as fh:
            fh.write(
                f"=== {report.nodeid} ({report.when}, {report.duration:.1f} s)\n{report.longreprtext}\n\n"
            )
