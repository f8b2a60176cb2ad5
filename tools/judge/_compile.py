"""What an import phase (the worker importing the candidate, which runs every load_inline build) came to,
as a `CompileResult`: for `compile_kernel` (tools/compile_kernel.py) and for a benchmark's own compile."""

from __future__ import annotations

from typing import Any

from tools import wire
from tools.judge._static_checks import RULES
from tools.results import BuildInfo, CompileResult, Diagnostic, KernelResources
from tools.supervise import ChildOutcome, describe_exit


def import_seconds(outcome: ChildOutcome, done: wire.Imported | wire.ImportFailed) -> float:
    """The import's (every build's) seconds on the harness's clock: from the worker's `ready` to the import's
    end as the parent saw them arrive. The worker's own figure comes from a process whose clock the
    candidate's code can patch (`time.perf_counter` replaced at import made a build report -513 s); each
    build's own figure is only kept within this span."""
    end = outcome.at(done.event)
    if end is None:  # a message validated but not stamped: the whole child's time bounds it
        end = outcome.seconds
    return max(0.0, end - (outcome.at("ready") or 0.0))


def _merge_kernels(builds: list[BuildInfo]) -> list[KernelResources]:
    return [k for b in builds for k in b.kernels]


def compile_result(outcome: ChildOutcome, code_hash: str, *, no_device: bool = False) -> CompileResult:
    """What the import phase (which runs every load_inline build) came to; where its worker changed the build
    cache's existing entries, the message says so (the compile tool has no flags; a benchmark flags it)."""
    result = _import_phase(outcome, code_hash, no_device=no_device)
    if not outcome.cache_tampering:
        return result
    changed = "; ".join(outcome.cache_tampering[:3])
    note = f" (cache_tampering: {RULES['cache_tampering'].explanation}: {changed})"
    return result.model_copy(update={"message": (result.message + note)[:1000]})


def _import_phase(outcome: ChildOutcome, code_hash: str, *, no_device: bool) -> CompileResult:
    common: dict[str, Any] = {
        "output": outcome.output, "kernel_hash": code_hash, "containment": outcome.containment,
    }  # fmt: skip
    done = outcome.first(wire.Imported) or outcome.first(wire.ImportFailed)
    if done is None:
        status = "timeout" if outcome.timed_out else "crashed"
        return CompileResult(
            status=status, message=f"while importing kernel_code (building its extensions): {describe_exit(outcome)}",
            seconds=outcome.seconds, **common,
        )  # fmt: skip
    seconds = import_seconds(outcome, done)
    builds = [b.model_copy(update={"seconds": min(max(b.seconds, 0.0), seconds)}) for b in done.builds]
    errors = done.errors
    fields: dict[str, Any] = {
        "seconds": seconds,
        "cached": bool(builds) and all(b.cached for b in builds),
        "builds": builds,
        "errors": errors,
        "kernels": _merge_kernels(builds),
        **common,
    }
    if isinstance(done, wire.ImportFailed):
        return CompileResult(
            status=done.kind, message=_failure_message(done.kind, done.message, errors), **fields
        )
    if done.failed_build:
        return CompileResult(
            status="compile_error", message=_failure_message("compile_error", "", errors), **fields
        )
    if not done.has_model_new:
        return CompileResult(
            status="import_error", message="kernel_code must define a class named ModelNew", **fields
        )
    if no_device:
        return CompileResult(status="no_device", message="compiled; no CUDA GPU here to run it on", **fields)
    n = len(builds)
    how = "from the build cache" if fields["cached"] else f"in {fields['seconds']:.1f} s"
    return CompileResult(status="ok", message=f"compiled {n} extension{'s' * (n != 1)} {how}", **fields)


def _failure_message(kind: str, message: str, errors: list[Diagnostic]) -> str:
    if kind != "compile_error" or not errors:
        return f"{'build failed' if kind == 'compile_error' else 'import failed'}: {message}"
    lines = []
    for d in errors[:10]:
        where = (
            f"kernel.py line {d.candidate_line}"
            if d.candidate_line
            else f"{d.generated_file}:{d.generated_line}"
        )
        lines.append(
            f"{where}: error: {d.message}" + (f"\n    {d.source_line.strip()}" if d.source_line else "")
        )
    more = f"\n… and {len(errors) - 10} more errors" if len(errors) > 10 else ""
    return "build failed:\n" + "\n".join(lines) + more + missing_include_hint(errors)


def missing_include_hint(errors: list[Diagnostic]) -> str:
    """Why an #include the candidate wrote was not found: the harness builds in its own process
    (tools/supervise/builder.py), which sees none of the files the candidate's module wrote while it ran."""
    for d in errors:
        if (name := d.message.removesuffix(": No such file or directory")) != d.message:
            return (
                f"\n{name.strip()} was not found by the harness's builder: it compiles only the sources passed to "
                "load_inline (with the system's, torch's and CUDA's headers); files your module writes while "
                "it runs are not visible to it. Put their text into cpp_sources/cuda_sources instead."
            )
    return ""
