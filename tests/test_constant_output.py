"""A problem where a constant output passes every check (KernelBench has references whose output is
constant): no kernel is judged correct on it, a constant-returning one included; a problem where only some
checks are constant says which."""

from __future__ import annotations

import pytest
import torch

from tests.candidates import scan_variants as v
from tests.helpers import TESTS
from tools import benchmark
from tools.compare import constant_passes
from tools.problem import Problem, Tolerance, load_problem
from tools.supervise import WarmPool
from tools.supervise.fork_server import START_TIMEOUT_S

# The honest C++ scan, then what the degenerate reference does with it: one softmax over one element.
HONEST = v.with_forward_tail("y = torch.softmax(y[..., :1], dim=-1)")
# Calls its extension (as the library policy asks), then returns the constant.
CONSTANT = v.with_forward_tail("y = torch.ones_like(y[..., :1])")


@pytest.fixture(scope="module")
def constant_problem() -> Problem:
    return load_problem(TESTS / "problems" / "constant_output.yaml")


def test_a_constant_passes_only_a_truth_that_is_constant_within_the_tolerance() -> None:
    tol = Tolerance(atol=2e-4, rtol=2e-4, rel_l2=2e-5)
    assert constant_passes(torch.ones(3, 5, dtype=torch.float64), tol)
    assert constant_passes(torch.full((4,), 7.0, dtype=torch.float64) + 1e-9 * torch.arange(4), tol)
    assert not constant_passes(torch.randn(100, dtype=torch.float64), tol)
    assert not constant_passes(torch.tensor([0.0, 1e-3], dtype=torch.float64), tol)


@pytest.mark.parametrize("code", [CONSTANT, HONEST], ids=["constant", "honest"])
def test_no_kernel_is_correct_where_a_constant_passes_every_check(
    constant_problem: Problem, warm: WarmPool, code: str
) -> None:
    result = benchmark(constant_problem, code, pool=warm)
    assert result.status == "incorrect", result.message
    assert not result.correct
    assert result.speedup is None
    assert "constant_output_passes" in result.flags
    assert all(c.status == "passed" for c in result.cases)  # every output matched: the checks cannot tell


def test_an_honest_kernel_on_the_scan_is_told_nothing_about_constants(tiny: Problem, warm: WarmPool) -> None:
    result = benchmark(tiny, v.baseline(), pool=warm)
    assert result.status == "ok", result.message
    # ~5 s. After the flagged evaluations above replaced the zygote, this one's candidate took the worker the
    # prefetch had waited for, and its timed loop waited for the device the prefetch held: 180 s on every
    # CI run (Zygote.settled).
    assert result.seconds < START_TIMEOUT_S / 2, result.phases
    assert "constant_output_passes" not in result.flags
    assert not any("constant output" in n for n in result.notices)
