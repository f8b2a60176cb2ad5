"""The own-kernel rule on the CPU: time in the candidate's own extension code against time in torch's
library ops, from one forward under torch's CPU profiler.

Every call into the candidate's extension goes through `build.CountingModule`, which marks it with a
profiler span while this runs; torch's ops are the profiler's dispatcher events (`aten::*`), including
those the extension's C++ calls itself. An op counts with all its time under its outermost op (the copy an
`addmm` makes is the GEMM's); the time of an extension call is its own less the ops it called. What
moves no data (allocations, views) counts for neither. Shares are of own plus library time, as on the GPU
they are of device time: `torch.relu` beside a dummy extension call is ~100 % elementwise library.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from tools.worker import build

GEMM = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "addmv", "mv", "dot", "vdot", "einsum"}
GEMM |= {"tensordot", "_addmm_activation", "mkldnn_linear", "conv1d", "conv2d", "conv3d", "convolution"}
CONV_PREFIXES = (
    "_convolution",
    "conv_transpose",
    "mkldnn_convolution",
    "slow_conv",
    "_slow_conv",
    "thnn_conv",
)
REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "linalg_vector_norm", "var", "std"}
REDUCTION |= {"var_mean", "std_mean", "logsumexp", "cumsum", "cumprod", "argmax", "argmin", "softmax"}
REDUCTION |= {"_softmax", "log_softmax", "_log_softmax", "all", "any", "max_pool2d", "avg_pool2d"}
COPY = {
    "copy",
    "clone",
    "contiguous",
    "to",
    "_to_copy",
    "cat",
    "stack",
    "fill",
    "zero",
    "zeros",
    "zeros_like",
}
COPY |= {"ones", "ones_like", "full", "full_like", "reshape", "flatten", "repeat", "index_select", "pad"}
COPY |= {"constant_pad_nd", "narrow_copy", "_reshape_copy", "masked_fill", "index_put", "scatter", "gather"}
# Allocations and views: no data moves, so neither side is charged.
FREE = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "view", "_unsafe_view"}
FREE |= {"as_strided", "t", "transpose", "permute", "expand", "expand_as", "select", "slice", "unsqueeze"}
FREE |= {"squeeze", "detach", "alias", "lift_fresh", "resolve_conj", "resolve_neg", "unflatten", "set"}
FREE |= {
    "resize",
    "_reshape_alias",
    "split",
    "chunk",
    "unbind",
    "narrow",
    "view_as",
    "numpy_T",
    "_local_scalar_dense",
}
FREE |= {"item", "size", "stride", "is_nonzero", "result_type"}
MARK = "kernel_agent::"
FORWARD_SPAN = f"{MARK}forward"


def op_kind(name: str) -> str:
    """The library kind of a torch op (`aten::addmm` → gemm), by the same kinds as the GPU's kernels."""
    short = name.split("::", 1)[-1].rstrip("_")
    if short in FREE:
        return "free"
    if short in GEMM or short.startswith(CONV_PREFIXES):
        return "gemm"
    if short in REDUCTION:
        return "reduction"
    if short in COPY:
        return "copy"
    return "elementwise" if name.startswith("aten::") else "other"


def is_library(name: str) -> bool:
    """A dispatcher op (`aten::relu`, `mkldnn::...`), not one of the harness's own spans."""
    return "::" in name and not name.startswith(MARK)


def outermost_library(evt: Any) -> bool:
    parent = evt.cpu_parent
    while parent is not None:
        if is_library(parent.name):
            return False
        parent = parent.cpu_parent
    return True


def shares(events: list[Any]) -> tuple[float, dict[str, float], list[tuple[str, str, float]]]:
    """Own milliseconds, library milliseconds by kind, and the costliest (name, kind, ms)."""
    own_ms = 0.0
    library: dict[str, float] = collections.defaultdict(float)
    per_name: dict[tuple[str, str], float] = collections.defaultdict(float)
    for evt in events:
        ms = evt.cpu_time_total / 1e3
        if evt.name.startswith(build.OWN_SPAN):
            inner = sum(c.cpu_time_total for c in evt.cpu_children if is_library(c.name)) / 1e3
            own_ms += max(ms - inner, 0.0)
            per_name[(evt.name.removeprefix(build.OWN_SPAN)[:120], "own")] += max(ms - inner, 0.0)
        elif is_library(evt.name) and outermost_library(evt) and (kind := op_kind(evt.name)) != "free":
            library[kind] += ms
            per_name[(evt.name[:120], kind)] += ms
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:8]
    return own_ms, dict(library), [(name, kind, ms) for (name, kind), ms in top]


def profile_cpu_call(model: Any, args: list[Any]) -> dict[str, Any]:
    """One forward under the CPU profiler: extension calls, own share and library shares of its time."""
    from torch.profiler import ProfilerActivity, profile, record_function

    before = build.REGISTRY.extension_calls
    build.REGISTRY.profiling = True
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof, torch.no_grad():
            with record_function(FORWARD_SPAN):
                model(*args)
    finally:
        build.REGISTRY.profiling = False
    calls = build.REGISTRY.extension_calls - before
    own_ms, library, top = shares(list(prof.events()))
    total = own_ms + sum(library.values())
    if total <= 0:
        return {"own_calls_per_forward": calls, "method": "extension_calls"}
    return {
        "own_calls_per_forward": calls,
        "own_share": own_ms / total,
        "library_share": {kind: ms / total for kind, ms in library.items()},
        "top_kernels": top,
        "method": "cpu_profiler",
    }


def warm_up() -> None:
    """Start the CPU profiler once, in a worker made ahead of its candidate (tools/worker/zygote.py), so that
    the candidate's usage check pays none of its start-up. Trusted code: no candidate exists yet."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(8).add_(1)
    prof.events()
