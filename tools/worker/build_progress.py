"""A fresh build's progress, as the harness's compiler shim records it: what is compiling now, what has finished.

The compiles run in ninja's processes; a thread of the building process reads the shim's records
(tools/worker/ccshim.py) every WATCH_S and sends what changed (`wire.Building`) to the live display.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

from tools import wire
from tools.worker.ccshim import RECORDS, STARTED

WATCH_S = 0.25


def outputs_in(path: Path) -> list[str]:
    """The `output` of each record of a shim's JSON-lines file (a torn last line is skipped)."""
    names = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                names.append(str(json.loads(line)["output"]))
    return names


def build_state(extension: str, build_dir: Path) -> wire.Building:
    """What the build in `build_dir` is doing now, from the shim's records: started and not yet finished."""
    finished = outputs_in(build_dir / RECORDS)
    compiling = [name for name in dict.fromkeys(outputs_in(build_dir / STARTED)) if name not in finished]
    return wire.Building(extension=extension, compiling=compiling[:64], finished=len(set(finished)))


class BuildWatcher:
    """Reports a fresh build's progress to `sink` while it runs: a thread reads the shim's records every
    WATCH_S and sends what changed. The compiles run in ninja's processes; this is how the worker sees them."""

    def __init__(self, extension: str, build_dir: Path, sink: wire.BuildProgress) -> None:
        self.extension, self.build_dir, self.sink = extension, build_dir, sink
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="build-progress", daemon=True)

    def _watch(self) -> None:
        last: wire.Building | None = None
        while True:
            stopping = self._stop.is_set()  # one last look once the build has returned
            now = build_state(self.extension, self.build_dir)
            if now != last:
                with contextlib.suppress(Exception):  # the display's loss, never the build's
                    self.sink(now)
                last = now
            if stopping:
                return
            self._stop.wait(WATCH_S)

    def __enter__(self) -> BuildWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextlib.contextmanager
def watched(extension: str, build_dir: Path, sink: wire.BuildProgress | None) -> Iterator[None]:
    if sink is None:
        yield
        return
    with BuildWatcher(extension, build_dir, sink):
        yield
