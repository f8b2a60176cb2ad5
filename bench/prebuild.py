"""Build kernels into the build cache in parallel, so that a script's later steps time evaluations, not
builds. Each build goes through `compile_kernel` (the harness's own builder and cache).

    python -m bench.prebuild PROBLEM KERNEL.py [...] [--gpu-candidates] [--jobs 8]

`--gpu-candidates` adds every distinct source of tests/adversarial/gpu/gpu_candidates.py (the GPU tests');
`--gate-candidates` only those the gate's tests build (`-m "gpu and gate"`: 01's extension and the faults').
While the builds run, the host facts a run's prompt states are measured (tools.envinfo.hardware_summary:
on a GPU, a probe cached per host), since the GPU is idle then. Exits 1 if any build fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import sys
import threading
import time
from pathlib import Path

from tools import compile_kernel
from tools.envinfo import hardware_summary
from tools.problem import load_problem


def gpu_candidate_sources(*, gate_only: bool = False) -> dict[str, str]:
    from tests.adversarial.gpu import gpu_candidates as g

    # One per distinct extension, each alone: a candidate that loads two builds them one after the other.
    makers = (g.baseline, g.faults_extension_only)
    if not gate_only:
        makers += (g.three_x_tf32, g.sanitizer_faults, g.guards_extension_only)
    return {f"gpu_candidates.{m.__name__}": m() for m in makers}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("problem")
    parser.add_argument("kernels", nargs="*")
    parser.add_argument("--gpu-candidates", action="store_true")
    parser.add_argument("--gate-candidates", action="store_true")
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    problem = load_problem(args.problem)
    sources = {k: Path(k).read_text() for k in args.kernels}
    if args.gpu_candidates or args.gate_candidates:
        sources |= gpu_candidate_sources(gate_only=not args.gpu_candidates)
    unique: dict[str, str] = {}
    for name, code in sources.items():
        unique.setdefault(code, name)
    start = time.monotonic()
    facts = threading.Thread(target=hardware_summary, args=(problem,), daemon=True)
    facts.start()  # else the first `agent run` on a bare host makes this probe on its critical path
    failed = 0
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(compile_kernel, problem, code): name for code, name in unique.items()}
        for fut in cf.as_completed(futures):
            r = fut.result()
            failed += not r.ok
            print(f"prebuilt {futures[fut]}: {r.status} {r.seconds:.1f} s {'' if r.ok else r.message[:300]}")
    facts.join()
    print(f"prebuilt {len(unique)} kernels in {time.monotonic() - start:.0f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
