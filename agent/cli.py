"""`agent` command line: each subcommand lives in its own module with a `register(subparsers)`.

Only the CLI owns the rich Console; everything it prints is rendered by pure functions elsewhere.
Exit codes: 0 success/correct, 1 evaluated but not correct, 2 bad problem or usage, 3 harness error;
`agent run` adds why a run stopped (agent.exits). Every subcommand's `--json` prints one JSON object.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

COMMAND_MODULES = ["agent.cmd_bench", "agent.cmd_run", "agent.cmd_view"]


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
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
