"""What a CPU problem's processes start with: its thread budget and a heap that keeps the memory it frees."""

from __future__ import annotations

# A CPU problem's processes keep the memory they free, as CUDA's caching allocator does: glibc serves every
# block from its heap (no mmap per large block), never hands the heap back, and has no per-thread cache of
# small chunks, which sat beside each freed large block so that, torch's blocks being 64-byte aligned, none
# fitted the next request for six calls (now the second reuses it, in no more memory than glibc's default).
# Otherwise each of the reference's [B, L, D, N] temporaries is fresh pages from the kernel on every call:
# on a 2-core VM (2026-12-03) 200k page faults a call, 400-600 ms of its ~750 ms (its compute ~300 ms), a
# cost that moved it 460-770 ms between windows on CI's machine while the candidate, which allocates little,
# held at 213-226 ms. PyTorch's CPU tuning guide gets the same from jemalloc or tcmalloc; these are glibc's.
# (Three variables, not one GLIBC_TUNABLES list: glibc 2.36 parses that list in place, so /proc/<pid>/environ,
# where a test or a person checks what a worker started with, shows it cut at its first ':'.)
KEPT_HEAP_ENV = {
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
    "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0",
}


def cpu_env(threads: int | None) -> dict[str, str]:
    """A CPU problem's process settings, from its start: `threads` threads (its budget,
    tools.host.timing_threads), which OpenMP and MKL read as they load, before any later setting could apply
    (a runtime loaded in a zygote keeps its count in every child forked from it), and the kept heap
    (`KEPT_HEAP_ENV`, read at the first malloc). None (a CUDA problem): nothing."""
    if threads is None:
        return {}
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), **KEPT_HEAP_ENV}
