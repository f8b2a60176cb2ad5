"""`--executor ray`: compiles and evaluations as Ray tasks, on a local instance or a real cluster.

Each task runs the ordinary evaluator (`agent.execution.executor.LocalEvaluator`) on the node Ray picks, so
everything the harness guarantees holds there unchanged: the truth worker, the isolated candidate worker
and the parent that judges run together on that node, and the verdict is computed there. What comes
back is the result's JSON, validated into `CompileResult` / `BenchResult` here; nothing else crosses.

Leasing is Ray's resource accounting: a compile asks for 1 CPU; an evaluation of a CUDA problem asks
for 1 GPU (Ray sets CUDA_VISIBLE_DEVICES, which the evaluator's child processes inherit); an evaluation of
a CPU problem asks for every CPU of a node (`timing_cpus`), so it never shares a node with a compile.
Each task reports when it started and ended on its node; those become the run log's lease events.

The driver ships its own `agent/` and `tools/` to the workers (`py_modules`), so every node evaluates
with the driver's harness; the nodes need the dependencies (`pip install 'kernel-agent[ray]'`).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from agent.execution.executor import Executor, KernelJob
from agent.runlog.events import LeaseEvent
from tools.problem import Problem
from tools.results import BenchResult, CompileResult
from tools.secret_env import hide_own_environ, withheld

HARNESS_ROOT = Path(__file__).resolve().parents[2]  # agent/execution/ray_executor.py -> the repo
PASSED_ENV = ("KERNEL_AGENT_CACHE", "KERNEL_AGENT_ISOLATION", "KERNEL_AGENT_HARNESS_SHA", "CUDA_HOME")


def runtime_env(local: bool) -> dict[str, Any]:
    """The harness code for every worker, and the commit it is (the shipped copy has no .git); on a
    local instance also this process's harness settings (build cache, isolation mode)."""
    from tools.envinfo import harness_sha

    env_vars = {k: os.environ[k] for k in PASSED_ENV if k in os.environ} if local else {}
    env_vars["KERNEL_AGENT_HARNESS_SHA"] = harness_sha()
    return {"py_modules": [str(HARNESS_ROOT / "agent"), str(HARNESS_ROOT / "tools")], "env_vars": env_vars}


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the cluster at `address` (or start a local instance) unless this process already has."""
    import ray

    if ray.is_initialized():
        return
    local = address is None
    with withheld():  # a local instance's processes start with no API key in their environment
        ray.init(
            address=address,
            num_cpus=num_cpus if local else None,
            include_dashboard=False,
            runtime_env=runtime_env(local),
            log_to_driver=False,
        )


def _task_record(started: float, payload: str) -> dict[str, Any]:
    import ray

    ctx = ray.get_runtime_context()
    return {
        "payload": payload,
        "started": started,
        "ended": time.time(),
        "node": ctx.get_node_id()[:8],
        "gpus": [str(g) for g in ray.get_gpu_ids()],
    }


def remote_compile(problem_json: str, code: str) -> dict[str, Any]:
    """On a worker: one compile with the ordinary evaluator."""
    from agent.execution.executor import LocalEvaluator

    hide_own_environ()  # a cluster's worker may hold keys of its own; in a PID namespace no candidate sees it
    started = time.time()
    result = LocalEvaluator().compile(Problem.model_validate_json(problem_json), code)
    return _task_record(started, result.model_dump_json())


def remote_evaluate(problem_json: str, code: str, seed: int | None) -> dict[str, Any]:
    """On a worker: one evaluation with the ordinary evaluator, on the GPU Ray gave this task (if any)."""
    from agent.execution.executor import LocalEvaluator

    hide_own_environ()
    started = time.time()
    result = LocalEvaluator().evaluate(Problem.model_validate_json(problem_json), code, None, seed=seed)
    return _task_record(started, result.model_dump_json())


def node_cpus() -> int:
    """CPUs of the smallest alive node: a CPU timing asking for this many has its node to itself."""
    import ray

    cpus = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    return max(1, int(min(c for c in cpus if c > 0)))


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


class RayExecutor(Executor):
    def __init__(self, address: str | None = None, *, timing_cpus: int | None = None) -> None:
        import ray

        super().__init__()
        connect(address)
        self._ray = ray
        self._compile = ray.remote(remote_compile).options(num_cpus=1, max_retries=0)
        self._timing_cpus = timing_cpus or node_cpus()
        self._evaluate = ray.remote(remote_evaluate)
        self._in_flight: set[Any] = set()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def _call(self, task: Any, *args: Any) -> dict[str, Any]:
        ref = task.remote(*args)
        with self._lock:
            self._in_flight.add(ref)
        try:
            return cast(dict[str, Any], self._ray.get(ref))  # a task returns its record (_task_record)
        finally:
            with self._lock:
                self._in_flight.discard(ref)

    def _record(
        self, kind: str, task: dict[str, Any], trajectory: int | None, kernel_path: str | None
    ) -> None:
        lease_id = f"ray-{kind[0]}{next(self._ids)}"
        gpus = ",".join(task["gpus"])
        resource = f"ray:{task['node']}:" + (f"gpu{gpus}" if kind == "timing" and gpus else "cpu")
        base = {"lease_id": lease_id, "kind": kind, "resource": resource, "kernel_path": kernel_path}
        held = task["ended"] - task["started"]
        self.on_event(
            LeaseEvent(timestamp=iso(task["started"]), action="acquired", trajectory=trajectory, **base)
        )
        self.on_event(
            LeaseEvent(
                timestamp=iso(task["ended"]), action="released", trajectory=trajectory, held_s=held, **base
            )
        )

    def compile(self, job: KernelJob) -> CompileResult:
        """`job.on_progress` hears nothing: a Ray task sends back its result only."""
        task = self._call(self._compile, job.problem.model_dump_json(), job.code)
        self._record("compile", task, job.trajectory, job.kernel_path)
        return CompileResult.model_validate_json(task["payload"])

    def evaluate_compiled(self, job: KernelJob, seed: int | None) -> BenchResult:
        if job.problem.spec.device == "cuda":
            task_fn = self._evaluate.options(num_gpus=1, num_cpus=1, max_retries=0)
        else:
            task_fn = self._evaluate.options(num_cpus=self._timing_cpus, max_retries=0)
        task = self._call(task_fn, job.problem.model_dump_json(), job.code, seed)
        self._record("timing", task, job.trajectory, job.kernel_path)
        return BenchResult.model_validate_json(task["payload"])

    def kill_all(self) -> None:
        with self._lock:
            refs = list(self._in_flight)
        for ref in refs:
            self._ray.cancel(ref, force=True)

    def close(self) -> None:
        self.kill_all()
