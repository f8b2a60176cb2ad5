"""What ran during one call of the candidate: its own kernels against library code, by the CUDA profiler
(on the CPU, its extension's calls against torch's ops: tools/worker/cpu_usage.py); and the profiler's start-up, done ahead of time in a
worker made before its candidate arrives."""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import torch

from tools.launches import REGION, first_launch
from tools.worker import build, cpu_usage, hold, smem
from tools.worker.outputs import WRITER_STAGING


def classify_kernel(name: str, own: set[str]) -> str:
    if any(k in name for k in own):
        return "own"
    low = name.lower()
    # nvjet: cuBLAS 12.9+'s own GEMM kernels on Hopper (e.g. nvjet_sm90_hss_176x128_64x5_1x2_h_bz_TNN for an
    # fp16-in, fp32-out GEMM), whose names say none of the older words.
    if any(
        s in low
        for s in ("gemm", "cutlass", "cublas", "xmma", "gmma", "gemv", "dot_kernel", "splitk", "nvjet")
    ):
        return "gemm"
    if any(s in low for s in ("memcpy", "memset")):
        return "copy"
    if "reduce" in low:
        return "reduction"
    if "elementwise" in low or "at::native" in low:
        return "elementwise"
    return "other"


def profile_call(model: Any, pristine: list[Any], device: str) -> dict[str, Any]:
    """One profiled forward: which kernels ran and how much device time each kind took, and the host time to
    its first launch (on the CPU there is none: the host's clock times the call itself)."""
    args = [t.clone() if isinstance(t, torch.Tensor) else t for t in pristine]
    if device != "cuda":
        return {**cpu_usage.profile_cpu_call(model, args), "first_launch": "not_applicable"}
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, torch.no_grad():
        with record_function(REGION):
            model(*args)
        torch.cuda.synchronize()
    host = [
        (e.name, e.time_range.start) for e in prof.events() if e.device_type != torch.autograd.DeviceType.CUDA
    ]
    on_device = [
        DeviceEvent(e.name, e.device_time / 1e3, bool(getattr(e, "is_user_annotation", False)))
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    ]
    return {**tally_kernels(on_device, build.REGISTRY.own_kernel_names), **first_launch(host)}


class DeviceEvent(NamedTuple):
    """One event of a profile's device timeline: a kernel, a copy, or a user annotation's range."""

    name: str
    ms: float
    annotation: bool


def tally_kernels(events: list[DeviceEvent], own: set[str]) -> dict[str, Any]:
    """Device time by kind of kernel. A user annotation is no kernel: torch 2.11 puts every record_function
    range on the device's timeline too (our forward's `REGION` among them, seen on an H100 on 2026-12-07),
    spanning the kernels inside it, so counting it would double the time and call it library work."""
    totals: dict[str, float] = collections.defaultdict(float)
    per_kernel: dict[tuple[str, str], float] = collections.defaultdict(float)
    own_calls = 0
    for evt in events:
        if evt.annotation or evt.name == REGION:
            continue
        kind = classify_kernel(evt.name, own)
        totals[kind] += evt.ms
        per_kernel[(evt.name[:120], kind)] += evt.ms
        own_calls += kind == "own"
    total = sum(totals.values()) or 1.0
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:8]
    return {
        "own_calls_per_forward": own_calls,
        "own_share": totals.get("own", 0.0) / total,
        "library_share": {k: v / total for k, v in totals.items() if k != "own"},
        "top_kernels": [(name, kind, ms) for (name, kind), ms in top],
        "method": "cuda_profiler",
    }


def warm_up_cuda(pinned_bytes: int = 0) -> None:
    """What a CUDA worker made ahead of its candidate does first (tools/worker/zygote.py): create the CUDA context
    and cuBLAS's handle, start the CUDA profiler once (about 4 s on the H200, then ~5 ms per use), and pin
    `pinned_bytes` of host memory for the kept outputs' copies (tools/worker/outputs.py `WRITER_STAGING`),
    so that the candidate's evaluation pays none of it (pinned as the first shapes needed it, the selective
    scan's 192 and 302 MB cost 0.13 and 0.26 s of each evaluation, H200). Trusted code: no candidate exists
    yet."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(64, 64, device="cuda")
    with torch.no_grad():
        y = x @ x
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        y.add_(1)
        torch.cuda.synchronize()
    prof.events()
    hold.load()  # the timing loop's launch hold (tools/worker/hold.py), loaded while no candidate exists
    smem.load()  # and the shared-memory poison
    del x, y
    torch.cuda.empty_cache()
    if pinned_bytes > 0:
        WRITER_STAGING.take(pinned_bytes)
