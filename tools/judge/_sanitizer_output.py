"""What a sanitizer wrote, read back: compute-sanitizer's log (memcheck, racecheck, initcheck, synccheck)
and AddressSanitizer / UndefinedBehaviorSanitizer logs. Pure functions of text, so the formats are tested
on the CPU with recorded output (tests/fixtures/sanitizer/).

compute-sanitizer prefixes each line of its own with `========= `; a finding is a header line (`Invalid
__global__ read of size 4 bytes`, `Error: Race reported between ...`, `Uninitialized __shared__ memory
read ...`, `Barrier error detected ...`, `Program hit cudaError...`) followed by indented detail lines,
and the run ends with `ERROR SUMMARY: N errors` (racecheck: `RACECHECK SUMMARY: N hazards displayed (E
errors, W warnings)`). The tool's own failures (`Error: Device not supported`, an unknown option) are not
findings: they say the tool could not run here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FIRST_LINES = 8  # of a finding, kept for the flag and the model
MAX_LOCATION = 300

_PREFIX = re.compile(r"^=+ ?")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACE_SUMMARY = re.compile(
    r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)"
)
_AT = re.compile(r"\bat\s+(?P<loc>.+)$")
_NOT_FINDINGS = (
    "COMPUTE-SANITIZER",
    "ERROR SUMMARY",
    "RACECHECK SUMMARY",
    "LEAK SUMMARY",
    "Target application returned an error",
)
# The tool's own failures: it could not check anything (gVisor's GPU: "Device not supported").
_TOOL_FAILURE = re.compile(
    r"(?:^|\s)(?:Error|ERROR): (?!Race reported)(?P<why>.+)$|(?P<usage>unrecognised option.*|unrecognized option.*)"
)


@dataclass(frozen=True)
class Finding:
    kernel: str  # the kernel or function its location names ("" for a CUDA API error)
    text: str  # its first lines


@dataclass(frozen=True)
class Findings:
    """What one sanitizer log says: `errors` None where it has no summary (the run did not finish);
    `shown` the findings it printed, errors before warnings."""

    errors: int | None
    shown: tuple[Finding, ...] = ()
    warnings: int = 0  # racecheck's warning-level hazards (not counted as errors)
    tool_failure: str = ""  # the tool itself could not run, and why

    @property
    def first(self) -> str:
        return self.shown[0].text if self.shown else ""

    @property
    def kernel(self) -> str:
        return self.shown[0].kernel if self.shown else ""


def _own_lines(text: str) -> list[str]:
    """compute-sanitizer's lines, prefix removed (the candidate's output is not in its log file)."""
    return [_PREFIX.sub("", line.rstrip()) for line in text.splitlines() if line.startswith("=")]


def _is_header(line: str) -> bool:
    return bool(line) and not line[0].isspace() and not line.startswith(_NOT_FINDINGS)


def _blocks(lines: list[str]) -> list[list[str]]:
    """Each finding: its header and the detail lines up to its host backtrace."""
    blocks: list[list[str]] = []
    open_ = False
    for line in lines:
        if _is_header(line):
            blocks.append([line])
            open_ = True
        elif blocks and open_:
            detail = line.strip()
            if detail.startswith("Saved host backtrace"):
                open_ = False
            elif detail and len(blocks[-1]) < FIRST_LINES:
                blocks[-1].append(detail)
    return blocks


def _split_top(text: str) -> list[str]:
    """Words outside <...>: a template's arguments hold spaces."""
    words: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        depth += (ch == "<") - (ch == ">" and depth > 0)
        if ch.isspace() and depth == 0:
            if current:
                words.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


def kernel_of(location: str) -> str:
    """The function named in a finding's location: `0x70 in kern(float*)`, `kern(float*)+0x70 in a.cu:6`,
    `/path/a.cu:123:kern(float const*)`, `void ns::kern<(int)8>(T1)+0x4a0`."""
    text = re.sub(r"^0x[0-9a-fA-F]+\s+in\s+", "", location.strip())
    text = re.sub(r"^\S*:\d+:(?=[A-Za-z_~])", "", text)
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "<") - (ch == ">" and depth > 0)
        if ch == "(" and depth == 0:
            words = _split_top(text[:i])
            return words[-1][:MAX_LOCATION] if words else ""
    words = text.split()
    return re.sub(r"\+0x[0-9a-fA-F]+$", "", words[0])[:MAX_LOCATION] if words else ""


