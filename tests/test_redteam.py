"""`agent redteam`'s parts on their own: the attack line, the stricter problem derived from a spec, the
summary's exact text, the re-judge writing a regression case for a candidate that passes the problem's
cases but fails at fresh sizes, and `agent redteam promote` copying a case that then judges as expected."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from agent.cli import main
from agent.execution.executor import LeasedExecutor
from agent.execution.leases import Leases
from agent.redteam.attacks import UNNAMED, attack_of, redteam_system_prompt
from agent.redteam.cases import EXPECTED, ExpectedCase, judge_case, read_case
from agent.redteam.rejudge import Rejudge
from agent.redteam.strict import FASTER_THAN_FLOOR, fresh_size, strict_problem, verdict_of
from agent.runlog.events import RejudgeEvent, ToolCallEvent
from agent.views.redteam import redteam_summary
from tests.helpers import REPO
from tools import benchmark
from tools.problem import Problem, load_problem
from tools.results import BenchResult, ShapeFloor, ShapeTiming

SHOWN_SHAPES = REPO / "problems" / "selective_scan_cpu" / "redteam" / "08_shown_shapes.py"


def test_a_candidate_names_its_attack_in_one_comment_line() -> None:
    attack = attack_of('"""doc"""\n# attack: pointer-cache: outputs cached by data_ptr\nimport torch\n')
    assert (attack.name, attack.description) == ("pointer-cache", "outputs cached by data_ptr")
    assert attack_of("#attack: none\n").name == "none"
    assert attack_of("import torch\n").name == UNNAMED
    assert redteam_system_prompt("BASE").startswith("BASE\n\n## Red-team mode")


def test_the_strict_problem_adds_seeds_and_fresh_odd_sizes_and_keeps_fixed_ones() -> None:
    problem = load_problem(REPO / "problems" / "selective_scan_cpu.yaml")
    strict = strict_problem(problem)
    cases = {c.name: c for c in strict.spec.correctness}
    assert list(cases) == [
        "odd_L333_D97", "batch1_L1000", "long_memory",
        "odd_L333_D97.seed2", "batch1_L1000.seed2", "long_memory.seed2",
        "odd_L333_D97.fresh", "batch1_L1000.fresh", "long_memory.fresh",
    ]  # fmt: skip
    assert cases["odd_L333_D97.fresh"].sizes == {
        "batch_size": 5,
        "seq_len": 501,
        "d_model": 147,
        "d_state": 16,
    }
    assert cases["long_memory.fresh"].sizes["d_model"] == 99  # 97 was shown: the next odd size
    assert cases["long_memory.fresh"].init == problem.spec.correctness[2].init  # long memory kept
    assert strict.spec.timing == problem.spec.timing
    small = strict_problem(problem, small_timing=True)
    assert [t.name for t in small.spec.timing] == ["strict_small"]
    assert fresh_size(1, set()) == 3
    assert fresh_size(64, {97}) == 99


def _event(**kw: object) -> RejudgeEvent:
    base: dict[str, object] = {"candidate_turn": 1, "kernel_path": "kernels/001.py", "attack": "a"}
    return RejudgeEvent.model_validate(base | kw)


def test_the_summary_lists_each_attack_with_both_verdicts() -> None:
    events = [
        _event(
            attack="pointer-cache", first_status="incorrect", first_flags=["stale_output"],
            outcome="caught", caught_by="flags: stale_output",
        ),
        _event(
            candidate_turn=2, kernel_path="kernels/002.py", attack="shown-shapes-only", first_status="ok",
            first_speedup=12.5, strict_status="incorrect", outcome="caught on re-judge",
            caught_by="cases failed: odd.fresh", case_dir="redteam/shown-shapes-only-002",
        ),
        _event(
            candidate_turn=3, kernel_path="kernels/003.py", attack="none", first_status="ok", first_speedup=3.0,
            strict_status="ok", outcome="escaped",
        ),
    ]  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=100, legacy_windows=False, color_system=None).print(redteam_summary(events))
    assert out.getvalue() == (
        "red team ───────────────────────────────────────────────────────────────────────────────────────────\n"
        "kernel          attack             first verdict             after re-judge  result            \n"
        "kernels/001.py  pointer-cache      incorrect [stale_output]  –               caught            \n"
        "kernels/002.py  shown-shapes-only  ok 12.5×                  incorrect       caught on re-judge\n"
        "kernels/003.py  none               ok 3.00×                  ok              escaped           \n"
        "3 candidates: 1 caught, 1 caught on re-judge, 1 escaped · 1 regression case written\n"
        "kernels/001.py pointer-cache: flags: stale_output\n"
        "kernels/002.py shown-shapes-only: cases failed: odd.fresh\n"
        "regression case redteam/shown-shapes-only-002: agent redteam promote RUN/shown-shapes-only-002\n"
    )


@pytest.fixture(scope="module")
def rejudged(tiny: Problem, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RejudgeEvent]:
    """The shown-shapes attack on scan_tiny (its D % 8 is 0 or 1 in every case and shape): accepted by the
    problem's cases, then re-judged as a red-team run does it."""
    code = SHOWN_SHAPES.read_text()
    first = benchmark(tiny, code, prefetch_next=False)
    assert first.status == "ok", first.message  # passed loosely: the finding
    run_dir = tmp_path_factory.mktemp("run")
    (run_dir / "kernels").mkdir()
    (run_dir / "kernels" / "001.py").write_text(code)
    call = ToolCallEvent(
        turn=1, tool_use_id="t1", name="benchmark", kernel_path="kernels/001.py", status=first.status,
        result=first.model_dump(mode="json"),
    )  # fmt: skip
    event = Rejudge(tiny, LeasedExecutor(Leases(None)), run_dir, lambda job: None).one(call)
    return run_dir, event


