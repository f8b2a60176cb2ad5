"""A pytest plugin for a child `pytest --collect-only -p tests.helpers.collected_markers`: after selection, one
line per selected test, `MARKED <node id> <marker,marker,...>`, so one collection answers several `-m`
questions (tests/test_gate_selection.py: each whole-suite collection costs 7-20 s on 2 cores)."""

from __future__ import annotations

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        names = sorted({mark.name for mark in item.iter_markers()})
        print(f"MARKED {item.nodeid} {','.join(names)}")
