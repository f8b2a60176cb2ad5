"""The harness's evaluation side, by trust zone (docs/architecture.md has the picture):

- `tools.compile_kernel`, `tools.benchmark`, `tools.profile_kernel`: the three tools the model calls, each
  in one module: what the model is told of it, the call, its result and the text the model reads back.
  `from tools import compile_kernel, benchmark, profile_kernel` gives the three calls.
- `tools.judge`: trusted, in the harness's own process. Plans an evaluation, compares outputs with the
  float64 truth, applies every guard, decides the verdict. Public: `check_problem`, `check_source`.
- `tools.worker`: runs in worker processes: beside a candidate (the candidate worker, its runtime guard,
  the timing loop, the builder and compiler shim, the zygote that forks them) or in the trusted truth
  worker. It imports nothing from the judge or from supervision (a test checks this).
- `tools.supervise`: process supervision in the harness's process: spawning and containing workers,
  deadlines, job folders, the warm pool.
- `tools.cache`: what is kept between evaluations: builds and reference times.
- Shared data, no behaviour: `tools.problem` (specs), `tools.results` (typed results), `tools.wire`
  (the worker messages), `tools.orders` (what the harness asks of a worker), `tools.toolspec` (what the model is told of a tool), `tools.envinfo` (facts
  about the machine).

Outside `tools/`, only these modules and the packages' own re-exports (their `__init__`) are imported:
`tools.judge._*`, `tools.supervise`'s submodules and all of `tools.worker` are internals
(tests/test_architecture.py).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.benchmark import benchmark as benchmark
    from tools.compile_kernel import compile_kernel as compile_kernel
    from tools.profile_kernel import profile_kernel as profile_kernel

TOOLS = ("compile_kernel", "benchmark", "profile_kernel")  # each a module here and the function it defines

__all__ = ["benchmark", "compile_kernel", "profile_kernel"]


def __getattr__(name: str) -> Any:
    """`from tools import benchmark` loads the tool on first use: a worker imports this package too, and
    must not load the judge and supervision with it."""
    if name in TOOLS:
        function = getattr(importlib.import_module(f"tools.{name}"), name)
        globals()[name] = function
        return function
    raise AttributeError(f"module 'tools' has no attribute {name!r}")


class _Package(types.ModuleType):
    """Importing `tools.benchmark` makes the import system set this package's `benchmark` to the module;
    the package keeps the function instead (the module stays in `sys.modules`, so
    `from tools.benchmark import SPEC` reaches it)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in TOOLS and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
