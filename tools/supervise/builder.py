"""The trusted builder: a candidate's `load_inline` builds, compiled by harness code and published by it alone.

The candidate worker runs the candidate's Python, so it must not decide what the build cache holds under a
key (docs/containment.md). Its `load_inline` (tools/worker/build.py) sends the call as a `wire.BuildWanted`
and waits on stdin; `TrustedBuilder.answer` checks the call (tools/supervise/build_flags.py: a refused flag
is a verdict, never a build), then builds it in a contained child of this process (`tools.worker.builder`:
torch's build machinery and ninja on the given sources, the harness's compiler shim, and no candidate
Python: the built library is never imported there). That child writes the cache itself (objects, the
precompiled header, the entry by one rename) and says what it published (`wire.Built`); the answer names
the entry, and the worker loads it from the real cache, which its seal shows it read-only
(`SealSpec.published`). The entry stays pinned here until the worker has exited.

The child is contained as a candidate worker is (PID and network namespaces, no capabilities, every mount
read-only but the cache and its own folder), with the candidate's working folder, the job's secrets and
every job's staging folder hidden under empty read-only mounts, and the folders that hold other jobs covered
but for the harness it runs from (`private`, as a candidate worker's are): what the candidate or another
job in flight wrote is not there to be included or linked into a build whose key covers only the sources.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from tools import orders, wire
from tools.cache import build_cache_dir, builds, cache_root
from tools.results import BuildInfo, Diagnostic
from tools.supervise import isolation
from tools.supervise._spawn import ChildOutcome, Deadline, MessageHandler, child_env, run_child
from tools.supervise.build_flags import refusal
from tools.worker.seal import SealSpec

DONE_MARKER = "kernel_agent_build.json"  # tools/worker/build.py writes it last into a finished build
BUILD_SETTINGS = ("KERNEL_AGENT_CACHE_MAX_MB", "KERNEL_AGENT_COMPILER_SHIM", "KERNEL_AGENT_PCH")
MIN_BUILD_S = 5.0  # a build asked for with less of the compile budget left still gets this long


def staging_root() -> Path:
    """Where every job's staging folder lives (tools.supervise.jobs.staging_dir)."""
    return cache_root() / "staging"


class TrustedBuilder:
    """One candidate worker's builds: each `answer` is the stdin line for one `wire.BuildWanted`."""

    def __init__(
        self,
        harness: Path,
        token: str,
        deadline: Deadline,
        hidden: Sequence[Path],
        settings: dict[str, str],
        private: Sequence[str] = (),
    ) -> None:
        self.harness, self.token, self.deadline = harness, token, deadline
        self.hidden = [str(p) for p in hidden]
        self.private = list(private)  # the folders that hold other jobs: only its harness kept in view
        self.settings = settings
        self._pins: list[int] = []
        self._markers: list[str] = []  # each builder's: what is left of it is swept on `release`
        self._lock = threading.Lock()
        self._released = False
        self.notices: list[str] = []  # a guard the machine refused the builder, said once

    def answer(self, wanted: wire.BuildWanted, forward: MessageHandler) -> str:
        """Build what the worker asked for (or refuse it) and say how it went; `forward` hears the build's
        progress."""
        return self._answer(wanted.call, wanted.kernel_source, forward).model_dump_json()

    def _answer(self, call: wire.BuildCall, kernel: str, forward: MessageHandler) -> orders.BuildAnswer:
        failed = BuildInfo(name=call.name, key="", cached=False, seconds=0.0, ok=False)
        if why := refusal(call):
            message = f"the harness's builder refused load_inline({call.name!r}): {why}"
            return orders.BuildAnswer(status="refused", build=failed, message=message)
        start = time.monotonic()
        outcome = self._run(call, kernel, forward)
        if (missing := isolation.uncontained(outcome.containment)) and not self.notices:
            self.notices.append(f"the harness's builder ran with {'; '.join(missing)}")
        built = outcome.first(wire.Built)
        if built is None:
            failed.seconds = time.monotonic() - start
            why = _why_no_report(outcome)
            return orders.BuildAnswer(
                status="failed", build=failed, errors=[Diagnostic(message=why)], message=why
            )
        if not built.ok:
            return orders.BuildAnswer(
                status="failed", build=built.build, errors=built.errors, message=built.message
            )
        entry = build_cache_dir() / built.entry
        if "/" in built.entry or not (entry / DONE_MARKER).is_file():
            why = f"the builder reported {built.entry!r}, which the build cache does not hold"
            return orders.BuildAnswer(
                status="failed", build=failed, errors=[Diagnostic(message=why)], message=why
            )
        with self._lock:  # pinned until the worker that loads it has exited
            if not self._released and (fd := builds.pin(entry)) is not None:
                self._pins.append(fd)
        return orders.BuildAnswer(status="built", entry=built.entry, build=built.build)

    def _run(self, call: wire.BuildCall, kernel: str, forward: MessageHandler) -> ChildOutcome:
        cache = build_cache_dir()
        # Named after the job: jobs.sweep_build_tmp removes it with the job's other private build folders.
        work = cache / ".tmp" / f"builder-{self.token}-{uuid.uuid4().hex[:8]}"
        work.mkdir(parents=True)
        request = work / "call.json"
        request.write_text(call.model_dump_json())
        (work / "kernel.py").write_text(kernel)  # as text only: where its errors stand (buildlog.py)
        with self._lock:
            self._markers.append(work.name)
        extra = {**self.settings, "KERNEL_AGENT_BUILD_CACHE": str(cache), isolation.MARKER_ENV: work.name}
        env = child_env(work, extra, harness=self.harness)
        seal = SealSpec(
            writable=[str(cache), str(work)],
            overlay_work=str(work / "overlay"),  # the scratch its /dev is made in
            hidden=[*self.hidden, str(staging_root())],
            private=self.private,
            keep=[str(self.harness), str(cache), str(work)],
        )

        def on_message(msg: wire.WorkerMessage) -> str | None:
            if isinstance(msg, wire.Building):
                forward(msg)
            return None

        left = max(MIN_BUILD_S, self.deadline.at - time.monotonic())
        return run_child(
            "tools.worker.builder",
            [str(request)],
            cwd=work,
            env=env,
            deadline=Deadline(left),
            on_message=on_message,
            isolate=True,
            seal=seal,
        )

    def release(self) -> None:
        """The worker has exited (or was killed mid-build): a build still running goes with it (its compilers
        too), and its builds may be evicted again."""
        with self._lock:
            self._released = True
            for marker in self._markers:
                isolation.sweep(marker)
            for fd in self._pins:
                os.close(fd)
            self._pins.clear()


def _why_no_report(outcome: ChildOutcome) -> str:
    if outcome.timed_out:
        return f"the build ran out of the compile budget after {outcome.seconds:.0f} s"
    tail = outcome.output.strip()[-1500:]
    return f"the harness's builder stopped (exit {outcome.returncode}) without a report: {tail}"


def settings_from_environment(compile_memory_gb: float) -> dict[str, str]:
    """The user's build-cache settings (docs/builds.md) and the compile memory cap, for the builder's env."""
    found = {name: os.environ[name] for name in BUILD_SETTINGS if os.environ.get(name)}
    return {**found, "KERNEL_AGENT_COMPILE_MEMORY_GB": str(compile_memory_gb)}
