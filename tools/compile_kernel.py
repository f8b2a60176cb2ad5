"""`compile_kernel(problem, kernel_code)`: import the candidate in an isolated child, building its extensions."""

from __future__ import annotations

from tools.jobs import Job, compile_result, kernel_hash, run_candidate
from tools.problem import Problem
from tools.results import CompileResult
from tools.sandbox import visible_gpu
from tools.static_checks import check_source
from tools.warm import Evaluator, evaluator_for


def compile_kernel(
    problem: Problem, kernel_code: str, *, gpu: int | None = None, evaluator: Evaluator | None = None
) -> CompileResult:
    """`gpu`: the only GPU its child processes see (default: those visible to this process).
    `evaluator`: warm workers to fork the worker from (default: that device's, unless KERNEL_AGENT_WARM=0);
    a build cache hit then costs a fork and an import, not a new interpreter."""
    code_hash = kernel_hash(kernel_code)
    _, syntax_error = check_source(kernel_code)
    if syntax_error:
        return CompileResult(
            status="import_error", message=f"SyntaxError: {syntax_error}", kernel_hash=code_hash
        )
    ev = evaluator if evaluator is not None else evaluator_for(gpu)
    request = {"mode": "compile", "cases": [], "timing": []}
    with Job.create(kernel_code, ev.jobs_dir if ev else None) as job:
        if ev is None:
            with visible_gpu(gpu):
                outcome = run_candidate(job, problem, request)
        else:
            outcome = run_candidate(
                job, problem, request, launcher=ev.launch_candidate, secret_dirs=[ev.staging]
            )
    result = compile_result(outcome, code_hash)
    if ev is not None and (result.status in ("timeout", "crashed") or outcome.swept or outcome.bad_messages):
        ev.replace_zygote()
    return result
