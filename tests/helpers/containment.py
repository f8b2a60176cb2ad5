"""What a fully contained candidate worker's result lists (tools/supervise/isolation.py `observe`), in order."""

from __future__ import annotations

import pytest

from tools.supervise import isolation

FULL = [
    isolation.PIDNS,
    isolation.NETNS,
    isolation.NO_CAPS,
    isolation.IPCNS,
    isolation.NO_KEYRINGS,
    isolation.READ_ONLY,
    isolation.DEVICES,
    isolation.PRIVATE_JOBS,
]
# A process that is no candidate worker (a sleeper) sets no keyring filter of its own.
BARE = [g if g != isolation.NO_KEYRINGS else "uncontained: keyrings (not seen on the worker)" for g in FULL]


# Both ways a candidate runs: forked from the warm zygote (the default) and started cold (KERNEL_AGENT_WARM=0).
# The cold one is `slow`: the fast tier checks each guard on the default path, CI checks both.
BOTH_PATHS = ["warm", pytest.param("cold", marks=pytest.mark.slow)]
