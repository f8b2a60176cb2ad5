"""`agent suite PROBLEMS...`: one run per problem (agent.suite), then the suite's summary.

A folder gives its `*.yaml` specs; files are taken as given. Each problem's run is an ordinary `agent run`
(its own run folder under SUITE/runs/, its transcript in SUITE/transcripts/), `--jobs` at a time over the
machine's leases; `--kernels DIR` judges kernel files instead, with no model. `--resume SUITE` runs what
has no result yet (and what Ctrl-C interrupted). Exit code: 0 when every problem ended on its own (a run
that stopped at `--max-turns`, or found no correct kernel, ended on its own), 3 when any hit a harness
error (or its model's API failed for good), 130 on Ctrl-C or with problems still to run, 2 for bad
arguments (nothing ran).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.cli.run_options import UsageError, gpu_list, positive_int

if TYPE_CHECKING:
    from rich.console import Console

    from agent.execution.leases import Leases
    from agent.providers.base import Provider
    from agent.suite.records import ProblemResult, SuiteConfig, SuiteData
    from agent.suite.runner import RunProblem, SuiteContext
    from tools.problem import Problem


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("suite", help="run (or judge kernels for) many problems; fast_p summary")
    p.add_argument("problems", nargs="*", help="problem specs, KernelBench .py files, or folders of specs")
    p.add_argument("--resume", metavar="SUITE_DIR", help="run the problems of a suite that have not ended")
    p.add_argument("--model", help="as agent run's --model (default: Claude with a key, else scripted)")
    p.add_argument("--base-url", metavar="URL", help="as agent run's, for --model openai:<model>")
    p.add_argument(
        "--kernels", metavar="DIR", help="judge DIR/<problem>.py (or DIR/<problem>/*.py); no model"
    )
    p.add_argument("--max-turns", type=int, metavar="N", help="per problem")
    p.add_argument("--max-cost", type=float, metavar="USD", help="per problem")
    p.add_argument("--max-minutes", type=float, metavar="MIN", help="per problem")
    p.add_argument(
        "--jobs",
        type=positive_int,
        metavar="N",
        help="problems at once (default: two per GPU for CUDA problems, else one per 4 cores)",
    )
    p.add_argument("--gpus", type=gpu_list, metavar="0,1", help="local GPUs to use (default: all visible)")
    p.add_argument("--runs-dir", metavar="DIR", help="where the suite folder goes (default: as agent run)")
    p.add_argument("--json", action="store_true", help="print the suite's summary as one JSON object")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from agent import exits
    from agent.cli.console import make_console
    from agent.providers.base import ProviderError
    from agent.suite.folder import SuiteError
    from tools.problem import ProblemError

    console = make_console(stderr=True)
    try:
        suite_dir, config, problems, run_problem = prepare(args, console)
    except (UsageError, SuiteError, ProblemError, ProviderError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return exits.USAGE
    return run_and_report(args, console, suite_dir, config, problems, run_problem)


def prepare(
    args: argparse.Namespace, console: Console
) -> tuple[Path, SuiteConfig, list[Problem], RunProblem]:
    """The suite folder (new, or the one resumed), its config, the problems still to run and how."""
    from agent.suite.folder import load_suite, write_config
    from tools.problem import load_problem

    if args.resume:
        if args.problems or args.kernels:
            raise UsageError("--resume runs the suite as it was started; leave out PROBLEMS and --kernels")
        suite_dir = Path(args.resume)
        data = load_suite(suite_dir)
        config = data.config.model_copy(update={"jobs": args.jobs or data.config.jobs})
        todo = set(data.pending)
        problems = [p for p in map(load_problem, config.problems) if p.name in todo]
        console.print(f"resuming [bold]{suite_dir}[/]: {len(problems)} of {len(config.problems)} to run")
        return suite_dir, config, problems, runner_for(config, problems, console)
    config, problems = new_config(args)
    run_problem = runner_for(
        config, problems, console
    )  # before the folder: a suite that cannot start leaves none
    suite_dir = make_suite_dir(args, config)
    write_config(suite_dir, config)
    return suite_dir, config, problems, run_problem


def new_config(args: argparse.Namespace) -> tuple[SuiteConfig, list[Problem]]:
    from agent.execution.leases import cpu_cores
    from agent.suite.folder import find_problems
    from agent.suite.records import SuiteConfig
    from tools.problem import load_problem

    if not args.problems:
        raise UsageError("agent suite: give problem files or folders, or --resume SUITE_DIR")
    if args.kernels and (args.model or args.base_url or args.max_turns or args.max_cost or args.max_minutes):
        raise UsageError("--kernels judges kernels with no model: leave out --model and the run limits")
    if args.kernels and not Path(args.kernels).is_dir():
        raise UsageError(f"--kernels {args.kernels}: no such folder")
    problems = [load_problem(p) for p in find_problems(args.problems)]
    names = [p.name for p in problems]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise UsageError(f"two problems are named {', '.join(twice)}: a suite files results by name")
    gpus = suite_gpus(problems, args.gpus)
    jobs = args.jobs or (2 * len(gpus) if gpus else max(1, cpu_cores() // 4))  # docs/suites.md: --jobs
    config = SuiteConfig(
        mode="kernels" if args.kernels else "model",
        problems=[str(p.path) for p in problems],
        model=args.model,
        base_url=args.base_url,
        kernels_dir=str(Path(args.kernels).resolve()) if args.kernels else None,
        max_turns=args.max_turns,
        max_cost_usd=args.max_cost,
        max_minutes=args.max_minutes,
        jobs=jobs,
        gpus=gpus,
    )
    return config, problems


def suite_gpus(problems: list[Problem], requested: list[int] | None) -> list[int] | None:
    """The GPUs the suite's CUDA problems are timed on: --gpus, else every visible one (None: CPU only)."""
    from agent.cli.run_options import choose_gpus

    cuda = [p for p in problems if p.spec.device == "cuda"]
    if not cuda:
        if requested:
            raise UsageError("--gpus: the suite has no CUDA problem")
        return None
    return choose_gpus(cuda[0], requested)


