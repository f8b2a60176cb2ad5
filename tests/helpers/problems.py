"""Problems changed for one test: a copy with other limits."""

from __future__ import annotations

from tools.problem import Problem


def with_budget(problem: Problem, eval_timeout_s: float) -> Problem:
    """`problem` with its evaluation's budget (`limits.eval_timeout_s`) set to `eval_timeout_s`."""
    limits = problem.spec.limits.model_copy(update={"eval_timeout_s": eval_timeout_s})
    return problem.model_copy(update={"spec": problem.spec.model_copy(update={"limits": limits})})
