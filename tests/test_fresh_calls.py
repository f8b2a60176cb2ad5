"""Fresh input contents for every timed call (tools/worker/fresh.py) and where the judge puts its checks
(tools/judge/_calls.py): pure functions and the schedule's answers, with no worker."""

from __future__ import annotations

import pytest
import torch

from tools.judge._calls import CallSchedule
from tools.worker.fresh import rolled


def test_every_offset_gives_new_contents_with_the_base_sets_values() -> None:
    base = [torch.randn(2, 33, 17), torch.arange(5), 3]
    a, b = rolled(base, 12345), rolled(base, 987654321)
    assert not torch.equal(a[0], base[0])
    assert not torch.equal(a[0], b[0])
    assert torch.equal(torch.sort(a[0].reshape(-1)).values, torch.sort(base[0].reshape(-1)).values)
    assert torch.equal(a[1], base[1])  # integers keep their meaning (indices, labels)
    assert a[1].data_ptr() != base[1].data_ptr()  # but in fresh storage
    assert a[2] == 3
    assert torch.equal(rolled(base, 12345)[0], a[0])  # the truth worker makes the same contents


def drive(schedule: CallSchedule, stop_wanted_at: int, warmup: int = 1) -> list[str]:
    """The worker's side: warm-ups, then timed calls until the judge says stop."""
    answers = [schedule.answer(-1 - w, False) for w in range(warmup)]
    i = 0
    while True:
        line = schedule.answer(i, i >= stop_wanted_at)
        answers.append(line)
        if line.startswith("stop"):
            return answers
        i += 1


@pytest.mark.parametrize("stop_wanted_at", [3, 10, 20, 100])
@pytest.mark.parametrize("checks", [1, 2, 3, 5])
def test_checks_are_spread_and_the_late_calls_never_a_majority(stop_wanted_at: int, checks: int) -> None:
    offsets = [1000 + k for k in range(checks)]
    for _ in range(20):  # the positions are random: many draws
        schedule = CallSchedule(offsets, min_iters=10)
        answers = drive(schedule, stop_wanted_at)
        timed = len(answers) - 2  # one warm-up answer, one stop
        assert sorted(schedule.kept) == list(range(checks))  # every check made
        calls = sorted(schedule.kept.values())
        assert len(set(calls)) == checks
        early = [c for c in calls if c < min(10, stop_wanted_at)]
        if stop_wanted_at >= 10:  # half the checks among the first min_iters calls, which always run
            assert len(early) == (checks + 1) // 2
        else:  # the loop stopped early (its time): those not reached move into the extension
            assert len(early) <= (checks + 1) // 2
        # Calls past min_iters, before the judge's extension, are never half of the loop.
        assert max(0, stop_wanted_at - 10) * 2 < timed
        # A checked call's offset goes out as any other's; the slot to keep comes with the next answer.
        for slot, call in schedule.kept.items():
            assert answers[1 + call].split()[1] == str(offsets[slot])
            assert answers[2 + call].split()[2] == str(slot)


def test_other_calls_get_offsets_drawn_now() -> None:
    schedule = CallSchedule([7, 8], min_iters=3)
    answers = drive(schedule, 30)
    unchecked = {int(a.split()[1]) for a in answers if a.startswith("go")} - {7, 8}
    assert len(unchecked) >= 25
    assert all(a.split()[2] == "-" or int(a.split()[2]) in (0, 1) for a in answers)


def test_an_output_handed_back_again_is_counted_and_an_integer_one_is_not() -> None:
    from tools.worker.repeats import Repeats

    repeats = Repeats()
    y = torch.randn(4, 8)
    calls = [(y, (1,)), (torch.randn(4, 8), (2,)), (y.clone(), (3,)), (torch.tensor([1, 2]), (4,))]
    calls += [(torch.tensor([1, 2]), (5,)), (y.clone(), (1,))]  # the last: the same contents again
    for out, contents in calls:
        repeats.check(out, contents)
    # The stale float output only: argmax-like integer outputs may repeat honestly, and so may the output
    # for contents that came round again (on a small input two offsets can give the same shift).
    assert repeats.repeated == 1
    assert repeats.nonfinite == 0
    repeats.check(torch.full((3,), float("nan")), (6,))
    assert repeats.nonfinite == 1


