"""An evaluation's timeline as the harness sees it, for whoever listens (bench/eval_phases.py,
bench/timeline.py): each worker's start, messages and end, the truth servers' requests as they are asked,
taken and answered, and each evaluation's turns on its device. Observers only: nothing here decides.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

Listener = Callable[[str, str, str | None], None]  # (which worker, event, the case or shape it names)
_listeners: list[Listener] = []


@contextlib.contextmanager
def listen(listener: Listener) -> Iterator[None]:
    """While the block runs, `listener` hears each worker's start (`spawn`), every message it sends, as
    it arrives, and its end (`exit`): an evaluation's timeline as the parent sees it (bench/eval_phases.py).
    It decides nothing; an exception it raises is dropped."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def tell(who: str, event: str, name: str | None = None) -> None:
    for listener in list(_listeners):
        with contextlib.suppress(Exception):  # an observer's fault is never the evaluation's
            listener(who, event, name)
