"""`agent run PROBLEM`: the agent loop with a live progress line; the run's log goes to runs/.

`--resume RUN_DIR` continues a stopped or killed run from its log. `--parallel N` runs N trajectories at
once (agent.parallel); `--executor ray` sends compiles and evaluations to a Ray cluster. The exit code
says why the run stopped (agent.exits, docs/scripting.md); `--json` prints the run folder and its
summary as one JSON object on stdout (everything else goes to stderr, as always).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.cli.run_options import (  # noqa: F401  (also used from here by the CLI's other commands and tests)
    SANITIZE_ENV,
    SanitizeMode,
    UsageError,
    add_floor_options,
    choose_gpus,
    gpu_list,
    non_negative_int,
    parallel_choice,
    parallel_count,
    positive_int,
    provider_for,
    sanitize_mode,
    stop_at_floor,
)

if TYPE_CHECKING:  # the CLI starts light: torch and the SDK load only inside the handler
    from rich.console import Console

    from agent.budget import Budget
    from agent.execution.executor import Executor
    from agent.exits import AgentExit
    from agent.loop import Agent
    from agent.parallel import ParallelRun
    from agent.providers.base import Provider
    from agent.run_setup import RunSetup
    from agent.runlog.events import RunConfig
    from agent.runlog.writer import RunLog
    from agent.sanitizing import RunSanitizer
    from tools.problem import Problem


def register(subparsers: Any) -> None:
    from agent.providers import DEFAULT_MODEL

    p = subparsers.add_parser("run", help="let the agent write and benchmark kernels for a problem")
    p.add_argument("problem", nargs="?", help="problem spec (.yaml) or KernelBench .py; omit with --resume")
    p.add_argument(
        "--model",
        help=f"a Claude model id, openai:<model> (any OpenAI-compatible server; key in OPENAI_API_KEY), or "
        f"'scripted' (default: {DEFAULT_MODEL} if ANTHROPIC_API_KEY is set, else the problem's scripted playback)",
    )
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="with --model openai:<model>: the server's API root, e.g. http://localhost:8000/v1 for vLLM "
        "(default: $OPENAI_BASE_URL, else OpenAI's; on --resume: the run's own)",
    )
    p.add_argument(
        "--max-turns",
        type=int,
        metavar="N",
        help="stop after this many model turns (per trajectory with --parallel; default: no limit)",
    )
    p.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="stop once model usage costs this much (default: no limit)",
    )
    p.add_argument(
        "--max-minutes",
        type=float,
        metavar="MIN",
        help="stop after MIN minutes of wall time (default: no limit)",
    )
    p.add_argument(
        "--target-speedup",
        type=float,
        metavar="X",
        help="stop once a correct kernel's speedup against the launch-free reference (the reference replayed "
        "from a CUDA graph; on a CPU the eager one) reaches X, geomean over the timing shapes (default: none)",
    )
    add_floor_options(p)
    p.add_argument(
        "--runs-dir", help="where run folders go (default: $KERNEL_AGENT_RUNS, else runs/)", metavar="DIR"
    )
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped or killed run from its log")
    p.add_argument(
        "--parallel", type=parallel_count, default=1, metavar="N", help="trajectories at once, or auto"
    )
    p.add_argument(
        "--branches",
        type=non_negative_int,
        metavar="B",
        help="trajectories started from the shared best as slots free up (default: N, or 0 with N = 1)",
    )
    p.add_argument("--gpus", type=gpu_list, metavar="0,1", help="local GPUs to use (default: all visible)")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="where tools run")
    p.add_argument("--ray-address", metavar="ADDR", help="Ray cluster to join (default: start a local one)")
    p.add_argument(
        "--sanitize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run every new best under the sanitizer (compute-sanitizer memcheck, racecheck, initcheck; "
        "ASan+UBSan on CPU problems) before it counts (default: on for CUDA problems wherever "
        f"compute-sanitizer runs, off for CPU problems; ${SANITIZE_ENV}=auto|on|off sets the default)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="when the run ends, print its folder and summary as one JSON object",
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from agent import exits
    from agent.cli.console import make_console

    console = make_console(stderr=True)
    from agent.providers.base import ProviderError
    from agent.resume import CannotResume
    from tools.problem import ProblemError

    try:
        agent = build_agent(args, console)
    except (UsageError, CannotResume, ProblemError, ProviderError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")  # as written: "kernel-agent[openai]" is no markup
        return exits.USAGE
    try:
        outcome = run_live(agent, console)
    except Exception as exc:  # a harness bug: the loop has ended the log (ModelError) before raising
        console.print_exception()
        console.print(f"[red]harness error:[/] {type(exc).__name__}: {exc}\nlog: {agent.log.dir}")
        code = exits.HARNESS_ERROR
    else:
        console.print(final_panel(agent, str(outcome), outcome.status))
        code = exits.run_exit_code(outcome, agent.standings.best is not None)
    if args.json:
        print(json.dumps(run_json(agent.log.dir, code)), file=sys.stdout, flush=True)
    return code


def run_json(run_dir: Path, exit_code: int) -> dict[str, Any]:
    """`agent run --json`: the run folder, the exit code, and summary.json's fields (its record of how the
    run ended; null where the run left none)."""
    from agent.runlog.events import RunSummary

    summary_path = run_dir / "summary.json"
    summary = RunSummary.model_validate_json(summary_path.read_text()) if summary_path.is_file() else None
    fields = summary.model_dump(mode="json") if summary else dict.fromkeys(RunSummary.model_fields)
    if summary and summary.best_kernel:
        fields["best_kernel"] = str(run_dir / summary.best_kernel)
    return {"run_dir": str(run_dir), "exit_code": exit_code, **fields}


# --- setting a run up ----------------------------------------------------------------------------


def build_agent(args: argparse.Namespace, console: Console) -> Agent | ParallelRun:
    from agent.execution.capacity import choice_lines
    from agent.runlog.events import RunConfig

    if args.resume and (args.parallel != 1 or args.executor != "local"):
        raise UsageError("--resume continues a run as it was started; leave out --parallel and --executor")
    if args.resume:
        return resume_agent(args, console)
    if not args.problem:
        raise UsageError("agent run: give a PROBLEM, or --resume RUN_DIR")
    from agent.providers import choose_model, price_note
    from tools.problem import load_problem

    problem = load_problem(args.problem)
    model, notice = choose_model(args.model)
    trajectory = trajectory_path(problem)
    provider = provider_for(model, trajectory, args.base_url, args.max_cost)
    gpus = choose_gpus(problem, args.gpus)
    choice = parallel_choice(args.parallel, args.executor, problem, gpus)  # why that many: the first lines
    for line in (notice, price_note(provider), *choice_lines(choice)):
        if line:
            console.print(f"[yellow]{line}[/]")
    config = RunConfig(
        problem_path=str(problem.path),
        provider=provider.name,
        model=provider.model,
        max_turns=args.max_turns,
        max_cost_usd=args.max_cost,
        max_minutes=args.max_minutes,
        target_speedup=args.target_speedup,
        stop_at_floor=stop_at_floor(problem, args.stop_at_floor),
        baselines=args.baselines,
        trajectory=str(trajectory) if provider.scripted and trajectory else None,
        parallel=choice.chose,
        parallel_choice=choice,
        branches=args.branches if args.branches is not None else (choice.chose if choice.chose > 1 else 0),
        gpus=gpus,
        executor=args.executor,
        ray_address=args.ray_address,
        base_url=getattr(provider, "base_url", None),
        sanitize=sanitize_mode(args.sanitize, problem.spec.device),
    )
    if config.sanitize == "on":  # before the run folder exists: a run that cannot start leaves none
        from tools.judge import sanitizer_availability

        if why := sanitizer_availability(problem, config.gpus[0] if config.gpus else None):
            raise UsageError(f"--sanitize: the sanitizer cannot run here: {why}")
    if config.parallel > 1 or config.executor != "local" or args.gpus is not None:
        return new_parallel_run(problem, provider, config, runs_dir_of(args), console)
    return new_agent(problem, provider, config, runs_dir_of(args), console)


def runs_dir_of(args: argparse.Namespace) -> Path:
    from agent.runlog.reader import default_runs_dir

    return Path(args.runs_dir or default_runs_dir())


def make_executor(config: RunConfig) -> Executor:
    if config.executor == "ray":
        try:
            from agent.execution.ray_executor import RayExecutor
        except ImportError as exc:
            raise UsageError(f"--executor ray needs Ray: pip install 'kernel-agent[ray]' ({exc})") from None
        return RayExecutor(config.ray_address)
    from agent.execution.executor import LeasedExecutor
    from agent.execution.leases import Leases

    return LeasedExecutor(Leases(config.gpus))


def new_parallel_run(
    problem: Problem, provider: Provider, config: RunConfig, runs_dir: Path, console: Console
) -> ParallelRun:
    from agent.parallel import ParallelRun

    executor = make_executor(config)  # before the run folder: Ray may be missing
    setup = run_setup(
        problem, provider, config, executor, create_log(problem, provider, config, runs_dir), console
    )
    where = f"Ray ({config.ray_address or 'local instance'})" if config.executor == "ray" else "this machine"
    gpus = f" · GPUs {','.join(map(str, config.gpus))}" if config.gpus else ""
    console.print(
        f"run [bold]{setup.log.dir}[/] · {describe_provider(provider)}\n"
        f"{config.parallel} trajectories at once, {config.branches} branches · tools on {where}{gpus}"
    )
    return ParallelRun(setup, parallel=config.parallel, branches=config.branches)


def run_setup(
    problem: Problem, provider: Provider, config: RunConfig, executor: Executor, log: RunLog, console: Console
) -> RunSetup:
    """What a run's trajectories share, as its config decides it (the same again on a resume)."""
    from agent.run_setup import RunSetup
    from agent.views.live import RichDisplay

    display = RichDisplay(console, provider.scripted)
    system = system_for(problem, config)  # measures the GPU once per host: before anything else uses it
    executor.warm_up(problem)  # the first benchmark's truth and worker, made while the first turn runs
    sanitizer = run_sanitizer(problem, config, console)
    return RunSetup(
        problem, provider, log, system, budget_of(config), executor, display, sanitizer, config.baselines
    )


