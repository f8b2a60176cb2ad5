"""`compile_kernel(problem, kernel_code)`: import the candidate in an isolated child, building its extensions."""

from __future__ import annotations

from tools.jobs import Job, compile_result, kernel_hash, run_candidate
from tools.problem import Problem
from tools.results import CompileResult
from tools.sandbox import visible_gpu
from tools.static_checks import check_source


def compile_kernel(problem: Problem, kernel_code: str, *, gpu: int | None = None) -> CompileResult:
    """`gpu`: the only GPU its child processes see (default: those visible to this process)."""
    code_hash = kernel_hash(kernel_code)
    _, syntax_error = check_source(kernel_code)
    if syntax_error:
        return CompileResult(
            status="import_error", message=f"SyntaxError: {syntax_error}", kernel_hash=code_hash
        )
    with Job.create(kernel_code) as job, visible_gpu(gpu):
        outcome = run_candidate(job, problem, {"mode": "compile", "cases": [], "timing": []})
    return compile_result(outcome, code_hash)
