"""What `agent run`'s options mean before a run starts: argument types, the sanitizer mode, the GPUs to
time on, and the one error a bad option or setup raises (`UsageError`: one line, exit code 2)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pathlib import Path

    from agent.providers.base import Provider
    from agent.runlog.events import ParallelChoice
    from tools.problem import Problem


SANITIZE_ENV = "KERNEL_AGENT_SANITIZE"


SanitizeMode = Literal["auto", "on", "off"]


def default_sanitize(device: str) -> SanitizeMode:
    """On CUDA problems, on wherever compute-sanitizer runs (on the H200 it costs about 20 s per new best:
    bench/results/h200/2026-12-01d); on CPU problems off, since each new kernel's ASan build costs 40-80 s
    on a 2-core machine."""
    return "auto" if device == "cuda" else "off"


def sanitize_mode(flag: bool | None, device: str = "cpu") -> SanitizeMode:
    """--sanitize / --no-sanitize, else $KERNEL_AGENT_SANITIZE, else the problem's default."""
    if flag is not None:
        return "on" if flag else "off"
    mode = os.environ.get(SANITIZE_ENV, "").strip().lower() or default_sanitize(device)
    modes: dict[str, SanitizeMode] = {"auto": "auto", "on": "on", "off": "off"}
    if mode in modes:
        return modes[mode]
    raise UsageError(f"${SANITIZE_ENV}: auto, on or off, got {mode!r}")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def parallel_count(text: str) -> int | Literal["auto"]:
    """--parallel: a number of trajectories, or `auto` (agent/execution/capacity.py)."""
    return "auto" if text.strip().lower() == "auto" else positive_int(text)


def parallel_choice(
    asked: int | Literal["auto"], executor: str, problem: Problem, gpus: list[int] | None
) -> ParallelChoice:
    """How many trajectories run at once, and why: as asked on Ray (its scheduler leases), else what this
    machine's cores, GPUs and truth hold (`auto`: the most they hold; a number: at most that)."""
    from agent.execution.capacity import Machine, choose_parallel
    from agent.runlog.events import ParallelChoice

    if executor == "ray":
        if asked == "auto":
            raise UsageError("--parallel auto weighs this machine; with --executor ray give a number")
        return ParallelChoice(asked=asked, chose=asked)
    if asked == 1:
        return ParallelChoice(asked=1, chose=1)
    return choose_parallel(asked, problem.spec.device, Machine.here(problem.spec.device, gpus))


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def gpu_list(text: str) -> list[int]:
    try:
        gpus = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of GPU indices, got {text!r}") from None
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"a comma-separated list of distinct GPU indices, got {text!r}")
    return gpus


def floor_fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 10:
        raise argparse.ArgumentTypeError(f"a fraction of the floor above 0 (0.8: 80% of it), got {text}")
    return value


def add_floor_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stop-at-floor",
        type=floor_fraction,
        metavar="F",
        help="stop once the best reaches F of the speed-of-light floor (0.8; geomean over the timing shapes)",
    )
    p.add_argument(
        "--baselines",
        action="store_true",
        help="at the end, time the best against the eager reference, its CUDA graph, torch.compile of it and "
        "the spec's library compositions (summary.json's `baselines`)",
    )


def stop_at_floor(problem: Problem, fraction: float | None) -> float | None:
    """--stop-at-floor, refused where the problem states no floor (it could never stop the run)."""
    if fraction is not None and problem.spec.floor is None:
        raise UsageError(
            f"--stop-at-floor: {problem.name} states no floor (its spec has no `floor:` FLOPs and bytes)"
        )
    return fraction


class UsageError(Exception):
    """Bad arguments or setup: shown as one line, exit code 2."""


def choose_gpus(problem: Problem, requested: list[int] | None) -> list[int] | None:
    """The local GPUs a CUDA problem's timings are spread over: --gpus, else every visible one."""
    from agent.execution.leases import visible_gpu_count

    if problem.spec.device != "cuda":
        if requested:
            raise UsageError(f"--gpus: {problem.name} is a CPU problem")
        return None
    count = visible_gpu_count()
    if requested is None:
        return list(range(count)) or None
    if count and max(requested) >= count:
        raise UsageError(f"--gpus {','.join(map(str, requested))}: only {count} GPU(s) visible")
    return requested


def provider_for(
    model: str, trajectory: Path | None, base_url: str | None, max_cost: float | None
) -> Provider:
    """`make_provider`, with what the command line must refuse: a missing optional SDK, and a cost budget
    for a model whose price is unknown (it would never stop the run). The price note is printed later."""
    from agent.providers import make_provider, price_note

    try:
        provider = make_provider(model, trajectory, base_url)
    except ModuleNotFoundError as exc:
        if not model.startswith("openai:"):
            raise
        raise UsageError(
            f"--model {model} needs the openai SDK: pip install 'kernel-agent[openai]' ({exc})"
        ) from None
    if max_cost is not None and (note := price_note(provider)):
        raise UsageError(f"--max-cost cannot limit this run: {note}")
    return provider
