"""Which of a candidate's `load_inline` arguments the trusted builder refuses to run.

The builder compiles a candidate's sources with its flags; a flag that makes the compiler or linker run a
program or load a plugin of the candidate's choosing, read its options from a file, or write outside the
build folder would let the candidate decide what is published under a key (docs/containment.md). Such a
call gets a verdict (`refusal`), never a build. Flags are checked where they reach a tool: as given, and
inside the driver's pass-through options (`-Wl,`, `-Xlinker`, nvcc's `-Xcompiler`, `--linker-options`, ...).
Stdlib only: the harness's process runs this before any build starts.
"""

from __future__ import annotations

import re

from tools.wire import BuildCall

# A driver option, and what it runs, loads or writes.
FORBIDDEN_EXACT = {
    "-wrapper": "runs the compiler's subprograms under a program of the candidate's choosing",
    "-ccbin": "names the host compiler nvcc runs",
    "--compiler-bindir": "names the host compiler nvcc runs",
    "-compiler-bindir": "names the host compiler nvcc runs",
    "-o": "names where an output is written",
    "--output-file": "names where an output is written",
    "-MF": "names where a dependency file is written",
    "-plugin": "loads a linker plugin",
    "--plugin": "loads a linker plugin",
    "-plugin-opt": "passes options to a linker plugin",
    "--plugin-opt": "passes options to a linker plugin",
    "-run": "runs what nvcc built",
    "--run": "runs what nvcc built",
    "--run-args": "runs what nvcc built",
    "-optf": "reads more options from a file",
    "--options-file": "reads more options from a file",
    "-save-temps": "writes intermediate files",
    "--save-temps": "writes intermediate files",
    "-keep-dir": "writes intermediate files to a folder of the candidate's choosing",
    "--keep-dir": "writes intermediate files to a folder of the candidate's choosing",
    "-odir": "names where an output is written",
    "--output-directory": "names where an output is written",
    "-Map": "writes a link map to a file of the candidate's choosing",
    "--dependency-output": "names where a dependency file is written",
    "--ld-path": "names the linker the compiler runs",
}
FORBIDDEN_PREFIX = {
    "@": "reads more options from a file",
    "-fplugin": "loads a compiler plugin",
    "-iplugindir": "names where compiler plugins are found",
    "-B": "names where the compiler finds its own programs",
    "-specs": "replaces the compiler driver's spec file (which names the programs it runs)",
    "--specs": "replaces the compiler driver's spec file (which names the programs it runs)",
    "-fmodule-mapper": "runs a module mapper program",
    "-fdump-": "writes compiler dumps",
    "-dumpdir": "names where auxiliary outputs are written",
    "-dumpbase": "names where auxiliary outputs are written",
    "-save-temps=": "writes intermediate files",
    "-ccbin=": "names the host compiler nvcc runs",
    "--compiler-bindir=": "names the host compiler nvcc runs",
    "--output-file=": "names where an output is written",
    "--options-file=": "reads more options from a file",
    "--keep-dir=": "writes intermediate files to a folder of the candidate's choosing",
    "--output-directory=": "names where an output is written",
    "--plugin=": "loads a linker plugin",
    "-plugin=": "loads a linker plugin",
    "--plugin-opt=": "passes options to a linker plugin",
    "-Map=": "writes a link map to a file of the candidate's choosing",
    "--Map=": "writes a link map to a file of the candidate's choosing",
    "--ld-path=": "names the linker the compiler runs",
    "-Wp,": "passes options to the preprocessor unchecked",
    "-o": "names where an output is written",
    "-MF": "names where a dependency file is written",
    "-aux-info": "writes to a file of the candidate's choosing",
    "--dependency-file": "writes to a file of the candidate's choosing",
    "--out-implib": "writes to a file of the candidate's choosing",
    "-Xpreprocessor": "passes options to the preprocessor unchecked",
}
LINKERS = {"bfd", "gold", "lld", "mold"}  # -fuse-ld= may pick among the system's linkers by name
# Options whose value is passed on to another tool, checked as that tool's flags: ("compiler" or
# "linker", for whom `-B...` means no program folder: `-Wl,-Bsymbolic`).
PASS_THROUGH_COMMA = {
    "-Wl,": "linker",
    "-Xlinker=": "linker",
    "--linker-options=": "linker",
    "-Xnvlink=": "linker",
    "--nvlink-options=": "linker",
    "-Wa,": "compiler",
    "-Xcompiler=": "compiler",
    "--compiler-options=": "compiler",
    "-Xptxas=": "compiler",
    "--ptxas-options=": "compiler",
    "-Xarchive=": "compiler",
}
PASS_THROUGH_NEXT = {
    "-Xlinker": "linker",
    "--linker-options": "linker",
    "-Xnvlink": "linker",
    "--nvlink-options": "linker",
    "-Xcompiler": "compiler",
    "--compiler-options": "compiler",
    "-Xptxas": "compiler",
    "--ptxas-options": "compiler",
    "-Xarchive": "compiler",
    "-Xassembler": "compiler",
}
# What torch writes into its ninja file unescaped: a newline or `$` would add ninja rules of its own.
UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f$]")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _why_flag(flag: str, tool: str) -> str:
    if flag in FORBIDDEN_EXACT:
        return FORBIDDEN_EXACT[flag]
    for prefix, why in FORBIDDEN_PREFIX.items():
        if flag.startswith(prefix) and not (prefix == "-B" and tool == "linker"):
            return why
    if flag.startswith("-fuse-ld=") and flag.removeprefix("-fuse-ld=") not in LINKERS:
        return f"picks a linker other than {', '.join(sorted(LINKERS))}"
    return ""


