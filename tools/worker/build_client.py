"""The candidate worker's side of the harness's trusted builder: ask for a build, wait for the answer, and
find where published builds are loaded from.

The worker runs the candidate's Python, so it builds nothing: a `load_inline` that misses the cache sends
its call to the harness (`wire.BuildWanted` on the channel) and reads the answer (`orders.BuildAnswer`, one
stdin line). The harness builds it in a contained process of its own (tools/supervise/builder.py) and
publishes it; the worker then loads it from the real cache, which its seal shows read-only at
$KERNEL_AGENT_PUBLISHED_CACHE (its overlay view of the cache would keep a lookup that missed before the
build was published). Hits are looked up there too, so only what the builder published is ever loaded.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from tools import orders, wire
from tools.worker.buildlog import CANDIDATE_FILE
from tools.worker.seal import PUBLISHED_ENV, read_mounts


def loading_root(cache_dir: Path) -> Path:
    """Where this worker loads builds from: the read-only view of the real cache where its seal made one,
    else the cache as it sees it (the process-group fallback, where nothing is sealed)."""
    published = os.environ.get(PUBLISHED_ENV, "")
    if published:
        try:
            if any(m.target == published for m in read_mounts()):
                return Path(published)
        except (OSError, ValueError):
            pass
    return cache_dir


def asker(
    channel: wire.Channel, stdin: IO[str] | None = None
) -> Callable[[wire.BuildCall], orders.BuildAnswer]:
    """A builder that asks the harness over `channel` and reads its answer from `stdin` (one call at a time:
    a candidate's threads may build at once)."""
    lock = threading.Lock()

    def ask(call: wire.BuildCall) -> orders.BuildAnswer:
        try:
            kernel = CANDIDATE_FILE.read_text()
        except (OSError, UnicodeDecodeError):
            kernel = ""
        with lock:
            channel.send(wire.BuildWanted(call=call, kernel_source=kernel))
            line = (stdin or sys.stdin).readline()
        try:
            return orders.BuildAnswer.model_validate_json(line)
        except ValidationError:
            why = f"the harness's builder did not answer (it said {line.strip()[:80]!r})"
            return orders.BuildAnswer(status="failed", message=why)

    return ask
