"""`agent bench PROBLEM KERNEL.py` and `agent check PROBLEM`."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.problem import Problem
    from tools.results import BenchResult

EXIT_CORRECT, EXIT_INCORRECT, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3

JOB_KERNEL = re.compile(r"(?<![\w.-])(?:[^\s\"'():]*/)?kernel\.py(?![\w.])")
"""The evaluator runs a kernel as `kernel.py` in a job folder of its own; its messages and tracebacks
name that file (and sometimes its folder), which is not the file the user gave."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="compile, check and time one kernel file against a problem")
    bench.add_argument("problem", help="problems/<name>.yaml or a KernelBench .py")
    bench.add_argument("kernel", help="a Python file defining ModelNew")
    bench.add_argument("--json", action="store_true", help="print exactly one JSON object")
    bench.add_argument(
        "--seed", type=int, default=None, help="reproduce an evaluation (default: a fresh secret seed)"
    )
    bench.add_argument(
        "--fresh-reference",
        action="store_true",
        help="time the reference again now instead of using its cached time (steadier speedups on a busy host)",
    )
    bench.add_argument(
        "--sanitize",
        action="store_true",
        help="then run it at the smallest correctness case under the sanitizer: compute-sanitizer memcheck, "
        "racecheck, initcheck (CUDA problems) or ASan+UBSan (CPU problems); each finding is a flag that "
        "makes the verdict incorrect",
    )
    bench.add_argument(
        "--sanitize-tools",
        type=tool_list,
        metavar="T,T",
        help="which tools: memcheck, racecheck, initcheck, synccheck (CUDA) or asan (CPU)",
    )
    bench.add_argument(
        "--sanitize-budget",
        type=float,
        metavar="S",
        help="seconds per tool, its start and any build included (default 120; ASan 300)",
    )
    add_problem_options(bench)
    bench.add_argument(
        "--baselines",
        action="store_true",
        help="then time honest baselines at the primary shape on the trusted side: the eager reference, its "
        "CUDA graph, torch.compile of it (time-limited) and the spec's library compositions; the kernel's "
        "speedup against each",
    )
    bench.add_argument(
        "--compile-limit",
        type=float,
        metavar="S",
        help="seconds torch.compile of the reference may take, compile and timing (default "
        "$KERNEL_AGENT_COMPILE_LIMIT, else 300)",
    )
    bench.set_defaults(handler=run_bench)
    prof = sub.add_parser("profile", help="Nsight Compute on one kernel file at the problem's primary shape")
    prof.add_argument("problem", help="problems/<name>.yaml or a KernelBench .py")
    prof.add_argument("kernel", help="a Python file defining ModelNew")
    prof.add_argument("--json", action="store_true", help="print exactly one JSON object")
    add_problem_options(prof)
    prof.set_defaults(handler=run_profile)
    check = sub.add_parser("check", help="validate a problem spec and run its reference on the smallest case")
    check.add_argument("problem")
    check.add_argument("--json", action="store_true", help="print exactly one JSON object")
    add_problem_options(check)
    check.set_defaults(handler=run_check)


def add_problem_options(parser: argparse.ArgumentParser) -> None:
    """How a problem file is taken: a bare KernelBench `.py`'s device, constants, tolerance."""
    from tools.problem import TOLERANCE_PRESETS

    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="for a bare KernelBench .py: where it runs (default: cuda where torch sees a GPU, else cpu)",
    )
    parser.add_argument(
        "--size",
        type=size_arg,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fix a module constant in every case and shape (int, float or tuple; repeatable); constants "
        "derived from it are recomputed",
    )
    parser.add_argument(
        "--tolerance", choices=list(TOLERANCE_PRESETS), help="a named tolerance (kernelbench: atol=rtol=1e-2)"
    )


def size_arg(text: str) -> tuple[str, object]:
    from tools.kbfile import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def tool_list(text: str) -> tuple[str, ...]:
    from tools.results import CPU_SANITIZER_TOOLS, CUDA_SANITIZER_TOOLS

    known = (*CUDA_SANITIZER_TOOLS, *CPU_SANITIZER_TOOLS)
    tools = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if not tools or any(t not in known for t in tools):
        raise argparse.ArgumentTypeError(f"tools are {', '.join(known)}; got {text!r}")
    return tools


def _load(args: argparse.Namespace) -> Problem | None:
    from tools.problem import ProblemError, load_problem

    try:
        return load_problem(args.problem, device=args.device, sizes=dict(args.size), tolerance=args.tolerance)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def named_as(data: Any, kernel: str) -> Any:
    """`data` (a result's JSON) with every mention of the job's kernel.py replaced by `kernel`."""
    if isinstance(data, str):
        return JOB_KERNEL.sub(lambda _: kernel, data)
    if isinstance(data, dict):
        return {key: named_as(value, kernel) for key, value in data.items()}
    if isinstance(data, list):
        return [named_as(value, kernel) for value in data]
    return data


def not_a_kernel(source: str) -> str | None:
    """Why a file cannot be a kernel, found without an evaluation (which would take many seconds to say
    so): no `ModelNew` class at module level, the evaluator's own rule (tools.judge.check_source)."""
    from tools.judge import RULES, check_source

    flags, syntax_error = check_source(source)
    if syntax_error is None and any(flag.name == "no_model_new" for flag in flags):
        return f"{RULES['no_model_new'].explanation} (a kernel is a Python file defining ModelNew)"
    return None