def _passed_on(flag: str) -> tuple[str, list[str]]:
    """The tool a pass-through option hands its value to, and that value's flags (`-Wl,-a,-b` → `-a`, `-b`)."""
    for prefix, tool in PASS_THROUGH_COMMA.items():
        if flag.startswith(prefix):
            return tool, [part for part in flag.removeprefix(prefix).split(",") if part]
    return "", []


def _tool_flags(flags: list[str]) -> list[tuple[str, str, str]]:
    """(as given, the flag a tool sees, that tool) for every flag and every flag passed on inside one."""
    seen: list[tuple[str, str, str]] = []
    tool_of_next = ""
    for flag in flags:
        tool = tool_of_next or "compiler"
        parts = [part for part in flag.split(",") if part] if tool_of_next else [flag]
        for part in parts:
            seen.append((flag, part, tool))
            inner_tool, inner = _passed_on(part)
            seen += [(flag, p, inner_tool) for p in inner]
        tool_of_next = PASS_THROUGH_NEXT.get(flag, "")
    return seen


def flag_refusal(flags: list[str]) -> str:
    """Why the builder will not run with `flags` (one list: extra_cflags, extra_cuda_cflags or
    extra_ldflags), or "" where it will."""
    for shown, flag, tool in _tool_flags(flags):
        if UNSAFE_CHARS.search(flag):
            return f"flag {shown!r} holds a control character or '$' (the build file would run it)"
        if why := _why_flag(flag, tool):
            return f"flag {shown!r} is refused: it {why}"
    return ""


def refusal(call: BuildCall) -> str:
    """Why the trusted builder will not build `call`, or "" where it will: its extension name (a path part),
    its flags, its include folders."""
    if not NAME.fullmatch(call.name):
        return f"extension name {call.name!r} is refused: use a Python identifier (letters, digits, _)"
    for label, flags in (
        ("extra_cflags", call.extra_cflags),
        ("extra_cuda_cflags", call.extra_cuda_cflags),
        ("extra_ldflags", call.extra_ldflags),
    ):
        if why := flag_refusal(list(flags or [])):
            return f"{label}: {why}"
    for path in call.extra_include_paths or []:
        if UNSAFE_CHARS.search(path) or path.startswith("-") or path.startswith("@"):
            return f"extra_include_paths: {path!r} is refused: not a folder name the build file can hold"
    return ""
