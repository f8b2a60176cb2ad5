"""The warm truth server's CUDA graphs (tools/worker/graphs.py): a replay gives what an eager run gives, bit
for bit, with each evaluation's own weights and inputs; what cannot be captured, or replays differently,
runs eagerly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tools.problem import Case
from tools.worker import refmod
from tools.worker.graphs import VERIFY_USES, ForwardCache

REFERENCE = Path(__file__).resolve().parent.parent / "problems" / "selective_scan" / "reference.py"
SIZES = {"batch_size": 2, "seq_len": 48, "d_model": 32, "d_state": 8}

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def evaluation(seed: int) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    built = refmod.build_case(REFERENCE.read_text(), Case(name="g"), SIZES, seed)
    model = built["model"].double().cuda()
    return model, [t.double().cuda() for t in built["inputs"]]


def test_off_the_gpu_every_forward_runs_eagerly() -> None:
    built = refmod.build_case(REFERENCE.read_text(), Case(name="g"), SIZES, 5)
    cache = ForwardCache(budget_bytes=1 << 30)
    out, seconds = cache.run("scan", built["model"], built["inputs"])
    with torch.no_grad():
        assert torch.equal(out, built["model"](*built["inputs"]))
    assert (cache.eager, cache.replays, seconds > 0) == (1, 0, True)


@pytest.mark.gpu
@gpu
def test_replays_give_each_evaluations_eager_output_bit_for_bit() -> None:
    cache = ForwardCache()
    for seed in range(VERIFY_USES + 3):  # new weights and inputs each time, as each evaluation has
        model, inputs = evaluation(seed)
        out, _ = cache.run("scan", model, inputs)
        with torch.no_grad():
            assert torch.equal(out, model(*inputs))
        assert not torch.equal(out, cache.run("scan", *evaluation(seed + 100))[0])  # a copy, not the graph's
    assert cache.replays >= VERIFY_USES + 2
    assert 0 < cache.held_bytes() <= cache.budget()


def evaluation_at(seed: int, seq_len: int) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    built = refmod.build_case(REFERENCE.read_text(), Case(name="g"), {**SIZES, "seq_len": seq_len}, seed)
    return built["model"].double().cuda(), [t.double().cuda() for t in built["inputs"]]


@pytest.mark.gpu
@gpu
def test_structures_share_one_pool_and_replayed_in_turn_each_gives_its_eager_output() -> None:
    """One server's graphs share a memory pool (with one pool a structure, three servers would hold ~16 GB of
    the selective scan's graphs each): one graph's intermediates may lie where another's output was, so each
    replay is checked while the others are replayed between, in either order."""
    cache = ForwardCache()
    lengths = (48, 96, 24)
    for use in range(VERIFY_USES + 3):
        order = lengths if use % 2 else tuple(reversed(lengths))
        for length in order:
            model, inputs = evaluation_at(100 * use + length, length)
            out, _ = cache.run(("scan", length), model, inputs)
            with torch.no_grad():
                assert torch.equal(out, model(*inputs))
    graphs = [e.graph for e in cache._entries.values() if e is not None]
    assert len(graphs) == len(lengths)
    assert len({g.pool() for g in graphs}) == 1
    assert cache.replays >= len(lengths) * (VERIFY_USES + 1)


class RandomInside(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)


class SyncInside(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if float(x.sum()) > 0 else x  # a host sync: not capturable


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("model", [RandomInside(), SyncInside()], ids=["random", "sync"])
def test_a_forward_that_replays_differently_or_cannot_be_captured_runs_eagerly(
    model: torch.nn.Module,
) -> None:
    cache = ForwardCache()
    for _ in range(VERIFY_USES + 2):
        x = torch.randn(64, device="cuda", dtype=torch.float64)
        out, _ = cache.run("odd", model, [x])
        assert out.shape == x.shape
    assert cache.held_bytes() == 0
    assert cache.eager >= VERIFY_USES + 2


@pytest.mark.gpu
@gpu
def test_a_graph_over_the_memory_budget_is_not_kept() -> None:
    cache = ForwardCache(budget_bytes=1)
    for seed in range(3):
        model, inputs = evaluation(seed)
        cache.run("scan", model, inputs)
    assert (cache.replays, cache.held_bytes()) == (0, 0)


FORWARDS = [0]  # every CountingScan's calls, its deep copies' included


class CountingScan(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        FORWARDS[0] += 1
        out: torch.Tensor = self.inner(*args)
        return out


@pytest.mark.gpu
@gpu
def test_a_first_sight_runs_the_forward_twice_its_warm_up_giving_the_output() -> None:
    """The capture's warm-up call is this use's output: the warm-up and the capture, no third eager call
    (each forward of the first evaluation's truth cost the H200 up to ~0.4 s a shape)."""
    cache = ForwardCache()
    model, inputs = evaluation(7)
    counted = CountingScan(model)
    FORWARDS[0] = 0
    out, seconds = cache.run("counted", counted, inputs)
    assert FORWARDS[0] == 2
    assert seconds > 0
    with torch.no_grad():
        assert torch.equal(out, model(*inputs))
    model2, inputs2 = evaluation(8)
    FORWARDS[0] = 0
    out2, _ = cache.run("counted", CountingScan(model2), inputs2)  # a replay, and its eager check
    assert FORWARDS[0] == 1
    assert cache.replays == 1
    with torch.no_grad():
        assert torch.equal(out2, model2(*inputs2))


@pytest.mark.gpu
@gpu
def test_deferred_a_structure_runs_eagerly_in_its_first_request_and_is_captured_in_the_next() -> None:
    """The warm server's cache (`defer`): a new host's first evaluation runs each forward once, eagerly; the
    next request captures what the first ran (its warm-up and the capture), and later ones replay."""
    cache = ForwardCache(defer=True)
    cache.next_request()
    FORWARDS[0] = 0
    for seed in (1, 2, 3):  # one request's three checked calls: eager, once each
        model, inputs = evaluation(seed)
        out, seconds = cache.run("deferred", CountingScan(model), inputs)
        with torch.no_grad():
            assert torch.equal(out, model(*inputs))
        assert seconds > 0
    assert (FORWARDS[0], cache.eager, cache.replays, cache.held_bytes()) == (3, 3, 0, 0)
    cache.next_request()
    FORWARDS[0] = 0
    model, inputs = evaluation(4)
    out, _ = cache.run("deferred", CountingScan(model), inputs)  # captured now: the warm-up and the capture
    assert FORWARDS[0] == 2
    assert cache.held_bytes() > 0
    model, inputs = evaluation(5)
    out, _ = cache.run("deferred", CountingScan(model), inputs)
    assert cache.replays == 1
    with torch.no_grad():
        assert torch.equal(out, model(*inputs))
    other, inputs = evaluation(6)  # another label: a structure of its own, eager in this request
    cache.run("another", other, inputs)
    assert cache.replays == 1
