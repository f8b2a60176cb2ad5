"""The CLI's consoles: the one place a rich Console is made (renderers stay pure functions of data).

On a terminal rich lays out for the terminal's width. Into a pipe or a file there is no width, and rich
would assume 80 columns, wrapping paths, ids and table cells; there the console is `PIPE_WIDTH` wide
instead (unless $COLUMNS says otherwise) and the padding rich adds at the ends of lines is dropped.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.console import Console

PIPE_WIDTH = 160


class TrailingSpaceStripper:
    """A text stream that writes whole lines with their trailing spaces removed (rich pads table and
    padded lines to the console's width, which in a file is only noise)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.pending = ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self.stream.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending.rstrip(" "))
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


class CliConsole(Console):
    """A closed pipe is the CLI's to end (agent.cli: quietly, with its own exit code), not rich's, whose
    own handling exits 1, a code `agent bench` and `agent run` give other meanings."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def make_console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that lays out for a terminal, or for a pipe as said above."""
    stream = sys.stderr if stderr else sys.stdout
    if is_terminal(stream):
        return CliConsole(stderr=stderr, highlight=False)
    width = None if os.environ.get("COLUMNS", "").isdigit() else PIPE_WIDTH
    return CliConsole(file=TrailingSpaceStripper(stream), width=width, highlight=False)  # type: ignore[arg-type]
