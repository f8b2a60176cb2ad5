"""Parsing from many threads at once (tools/pysource.py): CPython 3.11's AST conversion keeps one recursion
counter per interpreter (gh-106905), so a parse that gives the GIL away mid-conversion (a finalizer run by
the garbage collector there) while another thread parses raises `SystemError`. The fast tier met it once
(2026-12-07, `check_source` beside a warm pool's threads)."""

from __future__ import annotations

import ast
import gc
import threading
import time
from collections.abc import Callable

import pytest

from tests.helpers import REPO
from tools import pysource

SOURCE = (REPO / "problems/selective_scan/solutions/01_naive_fused.py").read_text()


class _SleepsWhenCollected:
    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        time.sleep(0.0005)  # the GIL goes to the other thread inside this thread's conversion


def errors_parsing_beside_another_thread(parse: Callable[[str], object], rounds: int = 30) -> int:
    """SystemErrors while one thread parses with collectable cycles around it and another parses all along."""
    errors: list[SystemError] = []
    stop = threading.Event()

    def parse_counting(source: str) -> None:
        try:
            parse(source)
        except SystemError as exc:
            errors.append(exc)

    def beside() -> None:
        while not stop.is_set():
            parse_counting("x = [1, (2, {3: [4]})]")

    threshold = gc.get_threshold()
    gc.set_threshold(50)  # collect within the conversion's allocations
    other = threading.Thread(target=beside)
    try:
        other.start()
        for _ in range(rounds):
            for _ in range(3):
                _SleepsWhenCollected()
            parse_counting(SOURCE)
    finally:
        stop.set()
        other.join()
        gc.set_threshold(*threshold)
    return len(errors)


def test_parsing_through_pysource_survives_a_thread_parsing_beside_it() -> None:
    if not errors_parsing_beside_another_thread(ast.parse):
        pytest.skip("this Python's ast.parse is thread-safe here: nothing to guard")
    assert errors_parsing_beside_another_thread(pysource.parse_module) == 0


def test_the_harness_parses_only_through_pysource() -> None:
    """A bare `ast.parse` or `ast.literal_eval` in agent/ or tools/ would bring the race back."""
    bare = [
        f"{path.relative_to(REPO)}:{n}"
        for folder in ("agent", "tools")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path.name != "pysource.py"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if "ast.parse(" in line or "ast.literal_eval(" in line
    ]
    assert bare == []
