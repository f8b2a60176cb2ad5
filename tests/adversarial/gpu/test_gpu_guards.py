"""The GPU exploit classes of issue 52, one candidate each (01 plus one kernel of guards.cu), with the
verdict the evaluator must give, and the guards' own parts on the device.

- One launch serving many timed calls (GUIDE §2 row 25). Every input of a timed call is made just before it
  (fresh storage, contents rolled by a secret offset), and after the call a device-wide synchronize ends it
  before its output is read; the output is fingerprinted and, for calls chosen in secret, checked against
  float64 truth before the next call's inputs exist. So a launch cannot compute a later call's output
  ahead (its inputs do not exist yet), and a kernel that stays resident to serve later calls is waited for
  by each call's synchronize: that time is the `escaped` time, and the result `suspect`. The test is such a
  kernel: resident across calls while they keep posting to it. Work launched after the synchronize (a
  thread) and finished before the read changes the output after the call: a late write (tools/worker/late.py).
- Weights kept in persisting L2 across the flush (row 30): L2 set aside and every weight read through a
  persisting access-policy window; the loop resets persisting lines before each flush and says so.
- A read of shared memory nothing wrote (row 27): the harness fills every SM's shared memory with NaN before
  every call (tools/worker/smem.py), so the read reaches the output as NaN and fails every case, with or
  without the sanitizer (the H200's compute-sanitizer has no shared-memory initcheck).

Run on the GPU: `python -m pytest -m gpu tests/adversarial/gpu/test_gpu_guards.py` (skipped without one).
"""

from __future__ import annotations

import pytest
import torch

from tests.adversarial.gpu import gpu_candidates as g
from tests.adversarial.gpu.test_gpu_exploits import HERE, assert_clean, record_figure
from tools import benchmark
from tools.problem import Problem, load_problem
from tools.results import BenchResult, TimingStats
from tools.worker import l2, smem, timing

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def small() -> Problem:
    return load_problem(HERE / "scan_gpu_small.yaml")


@pytest.fixture(scope="module")
def honest(small: Problem) -> BenchResult:
    result = benchmark(small, g.baseline())
    assert_clean(result)
    return result


def primary(result: BenchResult) -> TimingStats:
    timed = result.primary_timing
    assert timed is not None
    assert timed.candidate is not None, result.message
    return timed.candidate


# --- the guards' parts on the device ------------------------------------------------------------------------


def test_the_loop_resets_persisting_l2_before_every_flush_on_this_gpu() -> None:
    assert timing._RESET_L2 is not None, "torch's CUDA runtime was not found"
    l2.record_default(timing._L2_LIMIT)  # as the candidate's worker does before its import
    samples = timing.measure(
        lambda i: None, lambda i: None, device="cuda", warmup=1, min_iters=3, max_iters=5,
        target_rse=0.5, max_seconds=1.0,
    )  # fmt: skip
    assert (samples.l2_reset, samples.l2_set_aside_bytes) == ("ok", 0)


def test_the_shared_memory_poison_launches_on_this_gpu() -> None:
    torch.empty(1, device="cuda")
    smem.poison_shared()
    torch.cuda.synchronize()
    assert smem.status() == "ok"


def test_honest_01_leaves_no_l2_set_aside_and_every_reset_ran(honest: BenchResult) -> None:
    stats = primary(honest)
    assert (stats.l2_reset, stats.l2_set_aside_bytes) == ("ok", 0)
    assert not any("L2" in n for n in honest.notices)


# --- the exploits ---------------------------------------------------------------------------------------------


def test_a_kernel_resident_across_calls_is_waited_for_and_the_result_is_suspect(small: Problem) -> None:
    result = benchmark(small, g.persistent_server())
    assert [c.status for c in result.cases] == ["passed"] * len(result.cases), result.message
    assert (result.status, result.correct, result.speedup) == ("suspect", False, None), result.message
    assert result.flags == ["timing_mismatch"], result.message
    assert "escaped the timed stream" in result.flag_details[0].message
    stats = primary(result)
    assert stats.escaped_median_ms is not None
    assert stats.escaped_median_ms > 0.5 * g.SERVER_IDLE_NS / 1e6  # each call's synchronize waited for it
    record_figure("resident_kernel_escaped_ms", stats.escaped_median_ms)


def test_weights_in_persisting_l2_are_reset_before_every_flush_and_said(
    small: Problem, honest: BenchResult
) -> None:
    result = benchmark(small, g.persisting_l2_weights())
    assert (result.status, result.flags) == ("ok", []), result.message  # honest work, timed cold
    stats = primary(result)
    assert stats.l2_reset == "ok"
    assert stats.l2_set_aside_bytes is not None
    assert stats.l2_set_aside_bytes > 0
    assert any("set aside" in n and "reset before every flush" in n for n in result.notices), result.notices
    # its extra reads make it slower than 01, never faster: the weights did not stay warm
    assert stats.median_ms > 0.8 * primary(honest).median_ms
    record_figure("persisting_l2_median_vs_01", stats.median_ms / primary(honest).median_ms)


def test_a_read_of_shared_memory_nothing_wrote_gets_the_nan_poison(small: Problem) -> None:
    result = benchmark(small, g.uninitialised_shared_read())
    assert (result.status, result.correct, result.speedup) == ("incorrect", False, None), result.message
    assert [c.status for c in result.cases] == ["failed"] * len(result.cases), result.message
    assert all("NaN" in c.message for c in result.cases), [c.message for c in result.cases]
    assert all(t.candidate is None for t in result.timings)


def test_work_a_thread_finishes_after_each_timed_call_gets_no_speedup(small: Problem) -> None:
    """Wherever the thread's kernels land (before the call's synchronize: escaped; after it and before the
    harness reads the output: a late write, tools/worker/late.py; after the read: a stale output), the work is
    never timed as fast: `suspect` or `incorrect`, no speedup."""
    result = benchmark(small, g.finished_by_a_thread(len(small.correctness_cases)))
    assert [c.status for c in result.cases] == ["passed"] * len(result.cases), result.message
    assert result.status in ("suspect", "incorrect"), result.message
    assert result.speedup is None
    # On an H100 (2026-12-06) the profiler's check came first: the thread's launches are no kernel of forward's.
    assert set(result.flags) & {"timing_mismatch", "timed_output_mismatch", "no_custom_kernel"}, (
        result.message
    )
    assert set(result.flags) <= {
        "timing_mismatch",
        "timed_output_mismatch",
        "no_custom_kernel",
        "spawns_workers",
    }, result.message
    stats = primary(result)
    record_figure("thread_after_call_late_writes", float(stats.late_writes or 0), n=stats.n)
