"""The headline (issue 50; docs/ranking.md): the share of the speed-of-light floor where a problem has one, else
the speedup against the launch-free reference, the eager speedup beside it; overall figures as geometric means
over the timing shapes; the faster-than-floor guard; bad floors said, never a crash. The evaluations run on the
tiny CPU problem with this host's measured CPU peaks: the whole path without a GPU."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
import torch
from rich.console import Console

from agent.best import beats, timed_kernel
from agent.runlog.events import TimedKernel
from agent.views.result import bench_view
from tests.candidates import scan_variants
from tools import benchmark
from tools.benchmark import text as bench_text
from tools.figures import FLOOR_MARGIN, PEAKS_ERROR, figures_of, finish, geomean
from tools.orders import LoopSettings
from tools.problem import Problem, ProblemError, load_problem
from tools.results import BenchResult, LaunchFreeReference, ShapeFloor, ShapeTiming, TimingStats
from tools.supervise import WarmPool
from tools.worker.launch_free import CPU_NOTE, launch_free_timing

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "problems" / "scan_tiny.yaml"
# the scan's work per call (problems/selective_scan_cpu.yaml's `floor:`)
FLOPS = "2*batch_size*seq_len*d_model*(d_model + 2*d_state) + 7*batch_size*seq_len*d_model*d_state"
BYTES = "4*(3*batch_size*seq_len*d_model + 2*batch_size*seq_len*d_state + d_model*d_state + d_model)"


def tiny_with_floor(tmp_path: Path, bytes_expr: str = BYTES, name: str = "tiny_floor") -> Path:
    spec = TINY.read_text().replace("reference: ../../problems/", f"reference: {REPO}/problems/")
    spec = spec.replace("    floor_ms: 0.001\n", "")
    floor = f'floor:\n  flops: "{FLOPS}"\n  bytes: "{bytes_expr}"\n'
    path = tmp_path / f"{name}.yaml"
    path.write_text(spec.replace("timing_config:", floor + "timing_config:"))
    return path


def stats(ms: float, rse: float = 0.01) -> TimingStats:
    return TimingStats(median_ms=ms, rse=rse, n=10, min_ms=ms, max_ms=ms, mean_ms=ms)


def shape(
    name: str, ms: float, eager_ms: float, graph_ms: float | None, floor_ms: float | None
) -> ShapeTiming:
    lf = (
        LaunchFreeReference(mode="graph", stats=stats(graph_ms))
        if graph_ms is not None
        else LaunchFreeReference(mode="eager", note="a CPU problem")
    )
    floor = ShapeFloor(flops=1.0, bytes=1.0, ms=floor_ms, compute_ms=floor_ms, memory_ms=0.0, bound="compute")
    return ShapeTiming(
        name=name, primary=name == "a", sizes={}, candidate=stats(ms), reference=stats(eager_ms),
        eager_speedup=eager_ms / ms, launch_free=lf, floor=floor if floor_ms is not None else None,
    )  # fmt: skip


def problem_of(tmp_path: Path) -> Problem:
    return load_problem(tiny_with_floor(tmp_path))


def test_overall_figures_are_geomeans_and_the_floor_share_is_the_headline(tmp_path: Path) -> None:
    timings = [shape("a", 1.0, 100.0, 4.0, 0.5), shape("b", 2.0, 100.0, 4.0, 0.5)]
    problem = problem_of(tmp_path)
    timings = [t.model_copy(update={"name": problem.primary.name}) if t.primary else t for t in timings]
    result = BenchResult(status="ok", correct=True, speedup=None, message="ok", timings=timings)
    done = finish(problem, result)
    f = done.figures
    assert f is not None
    assert (f.metric, f.label, f.floor_status) == ("floor_fraction", "% of floor", "derived")
    assert done.speedup == pytest.approx(math.sqrt(4.0 * 2.0))  # launch-free: 4x and 2x
    assert done.eager_speedup == pytest.approx(math.sqrt(100.0 * 50.0))
    assert f.floor_fraction == pytest.approx(math.sqrt(0.5 * 0.25))
    assert f.value == f.floor_fraction
    assert f.overall == "geometric mean over 2 timing shapes"
    assert f.reference_mode == "graph"
    assert [s.speedup for s in f.shapes] == [pytest.approx(4.0), pytest.approx(2.0)]


def test_without_a_floor_the_launch_free_speedup_ranks_and_the_result_says_no_floor() -> None:
    result = BenchResult(
        status="ok", correct=True, speedup=None, message="ok", timings=[shape("a", 1.0, 30.0, None, None)]
    )
    done = finish(load_problem(TINY).model_copy(), result)
    f = done.figures
    assert f is not None
    assert (f.metric, f.label, f.floor_status) == (
        "launch_free_speedup",
        "speedup (launch-free ref)",
        "no_floor",
    )
    assert f.floor_note.startswith("no floor: none in this result (the problem's spec states no `floor:`")
    assert (
        f.value == done.speedup == pytest.approx(30.0)
    )  # on a CPU the launch-free reference is the eager one
    assert f.reference_mode == "eager"
    assert "a CPU problem" in f.reference_note
    text = bench_text(done, None, improved=False)
    assert (
        text.splitlines()[0]
        == "benchmark CORRECT: speedup (launch-free ref) 30.00× (the headline), eager speedup 30.00×."
    )
    assert "Figures: the headline, which ranks kernels, is speedup (launch-free ref)" in text
    assert "no floor: none in this result (the problem's spec states no `floor:`" in text


def test_a_median_below_the_floor_beyond_its_uncertainty_is_suspect_and_never_the_best(
    tmp_path: Path,
) -> None:
    problem = problem_of(tmp_path)
    name = problem.primary.name
    allowed = 1.0 * (1 - PEAKS_ERROR - FLOOR_MARGIN)  # floor 1 ms: an honest median may come this close
    honest = finish(problem, BenchResult(
        status="ok", correct=True, speedup=None, message="ok",
        timings=[shape(name, allowed * 1.01, 100.0, 10.0, 1.0)],
    ))  # fmt: skip
    assert honest.status == "ok"
    assert "faster_than_floor" not in honest.flags
    assert honest.timings[0].floor is not None
    assert honest.timings[0].floor.uncertainty == PEAKS_ERROR + FLOOR_MARGIN
    fast = finish(problem, BenchResult(
        status="ok", correct=True, speedup=None, message="all cases passed",
        timings=[shape(name, allowed * 0.9, 100.0, 10.0, 1.0)],
    ))  # fmt: skip
    assert (fast.status, fast.correct, fast.speedup, fast.flags) == (
        "suspect",
        False,
        None,
        ["faster_than_floor"],
    )
    assert timed_kernel(fast, 1, "kernels/001.py") is None
    why = fast.flag_details[0].message
    assert "of the floor's speed: floor 1 ms = max(compute 1 ms, memory 0 ms)" in why
    assert "less its uncertainty of 25%" in why
    text = bench_text(fast, None, improved=False)
    assert text.splitlines()[0].startswith("benchmark SUSPECT: outputs correct, timing not trusted")
    assert "faster_than_floor" in text


def test_the_specs_stated_floor_ms_is_the_same_guard() -> None:
    problem = load_problem(TINY)  # timing shape `small`: floor_ms 0.001
    result = BenchResult(
        status="ok",
        correct=True,
        speedup=None,
        message="ok",
        timings=[shape("small", 0.0005, 1.0, None, None)],
    )
    done = finish(problem, result)
    assert done.status == "suspect"
    assert "small: 0.0005 ms is below the spec's stated floor_ms 0.001 ms" in done.flag_details[0].message


def test_an_older_result_reads_as_eager_and_says_so() -> None:
    old = BenchResult.model_validate(
        {"status": "ok", "correct": True, "speedup": 12.4, "message": "ok",
         "timings": [{"name": "a", "primary": True, "sizes": {}, "candidate": stats(1.0).model_dump(),
                      "reference": stats(12.4).model_dump(), "speedup": 12.4}]}
    )  # fmt: skip
    f = figures_of(old)
    assert (f.speedup, f.eager_speedup, f.reference_mode) == (
        pytest.approx(12.4),
        pytest.approx(12.4),
        "eager",
    )
    assert "recorded before launch-free references" in f.reference_note


def test_kernels_rank_by_the_headline_beyond_the_spread() -> None:
    def kernel(headline: float, speedup: float, median: float = 1.0) -> TimedKernel:
        return TimedKernel(
            turn=1, kernel_path="k.py", speedup=speedup, median_ms=median, rse=0.01,
            headline_metric="floor_fraction", headline=headline,
        )  # fmt: skip

    best = kernel(0.40, 3.0)
    assert beats(1.0, 0.01, best, kernel(0.50, 2.0))  # a larger share of the floor ranks higher ...
    assert not beats(1.0, 0.01, best, kernel(0.41, 9.0))  # ... beyond both spreads, whatever the speedup
    assert geomean([2.0, None]) is None


def test_a_floor_that_cannot_be_derived_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ProblemError, match="floor at timing.small: flops .* and bytes .* must be >= 0"):
        load_problem(tiny_with_floor(tmp_path, "-4*seq_len", "negative"))
    with pytest.raises(ProblemError, match="floor at timing.small: does not parse"):
        load_problem(tiny_with_floor(tmp_path, "4*(seq_len", "unparsed"))


def test_on_a_cpu_the_launch_free_reference_is_the_eager_one_and_says_why() -> None:
    cfg = LoopSettings(warmup=0, min_iters=3, max_iters=3, target_rse=0.1, max_seconds=1.0)
    found = launch_free_timing(torch.nn.Identity(), [[torch.ones(3)]], "cpu", cfg)
    assert (found.mode, found.stats, found.note) == ("eager", None, CPU_NOTE)


@pytest.mark.slow
def test_an_honest_kernel_is_never_faster_than_its_floor_and_a_floor_it_cannot_beat_flags_it(
    tmp_path: Path, warm: WarmPool
) -> None:
    """One build of the honest CPU kernel, evaluated twice on the tiny problem with this host's CPU peaks: at
    the scan's real floor (its headline a share of it, not flagged), and with a floor 10^6 times the work the
    timed shape holds, which no honest kernel can beat: the same kernel, measured faster than that, is flagged
    as a kernel skipping work would be."""
    code = scan_variants.baseline()
    honest = benchmark(load_problem(tiny_with_floor(tmp_path)), code, pool=warm, prefetch_next=False)
    assert honest.status == "ok", honest.message
    f = honest.figures
    assert f is not None
    assert f.metric == "floor_fraction"
    assert f.floor_status == "derived"
    assert f.value is not None
    assert 0 < f.value < 1
    assert f.reference_mode == "eager"
    assert "CPU problem" in f.reference_note
    assert honest.speedup == pytest.approx(honest.eager_speedup)
    assert honest.peaks is not None
    assert honest.peaks.device == "cpu"
    timed = timed_kernel(honest, 1, "kernels/001.py")
    assert timed is not None
    assert timed.headline == f.value
    assert timed.floor_fraction == f.value

    inflated = load_problem(tiny_with_floor(tmp_path, f"1e6*({BYTES})", "inflated"))
    flagged = benchmark(inflated, code, pool=warm, prefetch_next=False)
    assert (flagged.status, flagged.flags, flagged.speedup) == ("suspect", ["faster_than_floor"], None)
    assert flagged.figures is not None
    assert flagged.figures.value is None
    assert flagged.figures.shapes[0].faster_than_floor

    console = Console(file=io.StringIO(), width=160, legacy_windows=False)
    for part in bench_view(honest, "kernels/001.py", full=True):
        console.print(part)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "% of floor" in out
    assert "eager speedup" in out


def test_the_launch_free_timing_is_cached_apart_from_the_eager_median_and_a_refusal_once(
    tmp_path: Path,
) -> None:
    from tools.cache.reference_times import ReferenceTimes
    from tools.results import EnvInfo

    problem = load_problem(tiny_with_floor(tmp_path, name=f"cache_{tmp_path.name}"))
    refs, shape = ReferenceTimes(problem, EnvInfo(gpu="test GPU", torch="x")), problem.primary
    assert refs.launch_free(shape) is None
    refs.put_launch_free(
        shape, LaunchFreeReference(mode="eager", note="not captured: an earlier capture failed")
    )
    assert refs.launch_free(shape) is None  # a worker's earlier failure: tried again elsewhere
    graph = LaunchFreeReference(mode="graph", stats=stats(20.0), note="replayed")
    refs.put_launch_free(shape, graph)
    cached = ReferenceTimes(problem, EnvInfo(gpu="test GPU", torch="x")).launch_free(shape)
    assert cached is not None
    assert (cached.mode, cached.cached, cached.stats) == ("graph", True, graph.stats)
    assert refs.get(shape) is None  # the eager median's entry is its own
    refs.put_launch_free(shape, LaunchFreeReference(mode="graph", stats=stats(20.0, rse=0.5)))  # unsteady
    kept = refs.launch_free(shape)
    assert kept is not None
    assert kept.stats == graph.stats


def test_a_loop_with_a_wild_spread_still_gets_its_figures() -> None:
    """A candidate that runs fast only while it thinks it is watched timed at a relative standard error of
    thousands: its interval is capped, never an OverflowError in the evaluator."""
    wild = shape("small", 1.0, 10.0, None, None)
    assert wild.candidate is not None
    wild = wild.model_copy(update={"candidate": wild.candidate.model_copy(update={"rse": 5000.0})})
    result = BenchResult(status="ok", correct=True, speedup=None, message="ok", timings=[wild])
    done = finish(load_problem(TINY), result)
    assert done.figures is not None
    low, high = done.figures.shapes[0].device_interval or (0.0, 0.0)
    assert 0 < low < 1.0 < high
