"""Regression cases the red team found (`agent redteam`, then `agent redteam promote RUN/CASE`): each folder
under promoted/ holds a candidate the evaluator once accepted and its stricter verdict; judged again here
with the stricter checks (agent/redteam/strict.py), it must get that verdict, never `ok`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.redteam.cases import judge_case, promoted_cases

CASES = promoted_cases(Path(__file__).resolve().parent / "promoted")


def test_there_are_promoted_cases() -> None:
    """The bundled red-team playback's finding is promoted: this file never tests nothing."""
    assert CASES


@pytest.mark.parametrize("folder", CASES, ids=[p.name for p in CASES])
def test_a_promoted_case_gets_its_stricter_verdict(folder: Path) -> None:
    verdict, expected = judge_case(folder)
    assert not verdict.accepted, f"{folder.name} ({expected.attack}) is accepted again: {expected.caught_by}"
    assert verdict.status == expected.expected_status, verdict.caught_by