def make_suite_dir(args: argparse.Namespace, config: SuiteConfig) -> Path:
    from agent.cli.run import runs_dir_of
    from agent.suite.folder import new_suite_dir

    first = Path(args.problems[0])
    name = first.name if len(args.problems) == 1 and first.is_dir() else f"{len(config.problems)}-problems"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return new_suite_dir(runs_dir_of(args), stamp, name)


# --- how each problem runs -------------------------------------------------------------------------


def runner_for(config: SuiteConfig, problems: list[Problem], console: Console) -> RunProblem:
    """`--kernels`: the kernels judged; else a model run per problem, its provider made now (a problem
    with no scripted trajectory, or a missing SDK, is refused before anything runs)."""
    if config.mode == "kernels":
        from agent.suite.kernels import judge_kernels

        assert config.kernels_dir is not None
        kernels_dir = Path(config.kernels_dir)
        return lambda problem, context: judge_kernels(problem, context, kernels_dir)
    from agent.cli.run import trajectory_path
    from agent.cli.run_options import provider_for
    from agent.providers import choose_model, price_note

    model, notice = choose_model(config.model)
    providers = {
        p.name: provider_for(model, trajectory_path(p), config.base_url, config.max_cost_usd)
        for p in problems
    }
    for line in {notice, *(price_note(p) for p in providers.values())}:
        if line:
            console.print(f"[yellow]{line}[/]")
    return lambda problem, context: run_model(problem, context, providers[problem.name], config)


def run_model(
    problem: Problem, context: SuiteContext, provider: Provider, config: SuiteConfig
) -> ProblemResult:
    """One ordinary run of the problem, its transcript into the suite's transcripts/ folder."""
    from agent.cli.run import create_log, run_setup, trajectory_path
    from agent.cli.run_options import sanitize_mode
    from agent.conversation import State
    from agent.exits import Interrupted, ModelError, run_exit_code
    from agent.loop import Agent
    from agent.prompt import first_user_message
    from agent.runlog.events import RunConfig
    from agent.suite.folder import RUNS
    from agent.suite.runner import SuiteExecutor

    trajectory = trajectory_path(problem)
    run_config = RunConfig(
        problem_path=str(problem.path),
        provider=provider.name,
        model=provider.model,
        max_turns=config.max_turns,
        max_cost_usd=config.max_cost_usd,
        max_minutes=config.max_minutes,
        trajectory=str(trajectory) if provider.scripted and trajectory else None,
        gpus=config.gpus if problem.spec.device == "cuda" else None,
        base_url=getattr(provider, "base_url", None),
        sanitize=sanitize_mode(None),
    )
    log = create_log(problem, provider, run_config, context.suite_dir / RUNS)
    with transcript_console(context.suite_dir, problem.name) as console:
        setup = run_setup(problem, provider, run_config, SuiteExecutor(context), log, console)
        agent = Agent(setup, State(messages=[{"role": "user", "content": first_user_message(problem)}]))
        context.stops.add(
            lambda: agent.shared.stop_all(Interrupted("interrupted (Ctrl-C): the suite stopped"))
        )
        try:
            outcome = agent.run()
        except Exception as exc:  # a harness bug: the loop has ended the log (ModelError) before raising
            console.print_exception()
            outcome = ModelError(f"harness error: {type(exc).__name__}: {exc}")
    code = run_exit_code(outcome, agent.standings.best is not None)
    return result_of_run(problem, log.dir, context.suite_dir, code)


