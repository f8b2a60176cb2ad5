"""The scripted playbacks' words: a playback's reasoning and text are written in advance, while its kernels
are compiled and timed for real on whatever machine plays it. So no sentence may state how a benchmark
came out ("Faster, but ...", "is the fastest correct kernel") unless it says where that was measured
(NOTES.md, the H200 notes); what a step expects is phrased as a hypothesis for the benchmark to settle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO

PLAYBACKS = sorted(REPO.glob("problems/*/trajectory.yaml")) + sorted(
    REPO.glob("tests/problems/*/trajectory.yaml")
)
KERNEL_FILES = sorted(REPO.glob("problems/selective_scan_cpu/trajectory/*.py"))

OUTCOME_CLAIMS = re.compile(
    r"is the fastest|correct, but|faster, but|slower, but|as expected|it passes every case"
    r"|correct everywhere|spent most of its time|got slower|got faster",
    re.IGNORECASE,
)
ATTRIBUTED = re.compile(r"NOTES\.md|on the H200|if it passes", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.:;])\s+", " ".join(text.split())) if s.strip()]


def claims(text: str) -> list[str]:
    """The sentences of `text` that state a benchmark's outcome without saying where it was measured."""
    return [s for s in sentences(text) if OUTCOME_CLAIMS.search(s) and not ATTRIBUTED.search(s)]


def step_texts(playback: Path) -> list[str]:
    steps = yaml.safe_load(playback.read_text())["steps"]
    return [step.get(field) or "" for step in steps for field in ("reasoning", "text")]


def test_there_are_playbacks_to_check() -> None:
    names = {str(p.relative_to(REPO)) for p in PLAYBACKS}
    assert {"problems/selective_scan/trajectory.yaml", "problems/selective_scan_cpu/trajectory.yaml"} <= names


@pytest.mark.parametrize("playback", PLAYBACKS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_playback_states_no_benchmark_outcome(playback: Path) -> None:
    assert [c for text in step_texts(playback) for c in claims(text)] == []


@pytest.mark.parametrize("kernel", KERNEL_FILES, ids=lambda p: p.name)
def test_a_playback_kernel_docstring_states_no_measurement(kernel: Path) -> None:
    docstring = ast.get_docstring(ast.parse(kernel.read_text())) or ""
    assert claims(docstring) == []


def test_the_claims_check_catches_the_old_wording() -> None:
    old = "Faster, but each task reads x with a stride. The 8-channel SIMD version is the fastest correct kernel."
    assert len(claims(old)) == 2
    assert claims("On the H200 of NOTES.md the 4-lane scan was the fastest correct kernel.") == []
