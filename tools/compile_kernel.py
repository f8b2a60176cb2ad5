"""The `compile_kernel` tool, whole: what the model is told (`SPEC`), the call (`compile_kernel`), its
result (`CompileResult`, in tools/results.py beside the benchmark's, which holds one) and the text the
model reads back (`text`).

A call imports the candidate's module in a contained worker, which runs every `load_inline` build in it
(through the harness's build cache, tools/worker/build.py); what the import came to is decided in the
judge (tools/judge/_compile.py). It says nothing about correctness: that is `benchmark`'s.
"""

from __future__ import annotations

from tools import orders, wire
from tools.host import timing_threads
from tools.judge._compile import compile_result
from tools.judge._static_checks import check_source
from tools.problem import Problem
from tools.results import CompileResult
from tools.supervise import Job, WarmPool, kernel_hash, pool_for, run_candidate, visible_gpu
from tools.toolspec import ToolSpec

__all__ = ["SPEC", "CompileResult", "compile_kernel", "head_tail", "text"]

SPEC = ToolSpec(
    name="compile_kernel",
    description=(
        "Import your module in a fresh process, which builds its extension(s). Returns compiler errors "
        "at your module's line numbers, or the built kernels' resources. Cheaper than benchmark when "
        "you only want to know whether it builds; it checks nothing about correctness."
    ),
    brief="does it build? errors at your line numbers.",
)


def compile_kernel(
    problem: Problem,
    kernel_code: str,
    *,
    gpu: int | None = None,
    pool: WarmPool | None = None,
    on_progress: wire.BuildProgress | None = None,
) -> CompileResult:
    """`gpu`: the only GPU its child processes see (default: those visible to this process).
    `pool`: warm workers to fork the worker from (default: that device's, unless KERNEL_AGENT_WARM=0);
    a build cache hit then costs a fork and an import, not a new interpreter.
    `on_progress`: each `wire.Building` the worker sends while a fresh build runs (what it compiles now),
    for a live display; the candidate's process sends it, so nothing is decided on it."""
    code_hash = kernel_hash(kernel_code)
    _, syntax_error = check_source(kernel_code)
    if syntax_error:
        return CompileResult(
            status="import_error", message=f"SyntaxError: {syntax_error}", kernel_hash=code_hash
        )
    ev = pool if pool is not None else pool_for(gpu, timing_threads(problem))

    def progress(msg: wire.WorkerMessage) -> None:
        if on_progress is not None and isinstance(msg, wire.Building):
            on_progress(msg)

    with Job.create(kernel_code, ev.jobs_dir if ev else None) as job:
        if ev is None:
            with visible_gpu(gpu):
                outcome = run_candidate(job, problem, orders.COMPILE, on_message=progress)
        else:
            outcome = run_candidate(
                job,
                problem,
                orders.COMPILE,
                progress,
                launcher=ev.launch_candidate,
                secret_dirs=[ev.staging],
            )
    result = compile_result(outcome, code_hash)
    if ev is not None and (result.status in ("timeout", "crashed") or outcome.swept or outcome.bad_messages):
        ev.replace_zygote()
    return result


# --- what the model reads back ---------------------------------------------------------------------------

MAX_ERRORS = 12
OUTPUT_HEAD = 1500
OUTPUT_TAIL = 1500


def head_tail(text: str, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> str:
    """Long compiler output keeps its start (the first error) and its end (the summary)."""
    text = text.strip()
    if len(text) <= head + tail + 100:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"


def _diagnostics(result: CompileResult) -> list[str]:
    lines = []
    for err in result.errors[:MAX_ERRORS]:
        where = (
            f"line {err.candidate_line}" if err.candidate_line else (err.generated_file or "generated code")
        )
        lines.append(f"  {where}: {err.message}")
        if err.source_line:
            lines.append(f"      {err.source_line.strip()}")
    if len(result.errors) > MAX_ERRORS:
        lines.append(f"  ... and {len(result.errors) - MAX_ERRORS} more errors")
    return lines


def _resources(result: CompileResult) -> list[str]:
    lines = []
    for k in result.kernels:
        spills = f", spills {k.spill_stores}/{k.spill_loads} B" if (k.spill_stores or k.spill_loads) else ""
        smem = f", smem {k.shared_bytes} B" if k.shared_bytes else ""
        lines.append(f"  {k.name}: {k.registers} registers{spills}{smem}")
    return lines


def text(result: CompileResult) -> str:
    """The tool result the model reads: a headline that stands alone (older results are cut down to it
    when the context is bounded), then the errors at its lines or the built kernels' resources."""
    cached = ", from cache" if result.cached else ""
    if result.ok:
        lines = [f"compile_kernel PASSED: kernel compiled without errors ({result.seconds:.1f} s{cached})."]
        lines += _resources(result)
        lines.append("Compiling proves only that it builds: call benchmark to check correctness and speed.")
        return "\n".join(lines)
    first = result.message.strip().splitlines()[0] if result.message.strip() else ""
    lines = [f"compile_kernel FAILED ({result.status}): {first}"]
    lines += _diagnostics(result)
    if result.output and not result.errors:
        lines.append(head_tail(result.output))
    elif result.message.strip().count("\n"):
        lines.append(head_tail(result.message))
    return "\n".join(lines)
