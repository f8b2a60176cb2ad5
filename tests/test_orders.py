"""The harness → worker direction of the wire (tools/orders.py): the plan's orders as each worker reads
them back, and the plan's copies when its job moves or its timing changes (tools/judge/_plan.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from tools import orders
from tools.cache.reference_times import ReferenceTimes
from tools.envinfo import collect_env
from tools.judge._plan import Plan
from tools.problem import Problem
from tools.supervise import Job


@pytest.fixture
def plan(tiny: Problem, tmp_path: Path) -> Plan:
    with Job.create(None, tmp_path) as job:
        return Plan.make(tiny, job, 12345678901, ReferenceTimes(tiny, collect_env(tiny)))


def test_the_candidate_reads_back_its_request_and_it_holds_no_seed_and_no_truth_path(
    tiny: Problem, plan: Plan
) -> None:
    sent = plan.candidate_request().model_dump_json()
    read = orders.CandidateRequest.model_validate_json(sent)
    assert [c.name for c in read.cases] == [c.name for c in tiny.correctness_cases]
    assert [t.name for t in read.timing] == [t.name for t in tiny.spec.timing]
    assert not any(secret in sent for secret in plan.secrets(12345678901))
    assert "truth" not in sent


def test_the_truth_worker_reads_back_every_case_and_shape(tiny: Problem, plan: Plan) -> None:
    read = orders.TruthRequest.model_validate_json(plan.truth_request(tiny).model_dump_json())
    assert read == plan.truth_request(tiny)
    assert all(t.truth_offsets for t in read.timing)  # checked calls' inputs: truth for each


def test_a_misspelled_or_missing_key_fails_where_the_order_is_read(plan: Plan, tiny: Problem) -> None:
    raw = json.loads(plan.truth_request(tiny).model_dump_json())
    raw["cases"][0]["truth_pth"] = raw["cases"][0].pop("truth_path")
    with pytest.raises(ValidationError, match="truth_pth"):
        orders.TruthRequest.model_validate(raw)
    with pytest.raises(ValidationError, match="mode"):
        orders.CandidateRequest.model_validate_json('{"cases": []}')


def test_zygote_orders_are_told_apart_by_their_op() -> None:
    contained = orders.Containment(pidns=True, netns=True, no_caps=False)
    run = orders.RunOrder(containment=contained, kind=None, cwd="/w", env={"A": "1"}, request="/w/r.json")
    prepare = orders.PrepareOrder(containment=contained, kind="cuda")
    assert orders.parse_zygote_order(run.model_dump_json().encode()) == run
    assert orders.parse_zygote_order(prepare.model_dump_json().encode()) == prepare
    with pytest.raises(ValidationError):
        orders.parse_zygote_order(b'{"op": "exec", "cmd": "sh"}')
    assert contained.within(pidns=False, netns=True, no_caps=True) == orders.Containment(
        pidns=False, netns=True, no_caps=False
    )


def test_a_moved_plan_follows_its_job_and_a_retuned_one_times_with_the_new_settings(
    tiny: Problem, plan: Plan, tmp_path: Path
) -> None:
    old, new = Path(plan.cases[0].out_path).parents[1], tmp_path / "elsewhere"
    moved = plan.relocated(old, new)
    paths = [p for c in moved.cases for p in (c.truth.data_path, c.truth.truth_path, c.out_path)]
    paths += [p for t in moved.timing for p in (t.truth.data_path, t.truth.truth_path, t.out_path)]
    assert len(paths) == 3 * (len(plan.cases) + len(plan.timing))
    assert all(Path(p).is_relative_to(new) for p in paths)
    assert Path(plan.cases[0].out_path).is_relative_to(old)  # the original is unchanged (frozen)
    config = tiny.spec.timing_config.model_copy(
        update={"max_iters": 321, "reference_max_seconds": 0.5, "warmup": 4}
    )
    longer = tiny.model_copy(update={"spec": tiny.spec.model_copy(update={"timing_config": config})})
    retuned = moved.relocated(new, old).retuned(longer)
    assert {t.cfg.max_iters for t in retuned.timing} == {321}
    assert {t.truth.reference_cfg.max_seconds for t in retuned.timing} == {0.5}
    assert {(t.cfg.warmup, t.truth.reference_cfg.warmup) for t in retuned.timing} == {
        (4, 1)
    }  # the reference: one
    assert retuned.retime_request({tiny.primary.name}).timing[0].cfg.max_iters == 642