def test_an_honest_output_reordered_by_a_batch_roll_is_not_a_repeat() -> None:
    """A roll by one sample's size swaps a batch of two: the honest output holds the same values reordered.
    Its plain sum is the same, and where it is mostly zeros (a ReLU's) the probes read zeros in both: the
    CI once flagged 3 of 182 honest calls of a small convolution so. The secret weights tell them apart."""
    from tools.worker.repeats import Repeats

    out = torch.zeros(2, 1000)
    out[0, 5], out[1, 7] = 1.0, 2.0
    repeats = Repeats()
    repeats.check(out, (0,))
    repeats.check(out.flip(0), (1000,))
    repeats.check(out.flip(0).clone(), (1000,))  # the same contents again: honest
    assert (repeats.checked, repeats.repeated) == (3, 0)
    repeats.check(out.clone(), (500,))  # the first output, handed back for other contents
    assert repeats.repeated == 1


def test_two_offsets_with_the_same_shifts_give_the_same_contents() -> None:
    from tools.worker.fresh import shifts

    base = [torch.randn(7), torch.randn(3, 5)]
    assert shifts(base, 11) == shifts(base, 11 + 7 * 15)
    assert torch.equal(rolled(base, 11)[0], rolled(base, 11 + 7 * 15)[0])
    assert shifts(base, 11) != shifts(base, 12)


def test_a_repeat_is_honest_where_the_true_outputs_ignore_the_shift() -> None:
    from tools.compare import truths_vary

    assert truths_vary([torch.randn(3), torch.randn(3)])
    total = torch.tensor([4.0], dtype=torch.float64)
    assert not truths_vary([total, total.clone(), total.clone()])  # e.g. a sum over everything


@pytest.mark.parametrize("numel", [60, 500])
def test_no_two_calls_of_a_shape_get_the_same_contents_while_the_inputs_allow(numel: int) -> None:
    """On a small input two random offsets often shift it alike (a shift is the offset modulo its size: 50
    calls over 60 shifts repeat almost surely), and a content-keyed cache then hits. The judge draws again
    until every call's shifts are new, the checked calls' included."""
    from tools.worker.fresh import shifts_of

    sizes = [(0, numel), (2, 3 * numel)]
    checked = [123456789, 987654321]
    schedule = CallSchedule(checked, min_iters=10, shifted=sizes)
    answers = drive(schedule, 48)
    offsets = [int(a.split()[1]) for a in answers if a.startswith("go")]
    assert len(offsets) >= 49
    seen = [shifts_of(sizes, o) for o in offsets]
    assert len(set(seen)) == len(seen)  # the warm-up and every timed call: all different contents
    assert {shifts_of(sizes, o) for o in checked} <= set(seen)  # the checked calls among them, once each


def test_past_the_distinct_contents_a_shape_has_a_repeat_is_accepted() -> None:
    """Eight possible shifts and twenty calls: the schedule does not hang, it repeats."""
    schedule = CallSchedule([5], min_iters=3, shifted=[(0, 8)])
    answers = drive(schedule, 19)
    assert sum(a.startswith("go") for a in answers) >= 20


def test_the_truth_worker_tells_the_judge_which_inputs_calls_shift() -> None:
    from tools.worker.fresh import shifted_sizes, shifts, shifts_of

    base = [torch.randn(7), torch.arange(4), torch.randn(3, 5), 2.0]
    assert shifted_sizes(base) == [(0, 7), (2, 15)]
    assert all(shifts(base, o) == shifts_of(shifted_sizes(base), o) for o in (0, 11, 2**61 + 5))
