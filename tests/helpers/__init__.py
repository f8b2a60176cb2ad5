"""What the tests share: the repository's paths here; the helpers by subject beside them (processes,
problems with other limits, the parallel playback's fixed-time evaluator, reading an SVG chart back). Tests
import from here, never from another test module."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
TINY = TESTS / "problems" / "scan_tiny.yaml"  # the selective scan at tiny CPU sizes (the `tiny` fixture's)
