"""What a build's log says: compiler errors at the candidate's own lines, and ptxas's report of each
kernel's resources (registers, spills, shared memory). Read in the candidate's process after a build
(tools/worker/build.py); it runs no compiler itself, only `c++filt` to demangle kernel names.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path
from typing import Any

from tools.results import Diagnostic, KernelResources

_GCC_ERROR = re.compile(
    r"^(?P<file>[^\s:]+\.(?:cpp|cu|cuh|h|hpp|cc)):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$"
)
_NVCC_ERROR = re.compile(
    r"^(?P<file>[^\s(]+\.(?:cu|cuh|h|hpp))\((?P<line>\d+)\): (?:catastrophic )?error:? (?P<msg>.*)$"
)
_LINK_ERROR = re.compile(r"(undefined reference to .*|ld: .*error.*|collect2: error: .*)")
_PTXAS_ENTRY = re.compile(
    r"ptxas info\s*: (?:Compiling entry function|Function properties for) '?(?P<name>[\w$]+)'?"
)
_PTXAS_USED = re.compile(r"ptxas info\s*: Used (?P<regs>\d+) registers(?P<rest>.*)")
_PTXAS_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads"
)
_SMEM = re.compile(r"(\d+) bytes smem")


CANDIDATE_FILE = Path("kernel.py")  # the worker runs in the candidate's working dir


def candidate_line(source: str | None, line_in_source: int | None, text: str) -> int | None:
    """Where a line of a load_inline source string stands in the candidate's own .py file."""
    try:
        kernel = CANDIDATE_FILE.read_text()
    except OSError:
        return None
    if source and line_in_source is not None:
        idx = kernel.find(source)
        if idx >= 0:
            return kernel[:idx].count("\n") + line_in_source
    stripped = text.strip()
    if stripped:
        hits = [i for i, ln in enumerate(kernel.splitlines(), 1) if ln.strip() == stripped]
        if len(hits) == 1:
            return hits[0]
    return None


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def parse_ptxas(log: str) -> list[KernelResources]:
    kernels: dict[str, KernelResources] = {}
    current: str | None = None
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current = m["name"]
            kernels.setdefault(current, KernelResources(name=current))
        elif current and (m := _PTXAS_USED.search(line)):
            k = kernels[current]
            k.registers = int(m["regs"])
            if s := _SMEM.search(m["rest"]):
                k.shared_bytes = int(s.group(1))
        elif current and (m := _PTXAS_FRAME.search(line)):
            k = kernels[current]
            k.stack_bytes, k.spill_stores, k.spill_loads = int(m["stack"]), int(m["st"]), int(m["ld"])
    return [_demangled(k) for k in kernels.values()]


def _demangled(k: KernelResources) -> KernelResources:
    with contextlib.suppress(Exception):
        out = subprocess.run(["c++filt", k.name], capture_output=True, text=True, timeout=5).stdout.strip()
        if out:
            k.name = out
    return k


def _locate(generated: str, sources: list[str], line_no: int) -> tuple[str, str | None, int | None]:
    """Map a line of the generated file (main.cpp / cuda.cu) to (its text, the source, line in that source)."""
    gen_lines = generated.splitlines()
    text = gen_lines[line_no - 1] if 0 < line_no <= len(gen_lines) else ""
    for src in sources:
        idx = generated.find(src)
        if idx < 0:
            continue
        first = generated[:idx].count("\n") + 1
        if first <= line_no < first + src.count("\n") + 1:
            return text, src, line_no - first + 1
    return text, None, None


def parse_errors(log: str, build_dir: Path, args: dict[str, Any]) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    seen: set[tuple[str, int | None, str]] = set()
    for raw in log.splitlines():
        line = raw.strip()
        m = _GCC_ERROR.match(line) or _NVCC_ERROR.match(line)
        if m:
            path = Path(m["file"])
            gen_file = path.name
            line_no = int(m["line"])
            sources = as_list(
                args.get("cuda_sources") if gen_file.endswith(".cu") else args.get("cpp_sources")
            )
            generated = ""
            with contextlib.suppress(OSError):
                generated = (path if path.is_absolute() else build_dir / path).read_text()
            text, src, line_in_src = _locate(generated, sources, line_no)
            key = (gen_file, line_no, m["msg"])
            if key not in seen:
                seen.add(key)
                diags.append(
                    Diagnostic(
                        message=m["msg"],
                        generated_file=gen_file,
                        generated_line=line_no,
                        candidate_line=candidate_line(src, line_in_src, text),
                        source_line=text.rstrip(),
                    )
                )
        elif _LINK_ERROR.search(line) and len(diags) < 20:
            diags.append(Diagnostic(message=line))
    return diags[:30]
