"""What a sanitizer's run changes in the candidate's build, shared by the worker (tools.worker.build applies
it) and the judge (tools.judge._sanitize asks for it): no torch here, so the judge's process stays light.
"""

from __future__ import annotations

import re

SANITIZE_BUILD_ENV = "KERNEL_AGENT_SANITIZE_BUILD"  # "asan": C++ extensions built for the CPU sanitizer
# ASan and UBSan (vptr off: its checks misfire on types that cross torch's shared libraries), frame pointers
# for its stacks, -g1 for its lines (line tables only), -O1 (ASan's own advice: -O3 may drop a stray access
# whose value nothing uses). Appended last, so the candidate's own flags cannot turn them off or raise -O.
# On 2 cores -g1 -O1 took the out-of-bounds kernel's instrumented build from 86 to 38 s with the same report
# (2026-12-07). They change load_inline's arguments, so such a build has a cache key of its own.
ASAN_CFLAGS = ("-fsanitize=address,undefined", "-fno-sanitize=vptr", "-fno-omit-frame-pointer", "-g1", "-O1")
ASAN_LDFLAGS = ("-fsanitize=address,undefined",)

GLOBAL_FN = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)"
)


def kernel_names(source: str) -> set[str]:
    """The `__global__` functions a source defines (a candidate's module: its CUDA strings included)."""
    return set(GLOBAL_FN.findall(source))