@contextlib.contextmanager
def transcript_console(suite_dir: Path, name: str) -> Iterator[Console]:
    """A console writing one problem's live transcript to SUITE/transcripts/<problem>.txt."""
    from agent.cli.console import CliConsole
    from agent.suite.folder import TRANSCRIPTS

    path = suite_dir / TRANSCRIPTS / f"{name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as stream:
        yield CliConsole(file=stream, width=160, highlight=False)


def result_of_run(problem: Problem, run_dir: Path, suite_dir: Path, code: int) -> ProblemResult:
    """The problem's result from its run's summary.json (a run that left none: a harness error)."""
    from agent.runlog.events import RunSummary, Usage
    from agent.suite.records import ProblemResult

    summary_path = run_dir / "summary.json"
    summary = RunSummary.model_validate_json(summary_path.read_text()) if summary_path.is_file() else None
    outcome = "interrupted" if code == 130 else "harness_error" if code == 3 or summary is None else "ended"
    return ProblemResult(
        problem=problem.name,
        problem_path=str(problem.path),
        device=problem.spec.device,
        outcome=outcome,
        exit_code=code,
        exit_status=summary.exit_status if summary else "ModelError",
        message=summary.message if summary else "the run left no summary.json",
        best_speedup=summary.best_speedup if summary else None,
        best_eager_speedup=summary.best_eager_speedup if summary else None,
        best_floor_fraction=summary.best_floor_fraction if summary else None,
        best_kernel=str((run_dir / summary.best_kernel).relative_to(suite_dir))
        if summary and summary.best_kernel
        else None,
        run_dir=str(run_dir.relative_to(suite_dir)),
        turns=summary.turns if summary else 0,
        usage=summary.usage if summary else Usage(),
        cost_usd=summary.cost_usd if summary else 0.0,
        wall_seconds=summary.wall_seconds if summary else 0.0,
    )


# --- running and the summary -------------------------------------------------------------------------


def run_and_report(
    args: argparse.Namespace,
    console: Console,
    suite_dir: Path,
    config: SuiteConfig,
    problems: list[Problem],
    run_problem: RunProblem,
) -> int:
    from agent.execution.leases import Leases
    from agent.report.suite_page import write_suite_page
    from agent.suite.folder import PAGE, load_suite
    from agent.suite.runner import SuiteContext, run_suite
    from agent.views.suite import suite_json, suite_view
    from tools.supervise import kill_all_children

    leases: Leases = Leases(config.gpus)
    judged = (
        f"kernels from {config.kernels_dir}" if config.mode == "kernels" else config.model or "default model"
    )
    console.print(
        f"suite [bold]{suite_dir}[/] · {len(problems)} problem(s) · {judged} · {config.jobs} at a time"
    )
    run_suite(
        problems,
        run_problem,
        SuiteContext(suite_dir, leases),
        config.jobs,
        kill_all_children,
        lambda what, problem, result: console.print(progress_line(what, problem, result)),
    )
    data = load_suite(suite_dir)
    write_run_reports(suite_dir, data)
    page = write_suite_page(data, suite_dir / PAGE)
    code = suite_exit_code(data)
    (make_stdout_console() if not args.json else console).print(suite_view(data))
    console.print(f"page: {page}\nsuite: {suite_dir}")
    if args.json:
        print(json.dumps(suite_json(data, code, str(page))), file=sys.stdout, flush=True)
    return code


def write_run_reports(suite_dir: Path, data: SuiteData) -> None:
    """Each run's `agent report` page (report.html in its folder), which suite.html links to."""
    from agent.report.page import write_report
    from agent.runlog.reader import RunReadError, load_run

    for result in data.results:
        run_dir = suite_dir / result.run_dir if result.run_dir else None
        if run_dir is None or (run_dir / "report.html").exists():
            continue
        try:
            write_report(load_run(run_dir), run_dir / "report.html")
        except RunReadError:
            continue  # an unreadable run has no page; its row says how it ended


def make_stdout_console() -> Console:
    from agent.cli.console import make_console

    return make_console()


def progress_line(what: str, problem: Problem, result: ProblemResult | None) -> str:
    from rich.markup import escape

    from agent.views.fmt import fmt_speedup

    if result is None:
        return f"  started {escape(problem.name)}"
    best = f"{fmt_speedup(result.best_speedup)} (launch-free ref)" if result.correct else "no correct kernel"
    if result.correct and result.best_floor_fraction is not None:  # the headline first, as everywhere
        best = f"{result.best_floor_fraction * 100:.0f}% of floor · {best}"
    return f"  ended   {escape(problem.name)}: {escape(result.exit_status)} (exit {result.exit_code}) · best {best}"


def suite_exit_code(data: SuiteData) -> int:
    """130: interrupted, or problems still to run; 3: a harness error; else 0 (docs/scripting.md)."""
    if data.pending:
        return 130
    if any(r.outcome == "harness_error" for r in data.results):
        return 3
    return 0