def run_sanitizer(problem: Problem, config: RunConfig, console: Console) -> RunSanitizer | None:
    """The run's sanitizer as `config.sanitize` asks: off; on (refused where it cannot run here); auto, on
    where it runs here, else every new best says it was not sanitized and why. Said once, at the start."""
    from agent.sanitizing import RunSanitizer

    if config.sanitize == "off":
        return None  # asked for (run.json says so)
    from tools.judge import sanitizer_availability

    why = sanitizer_availability(problem, config.gpus[0] if config.gpus else None)
    if why and config.sanitize == "on":
        raise UsageError(f"--sanitize: the sanitizer cannot run here: {why}")
    if why:
        console.print(
            f"[yellow]sanitizer unavailable[/]: {why}; new bests are accepted unsanitized, and say so"
        )
    else:
        console.print("sanitizer on: every new best runs under it before it counts (--no-sanitize: off)")
    return RunSanitizer(unavailable=why)


def trajectory_path(problem: Problem) -> Path | None:
    return (problem.path.parent / problem.spec.trajectory).resolve() if problem.spec.trajectory else None


def create_log(problem: Problem, provider: Provider, config: RunConfig, runs_dir: Path) -> RunLog:
    from agent.runlog.events import RunInfo
    from agent.runlog.writer import RunLog, collect_environment, new_run_dir

    run_dir = new_run_dir(runs_dir, problem.name)
    info = RunInfo(
        run_id=run_dir.name,
        problem=problem.name,
        problem_hash=problem.content_hash,
        provider=provider.name,
        model=provider.model,
        scripted=provider.scripted,
        config=config,
        environment=collect_environment(problem),
    )
    return RunLog.create(run_dir, info)


