"""The harness's trusted builder process: one candidate `load_inline` built and published, nothing imported.

Started by tools/supervise/builder.py, contained like a candidate worker but running no candidate Python:
torch's build machinery writes the sources and the ninja file, ninja runs the compilers through the
harness's shim (reused objects, the precompiled header), and the finished build is renamed into the cache
under the key computed here from the call (tools/worker/build.py `build_key`). The built library is never
imported here (its static initialisers are the candidate's code): the candidate's worker loads it once it
is published. Progress goes to the channel as `wire.Building`, the outcome as one `wire.Built`.

Usage: python -m tools.worker.builder CALL.json CHANNEL_FD
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch.utils.cpp_extension as cpp_extension

from tools import wire
from tools.results import BuildInfo
from tools.wire import Channel
from tools.worker import build, contain


def _no_import(name: str, path: str, is_python_module: bool) -> Any:
    """torch's load_inline ends by importing what it built: here nothing is imported."""
    return None


def build_one(call: wire.BuildCall, cache_dir: Path, channel: Channel) -> wire.Built:
    args = {**call.model_dump(), "use_pch": False}
    key = build.build_key(args)
    entry = f"{call.name}-{key}"
    final = cache_dir / entry
    start = time.perf_counter()
    if (final / build.DONE_MARKER).is_file():  # another job published it meanwhile
        info = BuildInfo(name=call.name, key=key, cached=True, seconds=time.perf_counter() - start, ok=True)
        return wire.Built(ok=True, entry=entry, build=info)
    build.PROGRESS = channel.send
    try:
        build._build_fresh(args, key, cache_dir, final, start)
    except RuntimeError as exc:
        failed = build.REGISTRY.builds[-1] if build.REGISTRY.builds else None
        info = failed or BuildInfo(name=call.name, key=key, cached=False, seconds=0.0, ok=False)
        summary = "; ".join(d.message for d in build.REGISTRY.errors[:3]) or str(exc)
        return wire.Built(ok=False, build=info, errors=build.REGISTRY.errors, message=summary)
    return wire.Built(ok=True, entry=entry, build=build.REGISTRY.builds[-1])


def main(call_path: str, fd: str) -> int:
    channel = Channel(int(fd))
    if why := contain.attempt(contain.block_keyrings):  # as a candidate worker does (no keyring channel)
        print(f"kernel-agent: keyrings not blocked: {why}", file=sys.stderr, flush=True)
    channel.send(wire.Ready())  # the harness reads its containment now
    cpp_extension._import_module_from_library = _no_import
    call = wire.BuildCall.model_validate_json(Path(call_path).read_text())
    cache_dir = Path(os.environ["KERNEL_AGENT_BUILD_CACHE"])
    channel.send(build_one(call, cache_dir, channel))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