def _kernel_of_block(block: list[str]) -> str:
    for line in block:
        if m := _AT.search(line):
            return kernel_of(m["loc"])
    return ""


def _is_warning(block: list[str]) -> bool:
    return block[0].startswith(("Warning:", "WARNING:", "CUDA API Warning"))


def _tool_failure(lines: list[str], text: str) -> str:
    for line in lines or text.splitlines():
        if (m := _TOOL_FAILURE.search(line.strip())) is not None:
            return (m["why"] or m["usage"] or "").strip()[:MAX_LOCATION]
    return ""


def parse_compute_sanitizer(text: str) -> Findings:
    """The errors compute-sanitizer counted, and its first finding (an error before any warning)."""
    lines = _own_lines(text)
    counts = [int(m[1]) for line in lines if (m := _ERROR_SUMMARY.search(line))]
    races = [m for line in lines if (m := _RACE_SUMMARY.search(line))]
    errors: int | None = None
    if races:  # racecheck's own summary: its errors, not its warnings
        errors = sum(int(m[2]) for m in races)
    elif counts:
        errors = max(counts)
    warnings = sum(int(m[3]) for m in races)
    blocks = [b for b in _blocks(lines) if not _TOOL_FAILURE.search(b[0]) or "Race reported" in b[0]]
    ordered = [b for b in blocks if not _is_warning(b)] + [b for b in blocks if _is_warning(b)]
    failure = "" if errors is not None else _tool_failure(lines, text)
    shown = tuple(Finding(kernel=_kernel_of_block(b), text="\n".join(b)) for b in ordered)
    return Findings(errors=errors, shown=shown, warnings=warnings, tool_failure=failure)


# --- AddressSanitizer / UndefinedBehaviorSanitizer -------------------------------------------------------

_ASAN_ERROR = re.compile(r"ERROR: AddressSanitizer: (?P<kind>\S+)")
_UBSAN_ERROR = re.compile(r"(?P<where>\S+:\d+(?::\d+)?): runtime error: (?P<what>.*)$")
_SUMMARY_IN = re.compile(r"^SUMMARY: (?:AddressSanitizer|UndefinedBehaviorSanitizer): .*? in (?P<fn>.+)$")
_FRAME_IN = re.compile(r"^\s*#\d+ 0x[0-9a-fA-F]+ in (?P<fn>.+?)(?: /\S+| \(\S+\))?$")


@dataclass(frozen=True)
class NativeFindings:
    """What ASan and UBSan logs say: errors of each, the first finding's lines and function."""

    asan: int
    ubsan: int
    first: str = ""
    function: str = ""

    @property
    def errors(self) -> int:
        return self.asan + self.ubsan

    @property
    def kind(self) -> str:
        return "asan" if self.asan else "ubsan"


def _function_near(lines: list[str], start: int) -> str:
    """The function of a finding: its SUMMARY line's, else the first stack frame's after `start`."""
    for line in lines[start:]:
        if m := _SUMMARY_IN.match(line.strip()):
            return kernel_of(m["fn"]) or m["fn"].strip()[:MAX_LOCATION]
    for line in lines[start:]:
        if m := _FRAME_IN.match(line):
            return kernel_of(m["fn"]) or m["fn"].strip()[:MAX_LOCATION]
    return ""


def parse_native(text: str) -> NativeFindings:
    lines = text.splitlines()
    asan = [i for i, line in enumerate(lines) if _ASAN_ERROR.search(line)]
    ubsan = [i for i, line in enumerate(lines) if _UBSAN_ERROR.search(line)]
    if not asan and not ubsan:
        return NativeFindings(0, 0)
    start = min(asan + ubsan)
    first = [re.sub(r"^==\d+==", "", line).rstrip() for line in lines[start : start + FIRST_LINES]]
    return NativeFindings(
        asan=len(asan),
        ubsan=len(ubsan),
        first="\n".join(line for line in first if line.strip()),
        function=_function_near(lines, start),
    )
