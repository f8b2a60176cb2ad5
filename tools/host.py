"""This host as evaluations see it: its CPUs, the thread budget a CPU problem runs on, its default device.

A CPU problem's whole evaluation (its truth, the reference's timing, the candidate, the paired check, the
baselines, the host's peaks) runs `timing_threads` threads, the same for the reference and the candidate,
set in each process's environment at its start (tools.supervise.cpu_env: set per request instead, in a
zygote's children and the truth server, it did not hold). The rest of the host is left to other work: with
every CPU in use, a thread preempted by another process stalls each of torch's parallel ops.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tools.problem import Problem


def host_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return len(getaffinity(0)) if getaffinity is not None else os.cpu_count() or 1


def timing_threads(problem: Problem) -> int | None:
    """A CPU problem's evaluations run this many threads: `timing_config.threads`, never more than the
    host has, else half its CPUs (None: a CUDA problem, unbudgeted). On a 2-core VM (2026-12-02) the demo's
    last kernel benched 3.4-3.9x quiet and 2.8-3.8x beside one busy process; with two threads everywhere it
    was 3.8-4.0x quiet and 2.1x beside it."""
    if problem.spec.device != "cpu":
        return None
    wanted = problem.spec.timing_config.threads
    return min(wanted, host_cpus()) if wanted else max(1, host_cpus() // 2)


def default_device() -> Literal["cuda", "cpu"]:
    """What this machine has: CUDA where torch sees a GPU, else the CPU."""
    import torch  # here: loading a YAML spec needs no torch

    return "cuda" if torch.cuda.is_available() else "cpu"
