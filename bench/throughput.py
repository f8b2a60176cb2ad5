"""Candidates per hour with N parallel trajectories: a benchmark, not a test.

    python bench/throughput.py problems/selective_scan_cpu.yaml --parallel 1,2 --candidates 4
    python bench/throughput.py problems/selective_scan.yaml --parallel 1,2,4 --gpus 0,1 --cached

Each of N threads plays a trajectory: it takes the next candidate, waits `--think` seconds (a stand-in for
the model's turn), then benchmarks it through the run's executor (a compile lease, then a timing lease:
exactly what `agent run --parallel N` does per benchmark call). Candidates are the problem's scripted
kernels, each with a unique comment in its C++/CUDA source so every compile is a real build, as with a
model writing new code every turn. `--cached` builds them all first (not timed): what is left is
evaluation throughput, which is what more GPUs buy. Prints one Markdown row per configuration (and
`--json` writes them): date, hardware, N, candidates finished, wall time, candidates/hour, mean seconds
holding and waiting for compile and timing leases.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import platform
import queue
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from agent.execution.executor import Executor, KernelJob, LeasedExecutor, LocalEvaluator  # noqa: E402
from agent.execution.leases import Leases, cpu_cores, visible_gpu_count  # noqa: E402
from agent.runlog.events import LeaseEvent  # noqa: E402
from tools.problem import Problem, load_problem  # noqa: E402
from tools.supervise import pool_for  # noqa: E402


def scripted_kernels(problem: Problem) -> list[str]:
    if not problem.spec.trajectory:
        raise SystemExit(f"{problem.path}: no scripted trajectory to take candidates from")
    path = (problem.path.parent / problem.spec.trajectory).resolve()
    steps = yaml.safe_load(path.read_text())["steps"]
    return [(path.parent / c["kernel_file"]).read_text() for s in steps for c in s.get("tool_calls", [])]


def with_nonce(code: str, tag: str) -> str:
    """The same kernel under a new build key: a comment in the first native source it holds."""
    return code.replace("#include", f"// throughput candidate {tag}\n#include", 1)


def candidates(problem: Problem, count: int, tag: str) -> list[str]:
    kernels = scripted_kernels(problem)
    return [with_nonce(kernels[i % len(kernels)], f"{tag}-{i}") for i in range(count)]


def cached_candidates(problem: Problem, count: int) -> list[str]:
    """The scripted kernels as they are, built now (not timed), and one evaluation to cache the
    reference's times: what the measurement then sees is evaluation alone."""
    kernels = scripted_kernels(problem)
    evaluator = LocalEvaluator()
    with cf.ThreadPoolExecutor(cpu_cores()) as pool:
        statuses = list(pool.map(lambda code: evaluator.compile(problem, code).status, kernels))
    warm = evaluator.evaluate(problem, kernels[-1], 0 if problem.spec.device == "cuda" else None)
    print(f"prebuilt {len(kernels)} kernels: {statuses}; warm-up evaluation: {warm.status}", file=sys.stderr)
    return [kernels[i % len(kernels)] for i in range(count)]


def make_executor(kind: str, gpus: list[int] | None, ray_address: str | None) -> Executor:
    if kind == "ray":
        from agent.execution.ray_executor import RayExecutor

        return RayExecutor(ray_address)
    return LeasedExecutor(Leases(gpus))


def lease_seconds(events: list[LeaseEvent], kind: str, field: str) -> float:
    values = [getattr(e, field) for e in events if e.kind == kind and getattr(e, field) is not None]
    return round(statistics.fmean(values), 2) if values else 0.0


WARM_UP_ROUNDS = 3  # evaluations a trajectory makes before the clock starts (`warm_up`)


def warm_up(
    problem: Problem, executor: Executor, codes: list[str], parallel: int, rounds: int = WARM_UP_ROUNDS
) -> float:
    """Each trajectory's first evaluations, at once and not counted: a truth server for each (a second one
    started within the N=2 measurement had cost its first evaluation 17.5 s on the H200, 5.7 s of it the
    server's start), and its reference graphs captured, at their second request (tools/worker/graphs.py).
    Both configurations are then measured as a run goes on, not as it starts. The seconds it took."""
    start = time.monotonic()

    def run(number: int) -> None:
        for r in range(rounds):
            executor.benchmark(KernelJob(problem, codes[(number + r) % len(codes)], trajectory=number))

    with cf.ThreadPoolExecutor(parallel) as pool:
        list(pool.map(run, range(1, parallel + 1)))
    return round(time.monotonic() - start, 2)


def settle(problem: Problem, gpus: list[int] | None) -> None:
    """Wait for the truth the warm-up's last evaluation began making ahead: the clock starts with it made, as
    in a run going on. Started in the measurement, it ran beside the next trajectory's first truth, both ~2x
    slower on one device (H200, 3e002d8: one N=2 evaluation of 7.95 s where the others took ~5.2 s)."""
    for gpu in gpus or [None]:
        pool = pool_for(gpu)
        if pool is not None:
            pool.wait_prefetch(problem.data_hash)


