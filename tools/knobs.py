"""Settings read from the environment (`KERNEL_AGENT_...`), refused where they do not parse rather than
guessed: a run started with a typo'd knob says so before it measures anything."""

from __future__ import annotations

import os


def whole_number(name: str, default: int, meaning: str) -> int:
    """`$name` as a whole number >= 1 where set, else `default`; `meaning` says what it sets in the error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:  # "²" is a digit to isdigit, not to int
        raise ValueError(f"{name}={raw!r}: a whole number >= 1, {meaning}")
    return int(raw)
