"""What the README's quick start leaves in a clone: the virtual environment it creates (`.venv/`) and the
runs it writes are ignored by git, so a newcomer's `git status` stays clean."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import REPO


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout"
)
@pytest.mark.parametrize("path", [".venv/", ".venv/bin/python", "runs/20261201T000000Z-x-000000/"])
def test_what_the_quick_start_makes_is_ignored(path: str) -> None:
    checked = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO, check=False)
    assert checked.returncode == 0, f"{path} is not ignored by .gitignore"
