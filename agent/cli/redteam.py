"""`agent redteam PROBLEM`: `agent run`'s loop with a system prompt that asks the model to obtain the highest
reported speedup by any means, naming its attack in each candidate; then every candidate the evaluator
accepted is judged again by stricter checks, each disagreement written out as a regression case under the
run (`redteam/<case>/`), and the summary printed (agent/redteam/, agent/views/redteam.py).

`agent redteam promote RUN/CASE`: copies that case into tests/adversarial/promoted/ (tests/adversarial/
test_promoted.py judges each promoted case again and asserts its stricter verdict).

Without ANTHROPIC_API_KEY (or with `--model scripted`) it plays back the problem's red-team trajectory:
`redteam.yaml` beside its scripted trajectory (problems/selective_scan_cpu/redteam.yaml), or `--trajectory`.
Exit codes as `agent run`'s; promote: 0 copied, 2 no such case or a different one already promoted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.cli.run import (
    create_log,
    describe_provider,
    final_panel,
    make_executor,
    run_json,
    run_live,
    run_setup,
    runs_dir_of,
    trajectory_path,
)
from agent.cli.run_options import UsageError, provider_for

if TYPE_CHECKING:
    from rich.console import Console

    from agent.redteam.agent import RedTeamAgent
    from tools.problem import Problem

PROMOTE = "promote"
REDTEAM_TRAJECTORY = "redteam.yaml"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "redteam",
        help="let the agent attack the evaluator, then re-judge what it accepted (or: promote RUN/CASE)",
        description="agent redteam PROBLEM: red-team the evaluator. agent redteam promote RUN/CASE: copy a "
        "regression case the re-judge wrote into tests/adversarial/promoted/.",
    )
    p.add_argument("problem", help="problem spec (.yaml) or KernelBench .py; or `promote`")
    p.add_argument("case", nargs="?", help="with promote: RUN/CASE (a run folder or name, then the case)")
    p.add_argument(
        "--model", help="as for `agent run` (default: Claude with ANTHROPIC_API_KEY, else playback)"
    )
    p.add_argument("--base-url", metavar="URL", help="as for `agent run`, with --model openai:<model>")
    p.add_argument("--max-turns", type=int, metavar="N", help="stop after this many model turns")
    p.add_argument("--max-cost", type=float, metavar="USD", help="stop once model usage costs this much")
    p.add_argument("--max-minutes", type=float, metavar="MIN", help="stop after MIN minutes of wall time")
    p.add_argument(
        "--trajectory",
        metavar="FILE",
        help=f"the playback (default: {REDTEAM_TRAJECTORY} beside the problem's)",
    )
    p.add_argument(
        "--runs-dir", metavar="DIR", help="where run folders go (default: $KERNEL_AGENT_RUNS, else runs/)"
    )
    p.add_argument(
        "--into",
        metavar="DIR",
        help="with promote: the folder cases go into (default: tests/adversarial/promoted)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the run's folder, summary and re-judged candidates as JSON"
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from agent import exits
    from agent.cli.console import make_console
    from agent.providers.base import ProviderError
    from agent.redteam.cases import CaseError
    from tools.problem import ProblemError

    console = make_console(stderr=True)
    try:
        if args.problem == PROMOTE:
            return promote(args, console)
        if args.case:
            raise UsageError(
                f"agent redteam PROBLEM takes no second argument (got {args.case!r}); promote takes RUN/CASE"
            )
        agent = build_redteam(args, console)
    except (UsageError, CaseError, ProblemError, ProviderError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        return exits.USAGE
    try:
        outcome = run_live(agent, console)
    except Exception as exc:
        console.print_exception()
        console.print(f"[red]harness error:[/] {type(exc).__name__}: {exc}\nlog: {agent.log.dir}")
        code = exits.HARNESS_ERROR
    else:
        from agent.views.redteam import redteam_summary

        console.print(redteam_summary(agent.rejudged))
        console.print(final_panel(agent, str(outcome), outcome.status))
        code = outcome.exit_code  # no best is what a red-team run hopes for: every attack caught
    if args.json:
        rejudged = [e.model_dump(mode="json") for e in agent.rejudged]
        print(json.dumps(run_json(agent.log.dir, code) | {"rejudged": rejudged}), file=sys.stdout, flush=True)
    return code


def promote(args: argparse.Namespace, console: Console) -> int:
    from agent.redteam.cases import PROMOTED, find_case
    from agent.redteam.cases import promote as copy_case

    if not args.case:
        raise UsageError("agent redteam promote RUN/CASE: name the case (e.g. runs/<run>/redteam/<case>)")
    target = copy_case(find_case(args.case, runs_dir_of(args)), Path(args.into) if args.into else PROMOTED)
    console.print(f"promoted to {target} (tests/adversarial/test_promoted.py judges it)")
    if args.json:
        print(json.dumps({"promoted": str(target)}), file=sys.stdout, flush=True)
    return 0


def redteam_trajectory(problem: Problem, given: str | None) -> Path | None:
    if given:
        return Path(given).resolve()
    scripted = trajectory_path(problem)
    return scripted.parent / REDTEAM_TRAJECTORY if scripted else None


def build_redteam(args: argparse.Namespace, console: Console) -> RedTeamAgent:
    """As `agent run` builds a single run (no parallel trajectories, no resume), in red-team mode."""
    from agent.conversation import State
    from agent.providers import choose_model, price_note
    from agent.redteam.agent import RedTeamAgent
    from agent.redteam.attacks import redteam_first_message, redteam_system_prompt
    from agent.runlog.events import RunConfig
    from tools.problem import load_problem

    problem = load_problem(args.problem)
    model, notice = choose_model(args.model)
    trajectory = redteam_trajectory(problem, args.trajectory)
    provider = provider_for(model, trajectory, args.base_url, args.max_cost)
    for line in (
        notice and notice.replace("bundled trajectory", "bundled red-team trajectory"),
        price_note(provider),
    ):
        if line:
            console.print(f"[yellow]{line}[/]")
    config = RunConfig(
        problem_path=str(problem.path), provider=provider.name, model=provider.model, max_turns=args.max_turns,
        max_cost_usd=args.max_cost, max_minutes=args.max_minutes,
        trajectory=str(trajectory) if provider.scripted and trajectory else None, mode="redteam",
    )  # fmt: skip
    log = create_log(problem, provider, config, runs_dir_of(args))
    console.print(f"red team [bold]{log.dir}[/] · {describe_provider(provider)}")
    setup = run_setup(problem, provider, config, make_executor(config), log, console)
    setup = dataclasses.replace(setup, system=redteam_system_prompt(setup.system))
    state = State(messages=[{"role": "user", "content": redteam_first_message(problem.name)}])
    return RedTeamAgent(setup, state)
