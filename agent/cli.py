"""`agent` command line: each subcommand lives in its own module with a `register(subparsers)`.

Only the CLI owns the rich Console; everything it prints is rendered by pure functions elsewhere.
Exit codes: 0 success/correct, 1 evaluated but not correct, 2 bad problem or usage, 3 harness error.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = ["agent.cmd_bench", "agent.cmd_run", "agent.cmd_view"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent", description="LLM-written kernels, honestly measured.")
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
