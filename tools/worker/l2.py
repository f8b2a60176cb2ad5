"""Persisting L2 lines against the timing loop's flush (GUIDE §2 rows 20 and 30).

A candidate can set aside part of L2 for persisting accesses (`cudaDeviceSetLimit(
cudaLimitPersistingL2CacheSize)`) and mark its weights persisting (an access-policy window on a stream or a
launch): lines so marked survive the 256 MB write that should leave every call a cold cache. The timing loop
therefore demotes every persisting line to normal (`cudaCtxResetPersistingL2Cache`) before each flush, then
the flush evicts them; a stream's access-policy window needs no reset, since the flush's own writes lie
outside any window the candidate set. Nothing can persist while no L2 is set aside, so after each call the
loop reads the set-aside size: where a candidate set one and the reset did not run or failed, its time is not
a cold cache's (tools/judge/_device_guards.py).

The runtime's functions are found once, in the CUDA runtime torch itself loaded (its path read from
/proc/self/maps, so no second runtime comes in), before any candidate is imported.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass

LIMIT_PERSISTING_L2 = 0x06  # cudaLimitPersistingL2CacheSize
RUNTIME_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")

ResetFn = Callable[[], int]
LimitFn = Callable[..., int]


def _mapped_runtimes() -> list[str]:
    """Paths of the CUDA runtimes already mapped into this process (torch's)."""
    try:
        fd = os.open("/proc/self/maps", os.O_RDONLY)
    except OSError:
        return []
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    paths = (
        line.split()[-1] for line in b"".join(chunks).decode(errors="replace").splitlines() if "/" in line
    )
    return list(dict.fromkeys(p for p in paths if "/libcudart.so" in p))


def find_runtime() -> tuple[ResetFn | None, LimitFn | None]:
    """cudaCtxResetPersistingL2Cache and cudaDeviceGetLimit of torch's CUDA runtime, or None each."""
    for name in [*_mapped_runtimes(), *RUNTIME_NAMES]:
        try:
            lib = ctypes.CDLL(name)
            return lib.cudaCtxResetPersistingL2Cache, lib.cudaDeviceGetLimit
        except (OSError, AttributeError):
            continue
    return None, None


def set_aside_bytes(get_limit: LimitFn | None) -> int | None:
    """L2 bytes set aside for persisting accesses right now; None where it cannot be read."""
    if get_limit is None:
        return None
    value = ctypes.c_size_t(0)
    if get_limit(ctypes.byref(value), ctypes.c_int(LIMIT_PERSISTING_L2)) != 0:
        return None
    return int(value.value)


# What the device sets aside before any candidate ran (read by `record_default` in a fresh context): an H100
# host read 9.4 MiB with nothing of ours or a candidate's run (2026-12-06), so only more than this is a candidate's.
DEFAULT_SET_ASIDE: list[int] = []


def record_default(get_limit: LimitFn | None) -> None:
    """Read the device's own set-aside once, in a context no candidate has touched yet."""
    DEFAULT_SET_ASIDE[:] = [set_aside_bytes(get_limit) or 0]


@dataclass
class L2Watch:
    """One timing loop's persisting-L2 record: each reset's outcome and the largest set-aside seen."""

    reset_fn: ResetFn | None
    get_limit: LimitFn | None
    resets: int = 0
    failed: int = 0
    first_error: int = 0
    set_aside: int = 0

    def reset(self) -> None:
        """Demote every persisting line to normal (before the flush evicts everything)."""
        if self.reset_fn is None:
            return
        self.resets += 1
        if (rc := self.reset_fn()) != 0:
            self.failed += 1
            self.first_error = self.first_error or rc

    def observe(self) -> None:
        """After a call: how much L2 is set aside for persisting lines beyond the device's own (the harness
        itself sets none)."""
        default = DEFAULT_SET_ASIDE[0] if DEFAULT_SET_ASIDE else 0
        self.set_aside = max(self.set_aside, (set_aside_bytes(self.get_limit) or 0) - default)

    def status(self) -> str:
        """ "ok" where every flush came after a successful reset, else what went wrong."""
        if self.reset_fn is None:
            return "unavailable: no CUDA runtime with cudaCtxResetPersistingL2Cache in this process"
        if self.failed:
            return f"failed: {self.failed} of {self.resets} resets returned cudaError {self.first_error}"
        return "ok"
