"""The timing guards that exist on the host clock, run in CI on tests/problems/scan_tiny.yaml (the CPU twins of
the GPU exploits in test_gpu_exploits.py): patched timers, a timer patched only while the harness reads it,
and work left to a background thread after forward returns. Every candidate is the shipped C++ baseline with
only its Python edited, so no new C++ build; each evaluation takes seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial import cpu_candidates as c
from tests.adversarial.gpu import gpu_candidates as g
from tests.candidates import scan_variants as v
from tests.helpers import REPO
from tools import benchmark
from tools.judge import PARENT_CLOCK_RATIO, PARENT_CLOCK_SLACK_MS, check_source
from tools.problem import Problem, load_problem
from tools.results import BenchResult

GPU_TESTS = Path(__file__).resolve().parent / "gpu"


@pytest.fixture(scope="module")
def honest(tiny: Problem) -> BenchResult:
    result = benchmark(tiny, v.baseline())
    assert result.status == "ok", result.message
    return result


# --- timers replaced for good: the identity check after every call ----------------------------------------


@pytest.mark.parametrize(
    ("make", "timer"),
    [
        (c.dilated_perf_counter, "time.perf_counter"),
        (c.patched_elapsed_time, "torch.cuda.Event.elapsed_time"),
        (c.patched_synchronize, "torch.cuda.synchronize"),
    ],
    ids=["perf_counter", "event_elapsed_time", "cuda_synchronize"],
)
def test_a_patched_timer_is_timer_tampering_and_never_timed(tiny: Problem, make, timer: str) -> None:
    assert check_source(make())[0] == []  # nothing for the static check to see: the runtime guard catches it
    result = benchmark(tiny, make())
    assert all(x.status == "passed" for x in result.cases)  # forward itself is honest
    assert result.status == "incorrect", result.message
    assert result.flags == ["timer_tampering"]
    assert timer in result.flag_details[0].message
    assert all(t.candidate is None for t in result.timings)  # a tampering candidate is never timed
    assert result.speedup is None


# --- a timer patched only while the harness reads it -------------------------------------------------------


def test_a_self_restoring_perf_counter_does_not_fake_a_speedup(tiny: Problem, honest: BenchResult) -> None:
    """After the correctness cases each call installs a perf_counter running 100x slow, which puts the original
    back on its first read (the harness's end-of-call read), and a finalizer on the input puts it back when
    the harness drops that input: identity is intact whenever it is compared. On the CPU the host clock is
    the only clock, so either the harness catches the patch or the time it reports must be the real one.

    Fails today (status ok, several times the honest speedup): tools/timing.measure reads `time.perf_counter` through
    the module at call time, and tools/worker/candidate.py compares timer identity only after a whole timed
    item, when the candidate has already put the original back."""
    result = benchmark(tiny, c.self_restoring_perf_counter(len(tiny.correctness_cases), factor=100))
    assert all(x.status == "passed" for x in result.cases)
    if result.status == "ok":
        fake, real = result.primary_timing, honest.primary_timing
        assert fake is not None
        assert fake.candidate is not None
        assert real is not None
        assert real.candidate is not None
        assert fake.candidate.median_ms > 0.1 * real.candidate.median_ms, (
            f"faked timing accepted: {fake.candidate.median_ms:.3f} ms vs honest {real.candidate.median_ms:.3f} ms "
            f"(speedup {result.speedup:.2f} vs {honest.speedup:.2f})"
        )
    else:
        assert result.status == "incorrect", result.message
        assert "timer_tampering" in result.flags, result.message


# --- the timing loop's own clock faked: the evaluator's clock disagrees ---------------------------------------


def test_a_faked_harness_clock_is_caught_by_the_evaluators_clock(tiny: Problem) -> None:
    """A clock faked inside the candidate's process makes the timed loop look 10x shorter there; the
    evaluator stamps the same loop with its own clock and flags the gap. (The identity check names the
    replaced reference too; this asserts the evaluator's clock catches it on its own.) Twenty iterations
    so the loop is long next to the stamps' allowed slack, as a real problem's is."""
    cfg = tiny.spec.timing_config.model_copy(update={"min_iters": 20, "max_iters": 20})
    long_loop = tiny.model_copy(update={"spec": tiny.spec.model_copy(update={"timing_config": cfg})})
    result = benchmark(long_loop, c.faked_harness_clock(len(tiny.correctness_cases)))
    assert all(x.status == "passed" for x in result.cases)
    assert result.status == "incorrect", result.message
    assert "timing_mismatch" in result.flags, result.message
    assert "faked" in next(f.message for f in result.flag_details if f.name == "timing_mismatch")
    assert result.speedup is None


def test_an_honest_loop_agrees_with_the_evaluators_clock(honest: BenchResult) -> None:
    for shape in honest.timings:
        cand = shape.candidate
        assert cand is not None
        assert cand.batch_ms is not None
        assert cand.parent_batch_ms is not None
        # each stamp is a pipe hop late, by a varying amount: equal within the guard's allowance
        assert 0.9 * cand.batch_ms - PARENT_CLOCK_SLACK_MS < cand.parent_batch_ms
        assert cand.parent_batch_ms < PARENT_CLOCK_RATIO * cand.batch_ms + PARENT_CLOCK_SLACK_MS


# --- work left to a background thread after forward returns ------------------------------------------------


def test_work_finished_after_forward_returns_fails_the_cases(tiny: Problem) -> None:
    """The harness reads the output as soon as forward returns: a zeroed output whose work a thread does later
    fails every case (threading is reached through sys.modules, past the static check)."""
    result = benchmark(tiny, c.background_thread_every_call())
    assert result.status == "incorrect", result.message
    assert set(result.flags) <= {"spawns_workers"}, result.message  # a runtime thread guard may add this
    assert all(x.status == "failed" for x in result.cases)
    assert all(t.candidate is None for t in result.timings)


def test_work_deferred_only_while_timed_is_caught_by_the_timed_recheck(tiny: Problem) -> None:
    """Honest for the correctness cases (counted), deferred to a thread while timed: the last timed call's
    output is still zero when the harness copies it, and the re-check of timed outputs catches it."""
    result = benchmark(tiny, c.background_thread_while_timed(len(tiny.correctness_cases)))
    assert all(x.status == "passed" for x in result.cases)
    assert result.status == "incorrect", result.message
    assert "timed_output_mismatch" in result.flags, result.message
    assert set(result.flags) <= {"timed_output_mismatch", "spawns_workers"}, result.message
    primary = result.primary_timing
    assert primary is not None
    assert [r.status for r in primary.rechecked].count("failed") >= 1
    assert result.usage is not None
    assert result.usage.own_calls_per_forward == 1  # the profiled call joins the previous call's work


# --- static checks and fixtures the GPU tests rely on (no GPU needed) --------------------------------------


@pytest.mark.parametrize(
    ("make", "flags"),
    [
        (g.baseline, []),
        (g.joined_side_stream, []),
        (g.unjoined_side_stream, []),
        (g.graph_replay_on_stale_pointers, []),
        (g.cache_by_pointer, []),
        (g.tf32_flag_in_forward, ["tf32_enabled"]),
        (g.tf32_matmul_precision_high, ["tf32_enabled"]),
        (g.patched_elapsed_time, []),
        (g.kernel_never_returns, []),
        (g.illegal_address, []),
        (g.out_of_memory, []),
    ],
    ids=lambda x: getattr(x, "__name__", None),
)
def test_gpu_candidates_are_valid_python_with_the_expected_static_flags(make, flags: list[str]) -> None:
    """Every GPU candidate parses, keeps 01's CUDA byte-identical (one build for all), and meets the static
    check the GPU test expects; the GPU tests' exact flag lists depend on this."""
    src = make()
    found, syntax_error = check_source(src)
    assert syntax_error is None
    assert [f.name for f in found] == flags
    assert g.baseline().split("\n_ext = load_inline(")[0].split("_CUDA_SRC = ")[1] in src


def test_3xtf32_solution_passes_the_static_checks() -> None:
    """06 is honest (it finds cuBLAS with importlib.util.find_spec at import): a static flag on it would
    disqualify the candidate the precision policy is calibrated on (`dynamic_code` flagged it while issue 5's
    rule was being written), and test_3xtf32_projection_comes_out_clean could not pass on the GPU."""
    assert [f.name for f in check_source(g.three_x_tf32())[0]] == []


def test_static_check_sees_the_new_tf32_api() -> None:
    """torch >= 2.9 sets TF32 through `fp32_precision`; the rule covers allow_tf32 and
    set_float32_matmul_precision. The tolerance still catches the error, but the flag names the cause.

    Fails today: `fp32_precision` is not among the rule's names."""
    src = g.honest_forward('torch.backends.cuda.matmul.fp32_precision = "tf32"')
    assert "tf32_enabled" in [f.name for f in check_source(src)[0]]


def test_small_gpu_problem_keeps_the_real_tolerance_and_tf32_probe() -> None:
    """The cheap GPU problem's verdicts stand for problems/selective_scan.yaml only while these agree."""
    real = load_problem(REPO / "problems" / "selective_scan.yaml")
    small = load_problem(GPU_TESTS / "scan_gpu_small.yaml")
    assert small.spec.tolerance == real.spec.tolerance
    assert small.reference_source == real.reference_source
    assert small.spec.library_policy.allowed_library == real.spec.library_policy.allowed_library
    probe = {c.name: c for c in real.spec.correctness}["tf32_probe"]
    small_probe = {c.name: c for c in small.spec.correctness}["tf32_probe"]
    assert (small_probe.sizes, small_probe.init) == (probe.sizes, probe.init)
