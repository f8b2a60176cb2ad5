"""Process supervision, in the harness's own process: spawning workers in their own session and PID
namespace with an allowlisted environment (`_spawn`, `isolation`), deadlines bounded by the work
(`watchdog`), job folders and the candidate worker's launch (`jobs`), the harness snapshot workers run
from (`integrity`), and the warm pool: a zygote, truth servers and workers made ahead of need (`pool`), its
device used shared or exclusively (`locks`: a timed loop alone, checks and truth beside one another).
`listen` hears each worker's start, messages and end as they happen (an evaluation's timeline).

Public: what this file re-exports; its submodules are internals of `tools/` (tests/test_architecture.py).
"""

from tools.supervise._spawn import (
    HARNESS_ROOT,
    ChildOutcome,
    Deadline,
    child_env,
    cuda_visible_devices,
    kill_all_children,
    run_child,
    visible_gpu,
)
from tools.supervise.cpu_budget import KEPT_HEAP_ENV, cpu_env
from tools.supervise.integrity import HARNESS, text_hash
from tools.supervise.jobs import Job, WarmUnavailable, describe_exit, kernel_hash, run_candidate
from tools.supervise.locks import (
    DeviceTurns,
    ExclusiveSink,
    SharedExclusiveLock,
    exclusive_listener,
    idle_mode,
)
from tools.supervise.pool import (
    EVALS_ENV,
    EVALUATIONS_PER_GPU,
    WarmPool,
    evaluations_per_gpu,
    pool_for,
    shutdown_all,
    warm_enabled,
)
from tools.supervise.timeline import listen
from tools.supervise.watchdog import Watchdog, call_bound

__all__ = [
    "HARNESS",
    "HARNESS_ROOT",
    "SharedExclusiveLock",
    "ChildOutcome",
    "Deadline",
    "DeviceTurns",
    "EVALS_ENV",
    "EVALUATIONS_PER_GPU",
    "ExclusiveSink",
    "Job",
    "WarmPool",
    "WarmUnavailable",
    "Watchdog",
    "call_bound",
    "child_env",
    "cpu_env",
    "KEPT_HEAP_ENV",
    "cuda_visible_devices",
    "describe_exit",
    "evaluations_per_gpu",
    "exclusive_listener",
    "idle_mode",
    "kernel_hash",
    "kill_all_children",
    "listen",
    "pool_for",
    "run_candidate",
    "run_child",
    "shutdown_all",
    "text_hash",
    "visible_gpu",
    "warm_enabled",
]
