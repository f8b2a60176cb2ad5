"""The host time from a timed call's start to its first kernel launch (tools/worker/usage.py `first_launch`):
read from the profiled forward's events on CUDA, not applicable on the CPU (the host clock times the call
itself); and the warm-up every timed loop starts after (tools/judge/_plan.py `timing_cfgs`)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import REPO
from tools.judge._plan import timing_cfgs
from tools.problem import load_problem
from tools.results import KernelUsage
from tools.worker.usage import REGION, first_launch, profile_call


def test_the_first_launch_after_the_forward_starts_is_the_one_counted() -> None:
    events = [
        ("cudaLaunchKernel", 90.0),  # before the forward: the harness's own flush, say
        (REGION, 100.0),
        ("aten::linear", 101.0),
        ("cudaLaunchKernelExC", 142.5),
        ("cudaLaunchKernel", 160.0),
    ]
    assert first_launch(events) == {"first_launch": "measured", "first_launch_ms": pytest.approx(0.0425)}


@pytest.mark.parametrize(
    "events",
    [[("cudaLaunchKernel", 10.0)], [(REGION, 5.0), ("aten::add", 6.0)], []],
    ids=["no forward", "no launch", "nothing"],
)
def test_without_a_forward_or_a_launch_it_is_unavailable_not_zero(events: list[tuple[str, float]]) -> None:
    assert first_launch(events) == {"first_launch": "unavailable", "first_launch_ms": None}


def test_on_the_cpu_the_first_launch_is_not_applicable() -> None:
    model = torch.nn.Linear(8, 8)
    usage = KernelUsage.model_validate(profile_call(model, [torch.randn(4, 8)], "cpu"))
    assert usage.first_launch == "not_applicable"
    assert usage.first_launch_ms is None


def test_every_timed_loop_starts_after_one_warm_up_at_least() -> None:
    problem = load_problem(REPO / "tests" / "problems" / "scan_tiny.yaml")
    cold = problem.model_copy(
        update={"spec": problem.spec.model_copy(update={"timing_config": problem.spec.timing_config.model_copy(
            update={"warmup": 0})})}
    )  # fmt: skip
    candidate, reference = timing_cfgs(cold)
    assert (candidate.warmup, reference.warmup) == (1, 1)


@pytest.mark.gpu
def test_a_cuda_forward_reports_its_host_time_to_the_first_launch() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()).cuda()
    x = torch.randn(64, 256, device="cuda")
    with torch.no_grad():
        model(x)  # warm: cuBLAS's handle made
    usage = KernelUsage.model_validate(profile_call(model, [x], "cuda"))
    assert usage.first_launch == "measured"
    assert usage.first_launch_ms is not None
    assert 0 < usage.first_launch_ms < 50


def test_the_result_view_names_the_first_launch_where_measured() -> None:
    from agent.views.result import usage_text

    gpu = KernelUsage(own_share=0.4, library_share={"gemm": 0.6}, method="cuda_profiler")
    measured = gpu.model_copy(update={"first_launch": "measured", "first_launch_ms": 0.0425})
    assert usage_text(gpu) == "device time: own kernels 40% · gemm 60%"
    assert (
        usage_text(measured)
        == "device time: own kernels 40% · gemm 60% · first launch 0.043 ms into the call"
    )
