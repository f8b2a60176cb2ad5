"""The test tiers (docs/testing.md): a test marked `long` is skipped by CI's plain `pytest` and by the fast
tier, saying how to run it, and runs where the -m expression names it; no trust test is in the long tier
(the exploit suite, containment, the sealed filesystem, fresh calls and the paired check stay in CI)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO, TESTS

PROBE = "tests/test_tiers.py::test_a_long_tier_probe"
# Trust tests: CI runs every one of them, however long.
ALWAYS_IN_CI = [
    *sorted(p.relative_to(TESTS).as_posix() for p in (TESTS / "adversarial").rglob("test_*.py")),
    "test_net_containment.py",
    "test_sealed_fs.py",
    "test_fresh_calls.py",
    "test_paired_check.py",
]


@pytest.mark.long
def test_a_long_tier_probe() -> None:
    """Nothing to check: the test below runs this one under each tier's command."""


def outcome(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", PROBE, "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize(
    ("args", "runs"),
    [((), False), (("-m", "not slow"), False), (("-m", "long"), True)],
)
def test_the_long_tier_runs_only_where_the_marker_expression_names_it(
    args: tuple[str, ...], runs: bool
) -> None:
    out = outcome(*args)
    if runs:
        assert "1 passed" in out, out
    else:
        assert "1 skipped" in out, out
        assert (
            "the long tier (CI leaves it out; docs/testing.md says what covers it): run it with -m long"
            in out
        )


@pytest.mark.parametrize("module", ALWAYS_IN_CI)
def test_no_trust_test_is_in_the_long_tier(module: str) -> None:
    assert "mark.long" not in (TESTS / module).read_text()
