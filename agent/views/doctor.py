"""`agent doctor`'s view of a `MachineReport`: one line per check (its status, name and what was found), the
fix under each part that is missing or does not match, then what this machine can and cannot run."""

from __future__ import annotations

from collections.abc import Iterator

from rich.text import Text

from agent.views.fmt import BAD_STYLE, DIM, LABEL_STYLE, OK_STYLE
from tools.machine import Capability, MachineCheck, MachineReport

STATUS_WIDTH, NAME_WIDTH = 9, 19


def check_lines(check: MachineCheck) -> Iterator[Text]:
    line = Text()
    line.append(f"{check.status:<{STATUS_WIDTH}}", style=OK_STYLE if check.status == "ok" else BAD_STYLE)
    line.append(f"{check.name:<{NAME_WIDTH}}")
    line.append(check.found)
    yield line
    if check.fix:
        yield Text(" " * (STATUS_WIDTH + NAME_WIDTH) + "fix: " + check.fix, style=DIM)


def capability_text(capability: Capability, checks: list[MachineCheck]) -> str:
    """A capability, with what blocks it where it is not ready: `CUDA problems (no GPU, nvcc mismatch)`."""
    if capability.ready:
        return capability.name
    status = {c.name: c.status for c in checks}
    why = [
        f"no {name}" if status.get(name) == "missing" else f"{name} {status.get(name)}"
        for name in capability.blocked_by
    ]
    return f"{capability.name} ({', '.join(why)})"


def summary_lines(report: MachineReport) -> Iterator[Text]:
    ready = [capability_text(c, report.checks) for c in report.capabilities if c.ready]
    yield Text.assemble(("can run: ", LABEL_STYLE), "; ".join(ready) or "nothing (fix the parts above)")
    blocked = [capability_text(c, report.checks) for c in report.capabilities if not c.ready]
    for n, text in enumerate(blocked):
        yield Text.assemble(("cannot:  " if n == 0 else " " * 9, LABEL_STYLE), text)


def doctor_view(report: MachineReport) -> Iterator[Text]:
    yield Text.assemble(("machine ", LABEL_STYLE), report.host)
    for check in report.checks:
        yield from check_lines(check)
    yield from summary_lines(report)
