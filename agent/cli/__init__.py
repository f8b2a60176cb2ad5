"""`agent` command line: each subcommand lives in its own module of this package (`bench`, `run`,
`suite`, `view`) with a `register(subparsers)`; `python -m agent.cli` runs `main` (agent/cli/__main__.py).

Only the CLI owns the rich Console; everything it prints is rendered by pure functions elsewhere.
Exit codes: 0 success/correct, 1 evaluated but not correct, 2 bad problem or usage, 3 harness error;
`agent run` adds why a run stopped (agent.exits). Every subcommand's `--json` prints one JSON object.
A reader that closes the pipe early (`agent show RUN | head`) ends the command quietly with
`EXIT_BROKEN_PIPE`, 128 + SIGPIPE, the code a shell reports for a tool that SIGPIPE stopped.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import signal
import sys

COMMAND_MODULES = [
    "agent.cli.bench",
    "agent.cli.doctor",
    "agent.cli.run",
    "agent.cli.redteam",
    "agent.cli.suite",
    "agent.cli.view",
]
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def version_text() -> str:
    """`agent --version`: the package version and the harness commit that results record."""
    from tools.envinfo import harness_sha

    try:
        version = importlib.metadata.version("kernel-agent")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    return f"kernel-agent {version} (harness {harness_sha()})"


class VersionAction(argparse.Action):
    """Like argparse's "version" action, but the text (a git call) is made only when asked for."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent", description="LLM-written kernels, honestly measured.")
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from tools.secret_env import hide_own_environ

    # Keys stay in os.environ for the providers, out of /proc/<pid>/environ and of what this starts.
    for refused in hide_own_environ():
        print(f"kernel-agent: secrets not hidden from other processes: {refused}", file=sys.stderr)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # now, so that a closed pipe is met here rather than at interpreter exit
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return quiet_broken_pipe()
    except Exception as exc:
        from agent.execution.interrupts import raised_by_ctrl_c

        if not raised_by_ctrl_c(exc):
            raise
        print("interrupted", file=sys.stderr)
        return 130


def quiet_broken_pipe() -> int:
    """The reader of stdout has gone: no traceback, and nothing more written (Python's documented way:
    stdout onto /dev/null, so the interpreter's last flush does not fail again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE
