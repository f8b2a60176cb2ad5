"""The three tools the model calls, each in one module (tools/compile_kernel.py, tools/benchmark.py,
tools/profile_kernel.py): `from tools import compile_kernel, benchmark, profile_kernel` gives the calls whatever was imported first, a worker's
process loads neither, the agent offers what those modules say, and a benchmark's timeline can be heard
(`tools.supervise.listen`) without reaching into the judge."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent import toolbox
from tests.helpers import REPO
from tools import compile_kernel
from tools.benchmark import SPEC as BENCHMARK_SPEC
from tools.compile_kernel import SPEC as COMPILE_SPEC
from tools.problem import Problem
from tools.profile_kernel import SPEC as PROFILE_SPEC
from tools.supervise import listen

BOTH_ARE_CALLS = """
import inspect, sys
{first}
from tools import benchmark, compile_kernel, profile_kernel
assert inspect.isfunction(benchmark) and benchmark.__module__ == "tools.benchmark", benchmark
assert inspect.isfunction(profile_kernel) and profile_kernel.__module__ == "tools.profile_kernel"
assert inspect.isfunction(compile_kernel) and compile_kernel.__module__ == "tools.compile_kernel"
from tools.benchmark import SPEC, text
assert SPEC.name == "benchmark" and callable(text)
assert inspect.ismodule(sys.modules["tools.benchmark"])
"""


def python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter that imports this checkout's tools."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)


@pytest.mark.parametrize(
    "first",
    [
        "",
        "from tools.benchmark import SPEC",
        "import tools.compile_kernel",
        "from tools.compile_kernel import text",
        "from tools.profile_kernel import SPEC",
    ],
)
def test_from_tools_import_gives_the_three_calls_whatever_came_first(first: str) -> None:
    done = python(BOTH_ARE_CALLS.format(first=first))
    assert done.returncode == 0, done.stderr


def test_a_worker_loads_neither_tool_nor_the_judge() -> None:
    done = python(
        "import sys, tools, tools.worker.fresh\n"
        "print(sorted(m for m in sys.modules if m.startswith(('tools.judge', 'tools.supervise', 'tools.benchmark'))))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_agent_offers_what_the_tools_modules_say() -> None:
    assert toolbox.schemas() == [COMPILE_SPEC.schema, BENCHMARK_SPEC.schema, PROFILE_SPEC.schema]
    assert toolbox.COMPILE.spec is COMPILE_SPEC
    assert toolbox.BENCHMARK.spec is BENCHMARK_SPEC
    assert toolbox.PROFILE.spec is PROFILE_SPEC
    lines = [line.split("(")[0] for line in toolbox.prompt_lines()]
    assert lines == ["- compile_kernel", "- benchmark", "- profile_kernel"]


NO_EXTENSION = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_listen_hears_a_workers_start_messages_and_end_and_nothing_after(tiny: Problem) -> None:
    heard: list[tuple[str, str]] = []
    with listen(lambda who, event, _name: heard.append((who, event))):
        result = compile_kernel(tiny, NO_EXTENSION)
    assert result.ok, result.message
    events = [event for who, event in heard if who == "candidate"]
    assert events[0] == "spawn"
    assert events[-1] == "exit"
    assert {"ready", "imported"} <= set(events)
    count = len(heard)
    assert compile_kernel(tiny, NO_EXTENSION).ok
    assert len(heard) == count  # the block is over: nobody listens
