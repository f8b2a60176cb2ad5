"""A red-team disagreement as a ready regression case, and `agent redteam promote`.

A case is a folder: `candidate.py` (the candidate exactly as benchmarked) and `expected.json`
(`ExpectedCase`: the problem, the stricter verdict it must get, the attack, how it was caught). It is
written under the run, `runs/<run>/redteam/<case>/`; `promote` copies it into
`tests/adversarial/promoted/<case>/`, where tests/adversarial/test_promoted.py judges every promoted case
again with the stricter checks and asserts that verdict.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from agent.redteam.strict import Verdict, strict_problem, verdict_of

REPO = Path(__file__).resolve().parents[2]
PROMOTED = REPO / "tests" / "adversarial" / "promoted"
CANDIDATE, EXPECTED = "candidate.py", "expected.json"
CASES_DIR = "redteam"

Check = Literal["correctness", "floor", "sanitizer"]


class ExpectedCase(BaseModel):
    """`expected.json`: what a regression case must come to under the stricter checks."""

    model_config = ConfigDict(extra="ignore")
    format_version: int = 1
    problem: str
    """The problem's spec: relative to the repository root where it lies inside it, else absolute."""
    attack: str
    description: str = ""
    first_status: str
    first_speedup: float | None = None
    expected_status: str
    expected_flags: list[str] = []
    caught_by: str
    check: Check
    """What caught it; a promoted case caught by correctness is timed only briefly."""
    run_id: str = ""
    kernel_path: str = ""


class CaseError(Exception):
    """A case that cannot be found or promoted: one line, exit code 2."""


def problem_reference(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path.resolve())


def problem_path(reference: str) -> Path:
    path = Path(reference)
    return path if path.is_absolute() else REPO / path


def case_name(attack: str, kernel_path: str) -> str:
    """`<attack>-<kernel number>`, e.g. `shown-shapes-only-007` (a slug: safe as a folder and test id)."""
    slug = re.sub(r"[^a-z0-9]+", "-", attack.lower()).strip("-")[:40] or "unnamed"
    return f"{slug}-{Path(kernel_path).stem}"


def write_case(run_dir: Path, name: str, code: str, expected: ExpectedCase) -> Path:
    """The case's folder under the run (relative to it, as the log records it)."""
    folder = run_dir / CASES_DIR / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CANDIDATE).write_text(code)
    (folder / EXPECTED).write_text(expected.model_dump_json(indent=2) + "\n")
    return folder.relative_to(run_dir)


def read_case(folder: Path) -> tuple[str, ExpectedCase]:
    code_path, expected_path = folder / CANDIDATE, folder / EXPECTED
    if not code_path.is_file() or not expected_path.is_file():
        raise CaseError(f"{folder}: not a red-team case (needs {CANDIDATE} and {EXPECTED})")
    return code_path.read_text(), ExpectedCase.model_validate_json(expected_path.read_text())


def find_case(spec: str, runs_dir: Path) -> Path:
    """RUN/CASE: a case folder as given, or `<run>/redteam/<case>` (the run by path or by name under
    `runs_dir`)."""
    given = Path(spec)
    candidates = [
        given,
        given.parent / CASES_DIR / given.name,
        runs_dir / given.parent / CASES_DIR / given.name,
    ]
    for folder in candidates:
        if (folder / EXPECTED).is_file():
            return folder
    raise CaseError(f"no red-team case at {spec} (looked in {', '.join(str(c) for c in candidates)})")


def promote(folder: Path, into: Path = PROMOTED) -> Path:
    """Copy the case into `into/<case>/`; an existing different case of that name is refused."""
    code, _ = read_case(folder)
    target = into / folder.name
    if target.exists():
        if (target / CANDIDATE).is_file() and (target / CANDIDATE).read_text() == code:
            return target  # promoted before: the same candidate
        raise CaseError(f"{target} exists with another candidate: remove it or rename the case")
    target.mkdir(parents=True)
    for name in (CANDIDATE, EXPECTED):
        shutil.copyfile(folder / name, target / name)
    return target


def promoted_cases(into: Path = PROMOTED) -> list[Path]:
    return sorted(p for p in into.iterdir() if (p / EXPECTED).is_file()) if into.is_dir() else []


def judge_case(folder: Path) -> tuple[Verdict, ExpectedCase]:
    """A case judged again as its expected.json says: the stricter problem (timed briefly unless the floor
    caught it), the sanitizer where it caught it; the verdict beside what was expected."""
    from tools import benchmark
    from tools.judge import sanitize, with_sanitizer
    from tools.problem import load_problem

    code, expected = read_case(folder)
    strict = strict_problem(
        load_problem(problem_path(expected.problem)), small_timing=expected.check != "floor"
    )
    result = benchmark(strict, code, prefetch_next=False)
    if expected.check == "sanitizer" and result.status == "ok":
        result = with_sanitizer(result, sanitize(strict, code))
    return verdict_of(result), expected
