"""Shared memory poisoned before every call of the candidate, as its output block is (GUIDE §2 row 27).

A kernel that reads shared memory it never wrote gets whatever an earlier kernel left on that SM: on an
evaluator, the harness's own kernels or the last call's, finite values that often pass. compute-sanitizer's
initcheck sees shared memory only from 2025.4 (`--initcheck-address-space all`; the H200's tool had none),
and only under `--sanitize`. So before each call (the correctness cases and every timed call alike) one
trusted kernel fills the shared memory of every SM, as much as one block may hold, with 0x7FC07FC0: a NaN as
float32, as each half of a float16 or bfloat16 pair, a near-overflow double. A read of it that reaches the
output makes the output NaN, which no check passes. What an earlier kernel of the same call left is the
candidate's own doing and is not covered (the sanitizer is).

The kernel is PTX (below), loaded through the CUDA driver API into torch's context on first use
(tools/worker/ptx.py): no build, no extension.
Where anything of that fails, `status()` says why and `poison_shared` does nothing.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from tools.worker import ptx

PATTERN = 0x7FC07FC0
KERNEL = "kagent_poison_shared"
PTX = b"""
.version 7.5
.target sm_75
.address_size 64

.extern .shared .align 16 .b8 smem[];

.visible .entry kagent_poison_shared(
	.param .u32 kagent_poison_shared_param_0,
	.param .u32 kagent_poison_shared_param_1
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<11>;

	ld.param.u32 	%r5, [kagent_poison_shared_param_0];
	ld.param.u32 	%r6, [kagent_poison_shared_param_1];
	mov.u32 	%r10, %tid.x;
	setp.ge.u32 	%p1, %r10, %r5;
	@%p1 bra 	$L__BB0_3;

	mov.u32 	%r2, %ntid.x;

$L__BB0_2:
	shl.b32 	%r7, %r10, 2;
	mov.u32 	%r8, smem;
	add.s32 	%r9, %r8, %r7;
	st.volatile.shared.u32 	[%r9], %r6;
	add.s32 	%r10, %r10, %r2;
	setp.lt.u32 	%p2, %r10, %r5;
	@%p2 bra 	$L__BB0_2;

$L__BB0_3:
	ret;

}
"""
THREADS = 1024
WAVES = 2  # blocks per SM: the second wave lands wherever the first left room


@dataclass
class _Poisoner:
    """The loaded kernel and its launch shape on one device."""

    launch: object  # cuLaunchKernel
    function: ctypes.c_void_p
    blocks: int
    smem_bytes: int


_STATE: dict[str, _Poisoner | str] = {}  # "poisoner": the loaded kernel, or why there is none


def _load() -> _Poisoner:
    """The kernel in the current context (torch's), sized to the current device."""
    driver = ptx.Driver()
    count = driver.attribute(ptx.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessors")
    optin = driver.attribute(
        ptx.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory per block"
    )
    kernel = driver.load(PTX, KERNEL, dynamic_smem=optin)
    return _Poisoner(kernel.launch, kernel.function, WAVES * count, optin)


def load() -> _Poisoner | None:
    """The kernel, loaded on first use (tools/worker/usage.py `warm_up_cuda` loads it before any candidate exists)."""
    if "poisoner" not in _STATE:
        try:
            _STATE["poisoner"] = _load()
        except (OSError, AttributeError) as exc:
            _STATE["poisoner"] = f"unavailable: {exc}"
    found = _STATE["poisoner"]
    return found if isinstance(found, _Poisoner) else None


def poison_shared() -> None:
    """Fill every SM's shared memory with PATTERN, on the current stream (before the candidate's call)."""
    p = load()
    if p is None:
        return
    words, pattern = ctypes.c_uint(p.smem_bytes // 4), ctypes.c_uint(PATTERN)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(words), ctypes.addressof(pattern))
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    rc = p.launch(p.function, p.blocks, 1, 1, THREADS, 1, 1, p.smem_bytes, stream, params, None)  # type: ignore[operator]
    if rc != 0:
        _STATE["poisoner"] = f"failed: cuLaunchKernel returned CUresult {rc}"


def status() -> str:
    """ "ok" once the kernel has launched without an error, else why it does not ("" before first use)."""
    found = _STATE.get("poisoner")
    return "" if found is None else "ok" if isinstance(found, _Poisoner) else found
