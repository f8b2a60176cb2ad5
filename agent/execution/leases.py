"""Leases: who may compile and who may time, on this machine, right now.

- A **timing** lease is exclusive per resource: one GPU (`gpu0`, `gpu1`, ...) for a CUDA problem, the
  whole host (`host`) for a CPU problem. With warm workers a GPU takes `evaluations_per_gpu()`
  (tools/supervise/pool.py) evaluations at once, each under an **evaluation** lease: their timed loops
  hold the device alone in turn (the warm pool's lock, tools/supervise/locks.py), and each such span is
  reported as that GPU's timing lease, so that timing leases still never overlap while one evaluation's
  truth and checks run beside another's.
- A **compile** lease is one slot of a CPU pool sized to the cores (`cpu`).
- On a CPU problem the host clock times the candidate, so a timing must not overlap a compile: compiles
  take the host lock shared, a timing takes it exclusive (a readers-writer lock that lets a waiting
  timing in before new compiles, so timings are not starved). One `Leases` may serve problems of both
  devices (`agent suite`): a CPU problem's timing passes `on_host=True` and takes the host even where the
  leases hold GPUs, and every compile, a CUDA problem's too, then waits for it.

Every acquire and release is reported to `on_event` as a `LeaseEvent`, acquired once held and released
just before it is given back: the run log then shows, with timestamps, that leases never overlapped.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal

from agent.runlog.events import LeaseEvent
from tools.supervise import ExclusiveSink, SharedExclusiveLock, evaluations_per_gpu, exclusive_listener


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def visible_gpu_count() -> int:
    """GPUs this process may use, without initialising CUDA here: CUDA_VISIBLE_DEVICES, else nvidia-smi."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0


class GpuPool:
    """Local GPUs, each lent to `per_gpu` evaluations at a time; a trajectory prefers its home GPU when it
    has room, else the least used."""

    def __init__(self, gpus: list[int], per_gpu: int = 1) -> None:
        if not gpus:
            raise ValueError("GpuPool needs at least one GPU")
        self.gpus = list(gpus)
        self.per_gpu = per_gpu
        self._held = dict.fromkeys(gpus, 0)
        self._cond = threading.Condition()

    def home(self, trajectory: int) -> int:
        return self.gpus[(trajectory - 1) % len(self.gpus)]

    def _room(self) -> list[int]:
        return [g for g in self.gpus if self._held[g] < self.per_gpu]

    @contextlib.contextmanager
    def lend(self, prefer: int) -> Iterator[int]:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._room()))
            room = self._room()
            gpu = prefer if prefer in room else min(room, key=lambda g: (self._held[g], g))
            self._held[gpu] += 1
        try:
            yield gpu
        finally:
            with self._cond:
                self._held[gpu] -= 1
                self._cond.notify_all()


EventSink = Callable[[LeaseEvent], None]


class Leases:
    """The leases of one machine. `gpus` is None (or empty) for CPU problems only."""

    def __init__(
        self, gpus: list[int] | None, compile_slots: int | None = None, per_gpu: int | None = None
    ) -> None:
        if per_gpu is None:
            per_gpu = evaluations_per_gpu()
        self.gpu_pool = GpuPool(gpus, per_gpu) if gpus else None
        self.compile_slots = compile_slots or cpu_cores()
        self._compile_pool = threading.BoundedSemaphore(self.compile_slots)
        self._host = SharedExclusiveLock()
        self._ids = itertools.count(1)

    @property
    def on_gpu(self) -> bool:
        return self.gpu_pool is not None

    @contextlib.contextmanager
    def compile(self, on_event: EventSink, trajectory: int | None, kernel_path: str | None) -> Iterator[None]:
        started = time.monotonic()
        with self._compile_pool, self._host.shared():  # free unless a CPU problem's timing holds the host
            with self._held(on_event, "compile", "cpu", trajectory, kernel_path, started):
                yield

    @contextlib.contextmanager
    def timing(
        self, on_event: EventSink, trajectory: int | None, kernel_path: str | None, on_host: bool = False
    ) -> Iterator[int | None]:
        """Yields the GPU to time on (None for a CPU problem, which holds the whole host). Where a GPU takes
        more than one evaluation, this is an `evaluation` lease, and each span the evaluation holds the
        device alone is a `timing` lease of that GPU, told as it happens."""
        started = time.monotonic()
        if self.gpu_pool is None or on_host:
            with (
                self._host.exclusive(),
                self._held(on_event, "timing", "host", trajectory, kernel_path, started),
            ):
                yield None
            return
        with self.gpu_pool.lend(self.gpu_pool.home(trajectory or 1)) as gpu:
            if self.gpu_pool.per_gpu == 1:
                with self._held(on_event, "timing", f"gpu{gpu}", trajectory, kernel_path, started):
                    yield gpu
                return
            with (
                self._held(on_event, "evaluation", f"gpu{gpu}", trajectory, kernel_path, started),
                exclusive_listener(self._timing_spans(on_event, f"gpu{gpu}", trajectory, kernel_path)),
            ):
                yield gpu

    def _timing_spans(
        self, on_event: EventSink, resource: str, trajectory: int | None, kernel_path: str | None
    ) -> ExclusiveSink:
        """Each exclusive span of an evaluation as a `timing` lease (tools/supervise/locks.py tells them)."""
        current: list[str] = []

        def sink(action: Literal["acquired", "released"], seconds: float) -> None:
            if action == "acquired":
                current[:] = [f"t{next(self._ids)}"]
            base = {
                "lease_id": current[0] if current else "t?",
                "resource": resource,
                "kernel_path": kernel_path,
            }
            if action == "acquired":
                on_event(
                    LeaseEvent(
                        action="acquired", kind="timing", trajectory=trajectory, waited_s=seconds, **base
                    )
                )
            else:
                on_event(
                    LeaseEvent(
                        action="released", kind="timing", trajectory=trajectory, held_s=seconds, **base
                    )
                )

        return sink

    @contextlib.contextmanager
    def _held(
        self,
        on_event: EventSink,
        kind: str,
        resource: str,
        trajectory: int | None,
        kernel_path: str | None,
        asked: float,
    ) -> Iterator[None]:
        lease_id = f"{kind[0]}{next(self._ids)}"
        base = {"lease_id": lease_id, "kind": kind, "resource": resource, "kernel_path": kernel_path}
        acquired = time.monotonic()
        on_event(LeaseEvent(action="acquired", trajectory=trajectory, waited_s=acquired - asked, **base))
        try:
            yield
        finally:
            held = time.monotonic() - acquired
            on_event(LeaseEvent(action="released", trajectory=trajectory, held_s=held, **base))
