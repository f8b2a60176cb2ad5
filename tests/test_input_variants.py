"""Inputs beyond what get_inputs() draws (tools/problem.py `input_variants`): the smallest case again with
its inputs negated and scaled by 8, so a kernel fitted to the visible distribution fails; a variant the
reference itself is not finite on is not judged. Real builds and workers, on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.candidates.elementwise import candidate
from tools import benchmark
from tools.problem import load_problem
from tools.supervise import WarmPool

PROBLEMS = Path(__file__).resolve().parent / "problems"


@pytest.mark.slow  # the elementwise extension's build: the fast tier builds the scan baseline only
def test_a_kernel_fitted_to_never_negative_inputs_fails_the_negated_case(warm: WarmPool) -> None:
    """ReLU of torch.rand inputs: `return x` passes every case as drawn (KernelBench's level 1 ReLU)."""
    relu = load_problem(PROBLEMS / "elementwise_relu.yaml")
    fitted = benchmark(relu, candidate("identity"), pool=warm)
    assert fitted.status == "incorrect", fitted.message
    by_name = {c.name: c.status for c in fitted.cases}
    assert by_name == {"odd": "passed", "odd.negated": "failed", "odd.scaled": "passed"}
    honest = benchmark(relu, candidate("relu"), pool=warm)
    assert honest.status == "ok", honest.message
    assert [c.status for c in honest.cases] == ["passed"] * 3


@pytest.mark.slow  # the elementwise extension's build: the fast tier builds the scan baseline only
def test_a_variant_the_reference_is_not_finite_on_is_not_judged(warm: WarmPool) -> None:
    log = load_problem(PROBLEMS / "elementwise_log.yaml")
    result = benchmark(log, candidate("log"), pool=warm)
    assert result.status == "ok", result.message
    by_name = {c.name: c for c in result.cases}
    assert by_name["odd.negated"].status == "skipped"
    assert by_name["odd.negated"].message.startswith("not applicable")
    assert by_name["odd.scaled"].status == "passed"


def test_a_spec_can_turn_the_variants_off() -> None:
    relu = load_problem(PROBLEMS / "elementwise_relu.yaml")
    spec = relu.spec.model_copy(update={"input_variants": []})
    assert [c.name for c in relu.model_copy(update={"spec": spec}).correctness_cases] == ["odd"]
    assert [c.name for c in relu.correctness_cases] == ["odd", "odd.negated", "odd.scaled"]
