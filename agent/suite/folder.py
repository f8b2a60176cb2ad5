"""The problems of a suite and its folder: `suite.json`, `results/<problem>.json`, `runs/`.

A suite is a folder of problem specs (every `*.yaml` directly in it, by name; its subfolders are not
searched, so `problems/kb_mini` is the CPU suite and `problems/kb_mini/cuda` the CUDA one) or a list of
problem files (specs or KernelBench `.py`), in the order given.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from agent.suite.records import ProblemResult, SuiteConfig, SuiteData, summarize

CONFIG = "suite.json"
RESULTS = "results"
RUNS = "runs"
PAGE = "suite.html"
TRANSCRIPTS = "transcripts"


class SuiteError(Exception):
    """A suite that cannot be made or read: one line, exit code 2."""


def find_problems(paths: list[str]) -> list[Path]:
    """The problem files of `paths`: a folder gives its `*.yaml`, a file itself."""
    found: list[Path] = []
    for given in paths:
        path = Path(given).resolve()
        if path.is_dir():
            specs = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
            if not specs:
                raise SuiteError(f"{given}: a folder with no problem specs (*.yaml) in it")
            found += specs
        elif path.is_file():
            found.append(path)
        else:
            raise SuiteError(f"{given}: no such problem file or folder")
    if len(set(found)) != len(found):
        raise SuiteError("a problem is given twice")
    return found


def new_suite_dir(parent: Path, stamp: str, name: str) -> Path:
    path = parent / f"{stamp}-suite-{name}"
    path.mkdir(parents=True)
    return path


def write_config(suite_dir: Path, config: SuiteConfig) -> None:
    (suite_dir / RESULTS).mkdir(parents=True, exist_ok=True)
    (suite_dir / CONFIG).write_text(config.model_dump_json(indent=2) + "\n")


def read_config(suite_dir: Path) -> SuiteConfig:
    path = suite_dir / CONFIG
    if not path.is_file():
        raise SuiteError(f"{suite_dir}: not a suite folder (no {CONFIG})")
    try:
        return SuiteConfig.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise SuiteError(f"{path}: unreadable: {exc.errors()[0]['msg']}") from None


def result_path(suite_dir: Path, problem: str) -> Path:
    return suite_dir / RESULTS / f"{problem}.json"


def write_result(suite_dir: Path, result: ProblemResult) -> None:
    """Written whole, then moved into place: a suite killed while writing leaves no half a result."""
    path = result_path(suite_dir, result.problem)
    part = path.with_suffix(".part")
    part.write_text(result.model_dump_json(indent=2) + "\n")
    part.replace(path)


def read_result(suite_dir: Path, problem: str) -> ProblemResult | None:
    """The problem's result, or None where it has none (or an unreadable one: it runs again)."""
    path = result_path(suite_dir, problem)
    try:
        return ProblemResult.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None


def problem_name(problem_path: str) -> str:
    """The name a problem's result is filed under: its spec's name (the file's stem where it won't load)."""
    from tools.problem import ProblemError, load_problem

    try:
        return load_problem(problem_path).name
    except ProblemError:
        return Path(problem_path).stem


def load_suite(suite_dir: Path) -> SuiteData:
    """The suite folder as data: its config, the results it holds, the problems still to run."""
    config = read_config(suite_dir)
    names = [problem_name(p) for p in config.problems]
    found = {name: read_result(suite_dir, name) for name in names}
    results = [r for r in found.values() if r is not None]
    pending = [name for name, r in found.items() if r is None or not r.finished]
    return SuiteData(
        suite_dir=str(suite_dir),
        config=config,
        results=results,
        pending=pending,
        summary=summarize(results, len(names)),
    )