def test_the_rejudge_writes_a_case_for_a_kernel_wrong_only_at_fresh_sizes(
    rejudged: tuple[Path, RejudgeEvent],
) -> None:
    run_dir, event = rejudged
    assert (event.attack, event.first_status, event.outcome) == (
        "shown-shapes-only",
        "ok",
        "caught on re-judge",
    )
    assert event.strict_status == "incorrect"
    assert ".fresh" in event.caught_by, event.caught_by
    assert ".seed2" not in event.caught_by, event.caught_by
    assert event.case_dir == "redteam/shown-shapes-only-001"
    code, expected = read_case(run_dir / event.case_dir)
    assert code == SHOWN_SHAPES.read_text()
    assert (expected.problem, expected.expected_status, expected.check) == (
        "tests/problems/scan_tiny.yaml", "incorrect", "correctness",
    )  # fmt: skip


def test_promote_copies_the_case_and_the_copy_judges_as_expected(
    rejudged: tuple[Path, RejudgeEvent], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, event = rejudged
    assert event.case_dir is not None
    into = tmp_path / "promoted"
    spec = f"{run_dir}/{Path(event.case_dir).name}"  # RUN/CASE
    assert main(["redteam", "promote", spec, "--into", str(into), "--json"]) == 0
    target = into / "shown-shapes-only-001"
    assert json.loads(capsys.readouterr().out) == {"promoted": str(target)}
    assert ExpectedCase.model_validate_json((target / EXPECTED).read_text()).attack == "shown-shapes-only"
    verdict, expected = judge_case(target)  # what tests/adversarial/test_promoted.py does with each case
    assert (verdict.status, verdict.accepted) == (expected.expected_status, False)
    assert main(["redteam", "promote", spec, "--into", str(into)]) == 0  # the same again: kept as is
    (run_dir / event.case_dir / "candidate.py").write_text("# another\n")
    assert main(["redteam", "promote", spec, "--into", str(into)]) == 2  # a different one: refused
    assert main(["redteam", "promote", str(tmp_path / "nowhere")]) == 2


def test_the_honest_baseline_is_accepted_by_the_stricter_checks(tiny: Problem) -> None:
    """No false positives: the shipped baseline is correct at fresh sizes and other seeds too."""
    baseline = (REPO / "problems" / "selective_scan_cpu" / "solutions" / "baseline.py").read_text()
    verdict = verdict_of(benchmark(strict_problem(tiny, small_timing=True), baseline, prefetch_next=False))
    assert verdict.accepted, verdict.caught_by


def test_a_median_faster_than_the_speed_of_light_floor_is_rejected_by_the_strict_verdict() -> None:
    floor = ShapeFloor(flops=1.0, bytes=1.0, ms=2.0, fraction=1.6)
    timing = ShapeTiming(name="big", primary=True, sizes={}, floor=floor)
    result = BenchResult(status="ok", correct=True, speedup=40.0, message="correct", timings=[timing])
    verdict = verdict_of(result)
    assert (verdict.status, verdict.flags, verdict.accepted) == ("incorrect", [FASTER_THAN_FLOOR], False)
    assert verdict.caught_by == "faster than the speed-of-light floor at big"
    at_floor = result.model_copy(
        update={"timings": [timing.model_copy(update={"floor": floor.model_copy(update={"fraction": 0.9})})]}
    )
    assert verdict_of(at_floor).accepted
    flagged = result.model_copy(
        update={"flags": [FASTER_THAN_FLOOR], "timings": []}
    )  # issue 50's flag, where set
    assert verdict_of(flagged).status == "incorrect"


def test_a_candidate_the_evaluator_failed_on_is_a_harness_error_not_caught(
    tiny: Problem, tmp_path: Path
) -> None:
    """The warmup-detector once made the evaluator fail (OverflowError): no verdict, said as such."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "001.py").write_text("# attack: warmup-detector: skips work once checked\n")
    text = "harness_error: the evaluator itself failed (OverflowError: math range error); not your kernel's fault"
    call = ToolCallEvent(
        turn=1, tool_use_id="t1", name="benchmark", kernel_path="kernels/001.py", status="harness_error",
        is_error=True, summary=text,
    )  # fmt: skip
    event = Rejudge(tiny, LeasedExecutor(Leases(None)), tmp_path, lambda job: None).one(call)
    assert (event.attack, event.first_status, event.outcome, event.caught_by) == (
        "warmup-detector", "harness_error", "harness error", text,
    )  # fmt: skip
    assert event.case_dir is None
    line = (
        "1 candidate: 0 caught, 0 caught on re-judge, 0 escaped, 1 harness error · 0 regression cases written"
    )
    out = io.StringIO()
    Console(file=out, width=200, legacy_windows=False, color_system=None).print(redteam_summary([event]))
    assert line in out.getvalue()
