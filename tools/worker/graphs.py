"""The reference's forward replayed from a CUDA graph, in the warm truth server: the same kernels as eager,
without the host's launch of each.

The selective scan's reference is a Python loop over the sequence: tens of thousands of small launches,
so its float64 truth took 0.06-0.37 s a call on the H200 eagerly and 0.02-0.08 s replayed
(bench/truth_cost.py, 2026-12-02). A graph is captured once per structure (reference source, sizes, dtype,
input shapes), in the warm server at the structure's second request (`defer`); each later evaluation copies
its own weights, tensor attributes and inputs into the captured ones and replays. It is trusted only once
its replays matched eager runs bit for bit on two different evaluations' weights and inputs; a reference
that cannot be captured (a host sync, data-dependent control flow: refused before any capture is tried, by a
warm-up call under torch's sync debug mode), that replays differently (random numbers, nondeterministic
kernels) or whose graph would hold more device memory than the budget runs eagerly from then on, as on the
cold path. A capture that fails anyway turns capturing off for the process (it can leave torch's CUDA
generator mid-capture).

A server's graphs share one memory pool: they are replayed one at a time on one stream and each replay's
output is copied out before the next, so one graph's intermediates may lie where another's were. The pool
then holds about the largest forward's memory, not every structure's: by the selective scan's [B, L, D, N]
temporaries, its float64 forward takes ~7 GB at its largest timing shape and ~16 GB at its three together,
and three truth servers hold their graphs at once.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch

from tools.worker import refmod

VERIFY_USES = 2  # replays compared with an eager run before the graph is trusted alone
BUDGET_SHARE = 0.25  # of the device's memory, for every captured graph's pool together


@dataclass
class _Captured:
    model: torch.nn.Module
    inputs: list[Any]
    output: torch.Tensor
    graph: torch.cuda.CUDAGraph
    pool_bytes: int
    eager_s: float  # one eager call's time (the watchdog's bound scales from it)
    verified: int = 0


def structure_key(label: Hashable, model: torch.nn.Module, inputs: list[Any]) -> Hashable:
    """What a graph is captured for: the caller's label (source, sizes), the model's state's names, shapes
    and dtypes, and the inputs' (non-tensors by value)."""
    state = tuple((k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items())
    attrs = tuple((k, tuple(v.shape), v.dtype) for k, v in refmod.tensor_attributes(model).items())
    args = tuple((tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else repr(v) for v in inputs)
    return (label, state, attrs, args)


class ForwardCache:
    """Captured forwards of one truth server, by structure; None marks a structure that runs eagerly.

    `defer`: a structure is captured only when a later request (`next_request`) uses it again; its first
    request runs it eagerly, once a forward. A capture costs its warm-up call and the capture, two forwards
    where an eager run is one, and a new host's first evaluation waits for its truth (H200: 3.6 s of its
    cases' truth and 2.0 s of its largest shape's were first captures); the next evaluation's truth, made
    while the model thinks, pays them instead, and every later one replays."""

    def __init__(self, budget_bytes: int | None = None, defer: bool = False) -> None:
        self._entries: dict[Hashable, _Captured | None] = {}
        self._budget = budget_bytes
        self._defer = defer
        self._seen_now: set[Hashable] = set()  # run eagerly by this request, not captured yet
        self._seen_before: set[Hashable] = set()  # ... by an earlier one: captured at the next use
        # every capture's memory pool (torch.cuda.graph_pool_handle), made at the first capture
        self._pool: Any = None
        self.replays = 0  # for tests and the probe
        self.eager = 0
        self.disabled = False

    def next_request(self) -> None:
        """A new request begins: what the earlier ones ran eagerly at first sight is captured at its next use."""
        self._seen_before |= self._seen_now
        self._seen_now.clear()

    def budget(self) -> int:
        if self._budget is None:
            self._budget = int(torch.cuda.get_device_properties(0).total_memory * BUDGET_SHARE)
        return self._budget

    def held_bytes(self) -> int:
        return sum(e.pool_bytes for e in self._entries.values() if e is not None)

    def run(self, label: Hashable, model: torch.nn.Module, inputs: list[Any]) -> tuple[torch.Tensor, float]:
        """`model(*inputs)` without autograd (a new tensor, never a graph's own output) and the seconds of
        an eager call of it (measured now where it ran eagerly)."""
        if not all(isinstance(v, torch.Tensor) and v.is_cuda for v in inputs if isinstance(v, torch.Tensor)):
            return self._eager(model, inputs)
        key = structure_key(label, model, inputs)
        if key not in self._entries:
            if self._defer and key not in self._seen_before:
                self._seen_now.add(key)
                return self._eager(model, inputs)
            return self._capture(key, model, inputs)
        entry = self._entries[key]
        if entry is None:
            return self._eager(model, inputs)
        _copy_state(model, entry.model)
        for static, value in zip(entry.inputs, inputs, strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(value)
        entry.graph.replay()
        out = entry.output.clone()
        self.replays += 1
        if entry.verified < VERIFY_USES:
            expected, _ = self._eager(model, inputs)
            if not torch.equal(out, expected):
                self._drop(key)
                return expected, entry.eager_s
            entry.verified += 1
        return out, entry.eager_s

    def _eager(self, model: torch.nn.Module, inputs: list[Any]) -> tuple[torch.Tensor, float]:
        on_cuda = torch.cuda.is_available() and any(isinstance(v, torch.Tensor) and v.is_cuda for v in inputs)
        if on_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out: torch.Tensor = model(*inputs).detach()
        if on_cuda:
            torch.cuda.synchronize()
        self.eager += 1
        return out, time.perf_counter() - start

    def _capture(
        self, key: Hashable, model: torch.nn.Module, inputs: list[Any]
    ) -> tuple[torch.Tensor, float]:
        """This use's output, then a capture for the next uses, checked against it at once. The output comes
        from the capture's warm-up call (`_call_without_syncs`, on the graph's own copy of the model): a
        first sight cost an eager call, that warm-up and the capture, three forwards where two do (the first
        evaluation's truth ran ~10 s of such forwards on the H200). A forward that syncs is never captured:
        its output comes from an ordinary eager call of the caller's model."""
        self._entries[key] = None  # eager, unless all of the below holds
        if self.disabled:
            return self._eager(model, inputs)
        before = torch.cuda.memory_reserved()
        copied = copy.deepcopy(model)  # the graph's own: the caller may move or free the one it passed
        static = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
        warm = _call_without_syncs(copied, static)
        if warm is None:
            del copied, static
            return self._eager(model, inputs)
        expected, eager_s = warm
        self.eager += 1
        try:
            graph = torch.cuda.CUDAGraph()
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self._pool), torch.no_grad():
                output = copied(*static)
            graph.replay()
            torch.cuda.synchronize()
        except Exception:  # not capturable after all: nothing is captured in this process from now on
            self.disabled = True  # a capture that failed can leave torch's CUDA generator mid-capture
            torch.cuda.synchronize()
            return expected, eager_s
        pool_bytes = max(0, torch.cuda.memory_reserved() - before)
        if not isinstance(output, torch.Tensor) or self.held_bytes() + pool_bytes > self.budget():
            del graph
            return expected, eager_s
        if not torch.equal(output, expected):
            return expected, eager_s
        self._entries[key] = _Captured(copied, static, output, graph, pool_bytes, eager_s, verified=1)
        return expected, eager_s

    def _drop(self, key: Hashable) -> None:
        self._entries[key] = None
        torch.cuda.empty_cache()


def _call_without_syncs(model: torch.nn.Module, inputs: list[Any]) -> tuple[torch.Tensor, float] | None:
    """`model(*inputs)` and its seconds, as a capture's warm-up (cuBLAS handles, workspaces, lazy inits:
    outside the capture) on a side stream, with torch refusing any host sync; None where the forward syncs
    (`.item()`, `nonzero`, a branch on a value): it cannot be captured, and a capture that fails midway
    leaves state behind, so it is never tried. The output is copied onto the current stream."""
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    start = time.perf_counter()
    stream.wait_stream(torch.cuda.current_stream())
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.stream(stream), torch.no_grad():
            out = model(*inputs)
    except Exception:
        return None
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if not isinstance(out, torch.Tensor):
        return None
    return out.detach().clone(), seconds


def _copy_state(source: torch.nn.Module, captured: torch.nn.Module) -> None:
    """This evaluation's weights, buffers and tensor attributes into the captured model's own storage."""
    with torch.no_grad():
        target = captured.state_dict(keep_vars=True)
        for name, value in source.state_dict(keep_vars=True).items():
            target[name].copy_(value)
        mine = refmod.tensor_attributes(captured)
        for name, value in refmod.tensor_attributes(source).items():
            mine[name].copy_(value)
