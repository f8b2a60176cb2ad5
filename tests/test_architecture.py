"""The layering docs/architecture.md describes, checked on the source: what runs beside a candidate
(tools.worker) imports nothing from the judge or from supervision; shared data modules import no zone;
tools imports nothing from agent, agent nothing from bench; and no import cycles between the zones."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def imports_of(folder: str) -> dict[str, set[str]]:
    return {str(p.relative_to(REPO)): imported_modules(p) for p in sorted((REPO / folder).rglob("*.py"))}


def offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path} imports {mod}"
        for path, mods in imports_of(folder).items()
        for mod in sorted(mods)
        if mod.startswith(forbidden)
    ]


def test_code_beside_a_candidate_imports_nothing_from_the_judge_or_supervision() -> None:
    assert offenders("tools/worker", ("tools.judge", "tools.supervise", "agent", "bench")) == []


@pytest.mark.parametrize("module", ["tools/problem.py", "tools/results.py", "tools/wire.py"])
def test_shared_data_modules_belong_to_no_zone(module: str) -> None:
    mods = imported_modules(REPO / module)
    zones = ("tools.judge", "tools.supervise", "tools.worker", "tools.cache", "agent")
    assert [m for m in mods if m.startswith(zones)] == []


def test_the_cache_and_supervision_never_reach_up_to_the_judge() -> None:
    assert offenders("tools/cache", ("tools.judge", "tools.supervise", "tools.worker", "agent")) == []
    assert offenders("tools/supervise", ("tools.judge", "agent", "bench")) == []


def test_floors_are_layered_bench_over_agent_over_tools() -> None:
    assert offenders("tools", ("agent", "bench")) == []
    assert offenders("agent", ("bench",)) == []


def test_the_worker_package_root_imports_nothing() -> None:
    """A worker loads only what it uses: `import tools.worker.timing` must not pull the builder in."""
    assert imported_modules(REPO / "tools" / "worker" / "__init__.py") == set()
