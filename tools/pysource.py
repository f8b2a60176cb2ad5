"""Python source parsed behind one lock.

CPython 3.11 keeps one recursion counter per interpreter while it turns a parse tree into `ast` objects
(gh-106905), so two threads parsing at once can raise `SystemError: AST constructor recursion depth
mismatch`: the harness parses from many threads (parallel trajectories' static checks of each candidate,
problem loads, the warm pool's prefetch), and the fast tier met it once on 2026-12-07. Every parse in the
harness goes through here; the lock is re-entrant, so a parse that runs inside another (a finalizer) waits
for nothing.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.RLock()


def parse_module(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename=filename)


def parse_expression(source: str) -> ast.Expression:
    with _LOCK:
        return ast.parse(source, mode="eval")


def literal(source: str) -> Any:
    """`ast.literal_eval` of `source` (it parses too)."""
    with _LOCK:
        return ast.literal_eval(source)
