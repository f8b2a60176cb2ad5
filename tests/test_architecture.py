"""The layering docs/architecture.md describes, checked on the source: what runs beside a candidate
(tools.worker) imports nothing from the judge or from supervision; shared data modules import no zone;
tools imports nothing from agent, agent nothing from bench; nothing outside tools/ reaches its internals;
no import cycles between the zones; inside agent/, the rooms keep their floors (the run log below the
views, the views below the report, the CLI on top), and no agent module imports itself round a cycle;
no module of agent/ or tools/ over 450 lines, and no class name defined in two of them."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.helpers import REPO


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


@pytest.mark.parametrize(
    "module",
    [
        "tools/problem.py",
        "tools/results.py",
        "tools/profile_results.py",
        "tools/wire.py",
        "tools/orders.py",
        "tools/toolspec.py",
        "tools/secret_env.py",
    ],
)
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


def is_module(dotted: str) -> bool:
    """Whether `dotted` names a module or package of this repository (not a name defined in one)."""
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def internal(mod: str) -> bool:
    """What only tools/ may import: a private module anywhere under tools (`tools.judge._plan`,
    `tools.supervise._spawn`); anything of `tools.worker` (code for the workers' processes: its package
    re-exports nothing); a submodule of `tools.supervise` (its `__init__` re-exports what is public). The
    rest is public: `tools` itself (the two tools), `tools.compile_kernel`, `tools.benchmark`, the shared
    data modules, `tools.envinfo`, the packages' re-exports (`from tools.judge import check_source`, `from
    tools.supervise import WarmPool`) and `tools.cache`."""
    parts = mod.split(".")
    if parts[0] != "tools" or not is_module(mod) and not is_module(mod.rpartition(".")[0]):
        return False
    module = mod if is_module(mod) else mod.rpartition(".")[0]  # `from pkg import name`: pkg
    names = module.split(".")
    private = any(p.startswith("_") and not p.startswith("__") for p in names)
    return (
        private or names[:2] == ["tools", "worker"] or names[:2] == ["tools", "supervise"] and len(names) > 2
    )


# Measurements that must put their own process in a worker's state, named one by one: what they import
# and why. Nothing else outside tools/ may import an internal.
MIMICS_A_WORKER = {
    # its --guard loops run under the candidate worker's own audit hook, to time what the hook costs
    ("bench/launch_probe.py", "tools.worker.guard"),
    # its --contain loops run under the worker's seccomp filter and dropped capabilities, to time what they cost
    ("bench/launch_probe.py", "tools.worker.contain"),
    # and it runs the evaluator's own timing loop in a plain process, to tell the loop's cost from the worker's
    ("bench/launch_probe.py", "tools.worker.timing"),
    # its L2-reset loops call the persisting-L2 reset the timing loop makes before each flush, found the same way
    *(("bench/launch_probe.py", mod) for mod in ("tools.worker.l2", "tools.worker.l2.find_runtime")),
    # it times the truth worker's own steps one by one, in the worker's way
    *(
        ("bench/truth_cost.py", mod)
        for mod in (
            "tools.supervise.pool",
            "tools.supervise.pool.scratch_root",
            "tools.worker",
            "tools.worker.fresh",
            "tools.worker.refmod",
            "tools.worker.truth",
            "tools.worker.truth.Judge",
            "tools.worker.truth.reset_backend_flags",
        )
    ),
    # it runs the candidate worker's own timing loop against the judge's own call schedule, step by step
    *(
        ("bench/timing_breakdown.py", mod)
        for mod in (
            "tools.judge._calls",
            "tools.judge._calls.CallSchedule",
            "tools.supervise.pool",
            "tools.supervise.pool.scratch_root",
            "tools.worker",
            "tools.worker.candidate",
            "tools.worker.fresh",
            "tools.worker.refmod",
            "tools.worker.timing",
        )
    ),
}


def test_nothing_outside_tools_imports_its_internals() -> None:
    """agent/, bench/ and problems/ reach tools/ through its public names (`internal` says which). Tests
    may import internals: they test them where they live. Not checked: source handed to a fresh
    interpreter as a string (bench/compile_latency.py's probe imports the builder as a worker would); allowed:
    `MIMICS_A_WORKER`."""
    found = [
        f"{path} imports {mod}"
        for folder in ("agent", "bench", "problems")
        for path, mods in imports_of(folder).items()
        for mod in sorted(mods)
        if internal(mod) and (path, mod) not in MIMICS_A_WORKER
    ]
    assert found == []


INTERNAL = [
    "tools.judge._plan",
    "tools.judge._plan.Prepared",
    "tools.supervise.jobs",
    "tools.supervise._spawn",
]
INTERNAL += [
    "tools.supervise.jobs.run_candidate",
    "tools.worker",
    "tools.worker.build",
    "tools.worker.build.x",
]
PUBLIC = ["tools", "tools.benchmark", "tools.compile_kernel", "tools.supervise", "tools.supervise.WarmPool"]
PUBLIC += ["tools.judge", "tools.judge.check_source", "tools.cache.builds", "tools.results", "agent.loop"]


@pytest.mark.parametrize(("mod", "expected"), [(m, True) for m in INTERNAL] + [(m, False) for m in PUBLIC])
def test_internals_are_told_from_public_names(mod: str, expected: bool) -> None:
    assert internal(mod) is expected


def test_the_three_tools_are_imported_by_their_names() -> None:
    """`tools.benchmark` the attribute is the function (tools/__init__.py), so `import tools.benchmark`
    would bind a function where the reader, and mypy, expect the module: take names from it instead."""
    plain = [
        f"{path} imports {alias.name}"
        for folder in ("agent", "tools", "bench", "tests")
        for path in sorted((REPO / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name in ("tools.benchmark", "tools.compile_kernel", "tools.profile_kernel")
    ]
    assert plain == []


MAX_LINES = 450


def harness_modules() -> list[Path]:
    return sorted([*(REPO / "agent").rglob("*.py"), *(REPO / "tools").rglob("*.py")])


def test_no_module_of_the_harness_is_over_450_lines() -> None:
    long = [
        f"{p.relative_to(REPO)}: {n}"
        for p in harness_modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
    assert long == []


def test_no_class_name_is_defined_in_two_modules() -> None:
    """A name says which class: `Finished` the run's exit, not also a wire message."""
    where: dict[str, list[str]] = {}
    for path in harness_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_the_worker_package_root_imports_nothing() -> None:
    """A worker loads only what it uses: `import tools.worker.timing` must not pull the builder in."""
    assert imported_modules(REPO / "tools" / "worker" / "__init__.py") == set()


LOOP = ("agent.loop", "agent.parallel", "agent.shared", "agent.best", "agent.resume", "agent.run_setup")
"""The loop and what its trajectories share: the rooms below them never reach up to them."""


def agent_imports_outside(folder: str, allowed: tuple[str, ...]) -> list[str]:
    """What a folder imports from agent/ beyond the modules `allowed` (prefixes)."""
    return [
        f"{path} imports {mod}"
        for path, mods in imports_of(folder).items()
        for mod in sorted(mods)
        if mod.startswith("agent.") and not mod.startswith(allowed)
    ]


def test_the_run_log_stands_on_nothing_of_the_agent_but_the_exit_statuses() -> None:
    """agent/runlog (the records, the writer, the reader, the run as data) is what every room reads; it
    imports no view, no CLI, no loop, no executor."""
    assert agent_imports_outside("agent/runlog", ("agent.runlog", "agent.exits")) == []


def test_execution_imports_only_the_run_log_from_the_agent() -> None:
    assert agent_imports_outside("agent/execution", ("agent.execution", "agent.runlog")) == []


def test_views_and_report_never_reach_up_to_the_cli_or_the_loop() -> None:
    """The views are pure functions of data (the CLI owns the console); the report draws with them."""
    up = ("agent.cli", "agent.report", "agent.providers", *LOOP)
    assert offenders("agent/views", up) == []
    assert offenders("agent/report", ("agent.cli", "agent.providers", "agent.execution", *LOOP)) == []


def test_only_the_cli_imports_the_cli() -> None:
    found = offenders("agent", ("agent.cli",))
    assert [o for o in found if not o.startswith("agent/cli/")] == []


def agent_modules() -> dict[str, Path]:
    """Every module of agent/ by its dotted name (a package by its own name, not `__init__`)."""
    modules = {}
    for path in sorted((REPO / "agent").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Which agent modules each agent module imports, at any depth (function-level and TYPE_CHECKING
    imports count: a cycle that only a deferred import keeps from failing is still a cycle). `from
    agent.x import y` is an edge to agent.x.y when that is a module, else to agent.x."""
    modules = agent_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for mod in imported_modules(path):
            if mod in modules:
                edges.add(mod)
            elif mod.rpartition(".")[0] in modules:
                edges.add(mod.rpartition(".")[0])
        graph[name] = edges - {name, "agent"}
    return graph


def test_the_import_graph_of_the_agent_is_found_whole() -> None:
    graph = import_graph()
    assert {"agent.best", "agent.shared", "agent.cli.run", "agent.runlog.events"} <= graph.keys()
    assert "agent.runlog.events" in graph["agent.best"]
    assert "agent.best" in graph["agent.shared"]


def test_no_agent_module_imports_itself_round_a_cycle() -> None:
    try:
        tuple(TopologicalSorter(import_graph()).static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


def test_best_and_shared_do_not_import_each_other() -> None:
    """The cycle that was: agent.shared holds agent.best's Standings, and agent.best's re-check reads the
    run's setup, which lives below both (agent.run_setup)."""
    graph = import_graph()
    assert "agent.shared" not in graph["agent.best"]
    assert "agent.best" not in graph["agent.run_setup"]
