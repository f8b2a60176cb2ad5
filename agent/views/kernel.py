"""A candidate's source in `agent show`: syntax-highlighted, collapsed to a window around what matters
(its first compile error, else its first change from the candidate before it), each kernel printed once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from rich.console import RenderableType
from rich.syntax import Syntax
from rich.text import Text

from agent.runlog.events import Event, ToolCallEvent
from agent.views.fmt import BAD_STYLE, DIM

COLLAPSED_LINES = 8
"""Kernel lines shown by default (a window around the first compile error when there is one)."""


@dataclass
class KernelShelf:
    """The run's kernel sources and what one page has printed of them so far."""

    sources: dict[str, str]  # by path relative to the run dir
    previous: dict[str, str]  # each kernel path -> the candidate submitted before it (the diff's base)
    code: bool = True  # print source at all
    full: bool = False  # whole files, identical ones too
    shown: set[str] = field(default_factory=set)

    @classmethod
    def of_run(cls, sources: dict[str, str], events: list[Event], code: bool, full: bool) -> KernelShelf:
        order = list(
            dict.fromkeys(e.kernel_path for e in events if isinstance(e, ToolCallEvent) and e.kernel_path)
        )
        return cls(sources, dict(zip(order[1:], order[:-1], strict=True)), code, full)


@dataclass(frozen=True)
class Focus:
    """Where to centre a collapsed kernel and why; `same_as` names an identical earlier candidate."""

    line: int | None = None
    why: str = ""
    same_as: str | None = None


def code_window(source: str, focus: int | None, full: bool) -> tuple[int, int]:
    total = len(source.splitlines())
    if full or total <= COLLAPSED_LINES:
        return 1, total
    if focus is None:
        return 1, COLLAPSED_LINES
    start = max(1, min(focus - COLLAPSED_LINES // 2, total - COLLAPSED_LINES + 1))
    return start, start + COLLAPSED_LINES - 1


def first_changed_line(source: str, previous: str) -> int | None:
    """The first line of `source` that differs from `previous` (None when identical)."""
    for number, (new, old) in enumerate(
        zip(source.splitlines(), previous.splitlines(), strict=False), start=1
    ):
        if new != old:
            return number
    new_total, old_total = len(source.splitlines()), len(previous.splitlines())
    return old_total + 1 if new_total > old_total else None


def kernel_focus(path: str, error_line: int | None, shelf: KernelShelf) -> Focus:
    """A compile error's line, else the first line changed from the previous candidate."""
    if error_line:
        return Focus(error_line, f"error at line {error_line}")
    base = shelf.previous.get(path)
    source, base_source = shelf.sources.get(path), shelf.sources.get(base or "")
    if source is None or base is None or base_source is None:
        return Focus()
    changed = first_changed_line(source, base_source)
    if changed is None:
        return Focus(None, f"same code as {base}", same_as=base)
    return Focus(changed, f"first change from {base} at line {changed}")


def kernel_view(path: str, error_line: int | None, shelf: KernelShelf) -> Iterator[RenderableType]:
    source = shelf.sources.get(path)
    if source is None:
        yield Text(f"{path} (file missing)", style=BAD_STYLE)
        return
    focus = kernel_focus(path, error_line, shelf)
    total = len(source.splitlines())
    if path in shelf.shown:
        yield Text(f"{path} · {total} lines (shown above)", style=DIM)
        return
    yield Text(f"{path} · {total} lines" + (f" · {focus.why}" if focus.why else ""), style=DIM)
    if shelf.code and (focus.same_as is None or shelf.full):
        shelf.shown.add(path)
        yield from source_view(source, focus.line, shelf.full)


def source_view(source: str, focus: int | None, full: bool) -> Iterator[RenderableType]:
    """Python source, syntax-highlighted; collapsed to a window around `focus` unless `full`."""
    total = len(source.splitlines())
    start, end = code_window(source, focus, full)
    yield Syntax(
        source,
        "python",
        line_numbers=True,
        line_range=(start, end),
        highlight_lines={focus} if focus and not full else set(),
        background_color="default",
        word_wrap=False,
    )
    if end - start + 1 < total:
        yield Text(f"… lines {start}–{end} of {total} (--full shows all)", style=DIM)
