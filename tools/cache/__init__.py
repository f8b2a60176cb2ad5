"""Everything the harness keeps between evaluations, in one place under $KERNEL_AGENT_CACHE
(default ~/.cache/kernel-agent):

- `builds/`: the build cache (`tools.cache.builds`: content-keyed extension builds, reused objects and
  precompiled headers, an LRU size cap, pins);
- `reference_times.json`: reference medians per problem, shape, host and torch, and the primary shape's
  last quiet windows on a device's clock (`tools.cache.reference_times.ReferenceTimes`).

This package's root imports nothing heavy: the compiler shim imports `tools.cache.builds` on every
compiler run.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The harness's cache (builds, reference times): $KERNEL_AGENT_CACHE or ~/.cache/kernel-agent."""
    root = os.environ.get("KERNEL_AGENT_CACHE") or str(Path.home() / ".cache" / "kernel-agent")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_cache_dir() -> Path:
    path = cache_root() / "builds"
    path.mkdir(parents=True, exist_ok=True)
    return path
