"""One forward of a selective-scan module at shape 1 for Nsight Compute: a warm-up call, then one call
between cudaProfilerStart/Stop, so `ncu --profile-from-start off` sees only that forward's kernels.

  ncu --profile-from-start off --section SpeedOfLight ... python3 bench/ncu_forward.py KERNEL.py [B L D]
"""

from __future__ import annotations

import importlib.util
import sys

import torch


def main(path: str, batch: int = 16, seqlen: int = 1024, d_model: int = 1024) -> None:
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.ModelNew(d_model, 16).cuda()
    x = torch.randn(batch, seqlen, d_model, device="cuda")
    model(x)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    model(x)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:5]))
