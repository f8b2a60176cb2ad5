"""What a CUDA candidate worker pays before its first call, on this machine: seconds for `import torch`,
`import torch.utils.cpp_extension`, CUDA context creation (in a fresh process and in a child forked from a
process that imported both without touching the driver), the first cuBLAS call, and the first and second
use of the CUDA profiler (the evaluator profiles one call per evaluation). A benchmark, not a test.

    python bench/cuda_startup.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # as the zygote: no device query reaches the driver


def _seconds(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return round(time.perf_counter() - start, 4)


def _cuda_steps() -> dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    out: dict[str, float] = {}
    out["cuda_context"] = _seconds(lambda: torch.empty(1, device="cuda"))
    a = torch.randn(256, 256, device="cuda")
    out["first_cublas"] = _seconds(lambda: (a @ a, torch.cuda.synchronize()))

    def profiled() -> None:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            (a @ a).sum()
            torch.cuda.synchronize()
        list(prof.events())

    out["profiler_first"] = _seconds(profiled)
    out["profiler_second"] = _seconds(profiled)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    record: dict[str, object] = {"date": time.strftime("%Y-%m-%d")}
    record["import_torch"] = _seconds(lambda: __import__("torch"))
    record["import_cpp_extension"] = _seconds(lambda: __import__("torch.utils.cpp_extension"))
    import torch

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the zygote's case: a child forked after the imports
        os.close(read_fd)
        try:
            child = {"bad_fork": bool(torch._C._cuda_isInBadFork()), **_cuda_steps()}
        except BaseException as exc:
            child = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write_fd, json.dumps(child).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        record["forked_child"] = json.loads(pipe.read() or "{}")
    os.waitpid(pid, 0)
    record["fresh_process"] = _cuda_steps()
    record["torch"] = torch.__version__
    record["gpu"] = torch.cuda.get_device_name(0)
    print(json.dumps(record, indent=1))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(record, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