def new_agent(
    problem: Problem, provider: Provider, config: RunConfig, runs_dir: Path, console: Console
) -> Agent:
    from agent.conversation import State
    from agent.loop import Agent
    from agent.prompt import first_user_message

    log = create_log(problem, provider, config, runs_dir)
    console.print(f"run [bold]{log.dir}[/] · {describe_provider(provider)}")
    state = State(messages=[{"role": "user", "content": first_user_message(problem)}])
    return Agent(run_setup(problem, provider, config, make_executor(config), log, console), state)


def resume_agent(args: argparse.Namespace, console: Console) -> Agent:
    return reopen_agent(
        Path(args.resume), console, args.problem, args.model, limit_overrides(args), base_url=args.base_url
    )


def reopen_agent(
    run_dir: Path,
    console: Console,
    problem_arg: str | None = None,
    model_arg: str | None = None,
    overrides: dict[str, Any] | None = None,
    provider: Provider | None = None,
    base_url: str | None = None,
) -> Agent:
    """An agent continuing the run in `run_dir` exactly where its log ends (an OpenAI-compatible run at
    the server it used, unless `base_url` moves it)."""
    from agent.loop import Agent
    from agent.providers import model_spec, price_note
    from agent.resume import resumable, state_from_log
    from agent.runlog.writer import RunLog
    from agent.shared import Shared

    info, problem = resumable(run_dir, problem_arg, model_arg)
    config = info.config.model_copy(update={k: v for k, v in (overrides or {}).items() if v is not None})
    if provider is None:
        trajectory = Path(info.config.trajectory) if info.config.trajectory else trajectory_path(problem)
        spec, url = model_spec(info.provider, info.model), base_url or info.config.base_url
        provider = provider_for(spec, trajectory, url, config.max_cost_usd)
    (run_dir / "summary.json").unlink(missing_ok=True)  # running again: a viewer must not see it as ended
    log = RunLog.reopen(run_dir)
    state, standings = state_from_log(problem, run_dir)
    console.print(f"resuming [bold]{run_dir}[/] at turn {state.turn + 1} · {describe_provider(provider)}")
    if note := price_note(provider):
        console.print(f"[yellow]{note}[/]")
    setup = run_setup(problem, provider, config, make_executor(config), log, console)
    return Agent(setup, state, Shared(standings))