def run_bench(args: argparse.Namespace) -> int:
    from agent.cli.console import make_console
    from agent.views.result import bench_page
    from tools import benchmark
    from tools.results import BenchResult

    problem = _load(args)
    if problem is None:
        return EXIT_USAGE
    kernel = Path(args.kernel)
    if not kernel.is_file():
        print(f"error: {kernel}: no such kernel file", file=sys.stderr)
        return EXIT_USAGE
    source = kernel.read_text()
    if why := not_a_kernel(source):
        print(f"error: {kernel}: {why}", file=sys.stderr)
        return EXIT_USAGE
    if why := wrong_tools(problem, args.sanitize_tools):
        print(f"error: --sanitize-tools: {why}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = benchmark(
            problem,
            source,
            seed=args.seed,
            refresh_reference=args.fresh_reference,
            prefetch_next=False,  # one evaluation: nothing to prepare the next one for
        )
        if args.sanitize or args.sanitize_tools or args.sanitize_budget:
            result = sanitized(problem, source, result, args.sanitize_tools, args.sanitize_budget)
        if args.baselines:
            from tools.judge import baselines

            result = baselines(problem, result, compile_limit_s=args.compile_limit)
    except Exception as exc:  # the harness itself broke: say so plainly, exit 3
        if args.json:
            print(json.dumps({"status": "harness_error", "correct": False, "speedup": None, "flags": [],
                              "message": f"{type(exc).__name__}: {exc}", "cases": [], "timings": [],
                              "compile": None}))  # fmt: skip
        else:
            print(f"harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_HARNESS
    result = BenchResult.model_validate(named_as(result.model_dump(mode="json"), str(kernel)))
    if args.json:
        print(result.model_dump_json())
    else:
        make_console().print(bench_page(result, str(kernel)))
    if result.status == "harness_error":
        return EXIT_HARNESS
    return EXIT_CORRECT if result.correct else EXIT_INCORRECT


def run_profile(args: argparse.Namespace) -> int:
    """`agent profile`: what the model's profile_kernel returns, for a person (0 profiled, 1 not: see why)."""
    from agent.cli.console import make_console
    from agent.views.profile import profile_view
    from tools import profile_kernel

    problem = _load(args)
    if problem is None:
        return EXIT_USAGE
    kernel = Path(args.kernel)
    if not kernel.is_file():
        print(f"error: {kernel}: no such kernel file", file=sys.stderr)
        return EXIT_USAGE
    result = profile_kernel(problem, kernel.read_text())
    if args.json:
        print(result.model_dump_json())
    else:
        console = make_console()
        for part in profile_view(result, str(kernel), full=True):
            console.print(part)
    return EXIT_CORRECT if result.status == "ok" else EXIT_INCORRECT


def wrong_tools(problem: Problem, tools: tuple[str, ...] | None) -> str | None:
    """Why these tools cannot sanitize this problem (compute-sanitizer's are for CUDA, asan for C++)."""
    from tools.results import CPU_SANITIZER_TOOLS, CUDA_SANITIZER_TOOLS

    if not tools:
        return None
    fits = CPU_SANITIZER_TOOLS if problem.spec.device == "cpu" else CUDA_SANITIZER_TOOLS
    wrong = [t for t in tools if t not in fits]
    return (
        f"{', '.join(wrong)} cannot check a {problem.spec.device} problem (use {', '.join(fits)})"
        if wrong
        else None
    )


def sanitized(
    problem: Problem, source: str, result: BenchResult, tools: tuple[str, ...] | None, budget: float | None
) -> BenchResult:
    """The benchmark's result with the sanitizer's verdict folded in; a kernel that did not build and import
    is not sanitized, and the result says so."""
    from tools.judge import sanitize, with_sanitizer

    if result.compile is None or result.compile.status not in ("ok", "no_device"):
        notice = "sanitizer: not run (the kernel did not build and import)"
        return result.model_copy(update={"notices": [*result.notices, notice]})
    return with_sanitizer(result, sanitize(problem, source, tools=tools, budget_s=budget))


def defaulted_tolerance(problem: Problem) -> dict[str, float]:
    """The tolerance bounds the spec leaves out, with the values they get (a check must not pass in
    silence while the candidates will be judged by numbers the author never wrote)."""
    spec = problem.spec
    given = spec.tolerance.model_fields_set if "tolerance" in spec.model_fields_set else set()
    return {name: value for name, value in spec.tolerance.model_dump().items() if name not in given}


def defaults_note(defaults: dict[str, float]) -> str:
    from tools.problem import Tolerance

    values = ", ".join(f"{name} {value:g}" for name, value in defaults.items())
    if len(defaults) == len(Tolerance.model_fields):
        return f"note: the spec gives no tolerance; candidates are judged by the defaults: {values}"
    return f"note: the spec's tolerance leaves out {', '.join(defaults)}; the defaults apply: {values}"


def run_check(args: argparse.Namespace) -> int:
    """0 the spec is valid and its reference ran (on a machine without a GPU, on the CPU, with a note of
    what was not checked), 2 a bad spec or a reference that fails, 3 the harness could not run it."""
    from tools.judge import check_problem

    problem = _load(args)
    if problem is None:
        return EXIT_USAGE
    result = check_problem(problem)
    defaults = defaulted_tolerance(problem)
    if args.json:
        print(json.dumps({**result.model_dump(mode="json"), "defaults": {"tolerance": defaults}}))
    else:
        print(result.message)
        for item in result.not_checked:
            print(f"not checked here: {item}")
        if defaults:
            print(defaults_note(defaults))
    if result.ok:
        return EXIT_CORRECT
    return EXIT_USAGE if result.reference_failed else EXIT_HARNESS
