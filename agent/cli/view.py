"""`agent show`, `agent ls`, `agent report`: look at run logs. Exit 0 on success, 2 when a path is not a
readable run (or the options ask for a turn the run lacks). A run is a path, or a name under --runs-dir
($KERNEL_AGENT_RUNS, else runs/); `--json` prints one JSON object (agent.views.json_view) instead of the page."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape

from agent.cli.console import make_console
from agent.cli.run_options import positive_int
from agent.runlog.reader import RunReadError, default_runs_dir, list_runs, load_run, resolve_run

RUNS_DIR_HELP = "where a run given by name is looked for (default: $KERNEL_AGENT_RUNS, else runs/)"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    show = subparsers.add_parser("show", help="a run, turn by turn", description="Show a run turn by turn.")
    show.add_argument("run", help="run directory, or its name under --runs-dir")
    show.add_argument("--runs-dir", metavar="DIR", help=RUNS_DIR_HELP)
    show.add_argument(
        "--trajectory", type=positive_int, metavar="K", help="only trajectory K (a parallel run)"
    )
    which = show.add_mutually_exclusive_group()
    which.add_argument("--turn", type=positive_int, metavar="N", help="only turn N")
    which.add_argument("--last", type=positive_int, metavar="N", help="only the last N turns")
    show.add_argument(
        "--full", action="store_true", help="whole kernels, every case, what the model was told"
    )
    show.add_argument("--no-code", action="store_true", help="leave kernel source out")
    show.add_argument(
        "--follow",
        action="store_true",
        help="then keep showing new events as the run writes them, until it ends (or Ctrl-C)",
    )
    show.add_argument("--json", action="store_true", help="print the run as one JSON object")
    show.set_defaults(handler=cmd_show)

    ls = subparsers.add_parser("ls", help="runs, newest first", description="List runs, newest first.")
    ls.add_argument("runs_dir", nargs="?", help="default: $KERNEL_AGENT_RUNS, else runs/")
    ls.add_argument("--json", action="store_true", help="print the runs as one JSON object")
    ls.set_defaults(handler=cmd_ls)

    report = subparsers.add_parser(
        "report", help="a run as one HTML page", description="Write an HTML report."
    )
    report.add_argument("run", help="run directory, or its name under --runs-dir")
    report.add_argument("--runs-dir", metavar="DIR", help=RUNS_DIR_HELP)
    report.add_argument("-o", "--output", type=Path, help="default: report.html in the run directory")
    report.add_argument("--json", action="store_true", help="print the report's path as one JSON object")
    report.set_defaults(handler=cmd_report)


def fail(message: str) -> int:
    make_console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return 2


def print_json(data: dict[str, Any]) -> int:
    print(json.dumps(data), flush=True)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from agent.runlog.reader import EventTail
    from agent.views.run import ShowOptions, render_run

    if args.follow and args.turn is not None:
        return fail("--follow shows the run as it goes on: use --last N, not --turn")
    try:
        path = resolve_run(args.run, args.runs_dir)
        tail = EventTail(path)  # a follower reads on from exactly where the first read stops
        run = load_run(path, tail=tail)
    except RunReadError as exc:
        return fail(str(exc))
    turns = run.turns
    if args.trajectory is not None:
        if args.trajectory not in {t.number for t in run.trajectories}:
            have = ", ".join(str(t.number) for t in run.trajectories) or "none: not a parallel run"
            return fail(f"{run.run_id} has no trajectory {args.trajectory} (trajectories: {have})")
        turns = [t for t in turns if t.trajectory == args.trajectory]
    if args.turn is not None and args.turn not in {t.turn for t in turns}:
        have = ", ".join(str(n) for n in sorted({t.turn for t in turns})) or "none"
        return fail(f"{run.run_id} has no turn {args.turn} (turns: {have})")
    opts = ShowOptions(
        trajectory=args.trajectory, turn=args.turn, last=args.last, full=args.full, code=not args.no_code
    )
    if args.json:
        from agent.views.json_view import show_json

        return print_json(show_json(run, opts))
    if args.follow:
        from agent.views.follow import follow

        return follow(run, tail, make_console(), opts)
    make_console().print(render_run(run, opts))
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    from agent.views.run import render_ls

    runs_dir = args.runs_dir or default_runs_dir()
    try:
        listings = list_runs(runs_dir)
    except RunReadError as exc:
        return fail(str(exc))
    if args.json:
        from agent.views.json_view import ls_json

        return print_json(ls_json(runs_dir, listings))
    make_console().print(render_ls(listings), crop=False)  # a run id is never cut
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from agent.report.page import write_report

    try:
        run = load_run(resolve_run(args.run, args.runs_dir))
    except RunReadError as exc:
        return fail(str(exc))
    out = args.output or run.path / "report.html"
    try:
        write_report(run, out)
    except OSError as exc:
        return fail(f"cannot write {out}: {exc.strerror or exc}")
    if args.json:
        return print_json({"run_dir": str(run.path), "report": str(out)})
    make_console().print(f"wrote {out}", markup=False, soft_wrap=True)
    return 0