def measure(
    problem: Problem,
    executor: Executor,
    parallel: int,
    codes: list[str],
    minutes: float,
    think: float,
    warm_up_rounds: int = 0,
    gpus: list[int] | None = None,
    warm_codes: list[str] | None = None,
) -> dict[str, Any]:
    """`warm_codes` (default `codes`): what the warm-up evaluates; fresh builds warm up on builds of their own."""
    warm_up_s = 0.0
    if warm_up_rounds:
        warm_up_s = warm_up(problem, executor, warm_codes or codes, parallel, warm_up_rounds)
        settle(problem, gpus)
    events: list[LeaseEvent] = []
    executor.on_event = events.append
    todo: queue.Queue[str] = queue.Queue()
    for code in codes:
        todo.put(code)
    started = time.monotonic()
    deadline = started + minutes * 60

    phases: list[dict[str, float]] = []

    def trajectory(number: int) -> list[str]:
        statuses = []
        while time.monotonic() < deadline:
            try:
                code = todo.get_nowait()
            except queue.Empty:
                break
            time.sleep(think)
            result = executor.benchmark(KernelJob(problem, code, trajectory=number))
            statuses.append(result.status)
            phases.append({**result.phases, "seconds": result.seconds})
        return statuses

    with cf.ThreadPoolExecutor(parallel) as pool:
        statuses = [s for result in pool.map(trajectory, range(1, parallel + 1)) for s in result]
    wall = time.monotonic() - started
    return {
        "parallel": parallel,
        "candidates": len(statuses),
        "correct": statuses.count("ok"),
        "wall_s": round(wall, 1),
        "per_hour": round(len(statuses) / wall * 3600, 1) if statuses else 0.0,
        "compile_held_s": lease_seconds(events, "compile", "held_s"),
        "compile_wait_s": lease_seconds(events, "compile", "waited_s"),
        "timing_held_s": lease_seconds(events, "timing", "held_s"),
        "timing_wait_s": lease_seconds(events, "timing", "waited_s"),
        "phase_medians_s": median_phases(phases),
        "warm_up_rounds": warm_up_rounds,
        "warm_up_s": warm_up_s,
    }


def median_phases(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the evaluations (tools/judge/_phases.py), and the whole call's (`seconds`)."""
    names = dict.fromkeys(name for row in rows for name in row)
    return {name: round(statistics.median(row.get(name, 0.0) for row in rows), 3) for name in names}


def hardware(problem: Problem, gpus: list[int] | None) -> dict[str, Any]:
    from tools.envinfo import collect_env

    env = collect_env(problem)
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": env.host,
        "cpu": cpu,
        "cores": cpu_cores(),
        "gpu": env.gpu,
        "gpus": gpus,
        "torch": env.torch,
        "harness_sha": env.harness_sha,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("problem")
    p.add_argument("--parallel", default="1,2", help="trajectory counts to measure, e.g. 1,2,4")
    p.add_argument("--candidates", type=int, default=4, help="candidates per configuration")
    p.add_argument("--minutes", type=float, default=30.0, help="stop taking candidates after this long")
    p.add_argument("--think", type=float, default=0.0, help="seconds of 'model time' before each candidate")
    p.add_argument("--gpus", help="GPUs to spread timings over (default: all visible, for a CUDA problem)")
    p.add_argument("--cached", action="store_true", help="build every candidate first; time evaluation only")
    p.add_argument(
        "--warm-up",
        type=int,
        default=0,
        help="evaluations each trajectory makes first, not counted: a run going on, not one starting",
    )
    p.add_argument("--executor", choices=["local", "ray"], default="local")
    p.add_argument("--ray-address")
    p.add_argument("--json", type=Path, help="append one JSON object per configuration to this file")
    args = p.parse_args(argv)

    problem = load_problem(args.problem)
    gpus = None
    if problem.spec.device == "cuda":
        gpus = (
            [int(g) for g in args.gpus.split(",")] if args.gpus else list(range(visible_gpu_count())) or None
        )
    info = hardware(problem, gpus)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    shared = cached_candidates(problem, args.candidates) if args.cached else []
    mode = "cached builds" if args.cached else "fresh builds"
    print(
        f"{problem.name} · {mode} · think {args.think:g}s · {info['cpu']} ({info['cores']} cores) · GPU {info['gpu']} {gpus}"
    )
    print(
        "| N | candidates | correct | wall s | candidates/h | compile held / wait s | timing held / wait s |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.parallel.split(",")]:
        codes = shared or candidates(problem, args.candidates, f"{stamp}-n{n}")
        executor = make_executor(args.executor, gpus, args.ray_address)
        warm = shared or candidates(problem, n * args.warm_up, f"{stamp}-n{n}-warm-up")
        row = measure(problem, executor, n, codes, args.minutes, args.think, args.warm_up, gpus, warm)
        print(
            f"| {n} | {row['candidates']} | {row['correct']} | {row['wall_s']} | {row['per_hour']} | "
            f"{row['compile_held_s']} / {row['compile_wait_s']} | {row['timing_held_s']} / {row['timing_wait_s']} |",
            flush=True,
        )
        print(f"  phase medians (s): {row['phase_medians_s']}", file=sys.stderr, flush=True)
        if args.warm_up:
            print(
                f"  after a warm-up of {args.warm_up} evaluations a trajectory, not counted ({row['warm_up_s']} s)",
                file=sys.stderr,  # beside the phase medians: stdout is the Markdown table
                flush=True,
            )
        if args.json:
            record = {**info, "problem": problem.name, "mode": mode, "think_s": args.think, **row}
            with args.json.open("a") as out:
                out.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
