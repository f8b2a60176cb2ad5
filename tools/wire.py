"""The worker's end of the result channel: one JSON object per line, on a pipe the parent owns.

Workers (tools.worker) send; the parent (tools.supervise) reads and validates.
"""

from __future__ import annotations

import json
import os
from typing import Any


class Channel:
    """The child's end of the result channel: one JSON object per line."""

    def __init__(self, fd: int) -> None:
        self._stream = os.fdopen(fd, "wb", buffering=0)

    def send(self, event: str, **payload: Any) -> None:
        line = json.dumps({"event": event, **payload}, default=str).encode() + b"\n"
        self._stream.write(line)
