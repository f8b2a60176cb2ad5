"""Headless Chromium (Debian's `chromium` package, which `.ci/run` installs) for the report's browser tests.

Without it a test skips on a developer's machine, but fails in CI (env CI set; `.ci/run` sets it): there a
missing browser is a broken set-up, not a reason to pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

FLAGS = [
    "--headless",
    "--disable-gpu",
    "--no-sandbox",
    "--hide-scrollbars",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def chromium() -> str:
    """The browser's path; skips the test without one (fails it in CI)."""
    found = shutil.which("chromium")
    if found is None:
        message = "needs Debian's chromium (apt-get install chromium)"
        if in_ci():
            pytest.fail(f"{message}: .ci/run installs it, so CI without it is broken")
        pytest.skip(message)
    return found


def run_chromium(args: list[str], timeout: float = 120) -> str:
    """Chromium with a throwaway profile; its stdout."""
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return done.stdout


def dump_dom(page: Path, fragment: str = "") -> str:
    """The DOM after the page's scripts ran (`--dump-dom`), serialised."""
    return run_chromium(["--dump-dom", page.resolve().as_uri() + fragment])


def screenshot(page: Path, out: Path, width: int, height: int) -> Path:
    run_chromium([f"--screenshot={out}", f"--window-size={width},{height}", page.resolve().as_uri()])
    return out