def limit_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_turns": args.max_turns,
        "max_cost_usd": args.max_cost,
        "max_minutes": args.max_minutes,
        "target_speedup": args.target_speedup,
        "stop_at_floor": args.stop_at_floor,
    }


def budget_of(config: RunConfig) -> Budget:
    from agent.budget import Budget

    return Budget(
        max_turns=config.max_turns,
        max_cost_usd=config.max_cost_usd,
        max_minutes=config.max_minutes,
        target_speedup=config.target_speedup,
        stop_at_floor=config.stop_at_floor,
    )


def system_for(problem: Problem, config: RunConfig) -> str:
    """The system prompt; the same run.json config gives the same prompt on resume."""
    from agent.prompt import system_prompt
    from tools.envinfo import hardware_summary

    return system_prompt(problem, hardware_summary(problem), budget_of(config))


def describe_provider(provider: Provider) -> str:
    if provider.scripted:
        return f"[yellow]scripted playback[/] of {getattr(provider, 'path', 'a trajectory')} (no model calls, zero cost)"
    where = getattr(provider, "base_url", None)  # an OpenAI-compatible server's (no secret: public_url)
    return f"{provider.name} · {provider.model}" + (f" at {where}" if where else "")


def run_live(run: Agent | ParallelRun, console: Console) -> AgentExit:
    """`run.run()` under the status line, which is gone once it returns."""
    from rich.live import Live

    from agent.views.live import RichDisplay

    display = run.display
    assert isinstance(display, RichDisplay)
    with Live(
        display.status_line(run.progress()), console=console, refresh_per_second=4, transient=True
    ) as live:
        display.live = live
        return run.run()


def final_panel(agent: Agent | ParallelRun, message: str, status: str) -> str:
    from agent.views.fmt import fmt_count, fmt_figures

    s, best_kernel = agent.state, agent.standings.best
    best = (
        f"{fmt_figures(best_kernel, best_kernel.speedup)} ({agent.log.dir / 'best.py'})"
        if best_kernel
        else "no correct kernel"
    )
    tokens = (
        "0 tokens, $0.00 (scripted playback)"
        if agent.setup.provider.scripted
        else (
            f"tokens in={s.usage.tokens_in:,} out={s.usage.output_tokens:,} (thinking {s.usage.thinking_tokens:,}), ${s.cost_usd:.2f}"
        )
    )
    return f"[bold]{status}[/]: {message}\n{fmt_count(s.turn, 'turn')} · {tokens} · best {best}\nlog: {agent.log.dir}"
