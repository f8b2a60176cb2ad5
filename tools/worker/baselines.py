"""One baseline timed at one shape, in a trusted process of its own (no candidate code ever runs here):
the reference replayed as a CUDA graph, `torch.compile` of the reference, or a problem's library
composition (a file beside its spec defining `ModelNew`, trusted as the reference is). Same timing loop,
L2 flush and settings as the reference's (tools/worker/timing.py). The parent (tools/judge/_baselines.py)
runs one process per baseline, so a compile that runs past its limit is killed alone.

`python -m tools.worker.baselines REQUEST.json` prints one JSON object: status, stats, message, and for the
compositions their error against the fp32 reference on the same inputs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tools.problem import Case
from tools.worker.refmod import build_case, to_device
from tools.worker.timing import measure

Forward = Callable[[], torch.Tensor]


def as_graph(forward: Forward) -> Forward:
    """The forward captured once as a CUDA graph and replayed (its inputs and output stay in place)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        forward()  # warm-up outside the capture (cuBLAS handles, lazy inits)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = forward()

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    return replay


def library_model(path: str, init_inputs: list[Any], state_dict: dict[str, torch.Tensor]) -> torch.nn.Module:
    spec = importlib.util.spec_from_file_location(f"baseline_{Path(path).stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model: torch.nn.Module = module.ModelNew(*init_inputs)
    model.load_state_dict(state_dict, strict=True)
    return model


def rel_l2(out: torch.Tensor, want: torch.Tensor) -> float:
    diff = (out.double() - want.double()).norm()
    return float(diff / want.double().norm().clamp_min(1e-30))


def prepared(req: dict[str, Any]) -> tuple[Forward, Forward, float]:
    """(the baseline's forward, the eager reference's forward, seconds spent making the baseline ready)."""
    device = req["device"]
    made = build_case(req["source"], Case(name="baseline"), req["sizes"], req["seed"])
    reference = made["model"].to(device).eval()
    inputs = to_device(made["inputs"], device)

    def eager() -> torch.Tensor:
        out: torch.Tensor = reference(*inputs)
        return out

    began = time.perf_counter()
    kind = req["kind"]
    if kind == "cuda_graph":
        forward = as_graph(eager)
    elif kind == "torch_compile":
        compiled = torch.compile(reference)

        def forward() -> torch.Tensor:
            out: torch.Tensor = compiled(*inputs)  # type: ignore[no-untyped-call]  # what torch.compile returns
            return out

        forward()  # the compile itself, bounded by the parent's time limit
    elif kind == "library":
        model = library_model(req["path"], made["init_inputs"], made["state_dict"]).to(device).eval()

        def forward() -> torch.Tensor:
            out: torch.Tensor = model(*inputs)
            return out

        forward()  # its build, where it builds an extension
    else:
        forward = eager
    if device == "cuda":
        torch.cuda.synchronize()
    return forward, eager, time.perf_counter() - began


def run(req: dict[str, Any]) -> dict[str, Any]:
    torch.backends.cuda.matmul.allow_tf32 = False  # as the reference is timed: fp32
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        forward, eager, ready_s = prepared(req)
        error = rel_l2(forward(), eager()) if req["kind"] != "eager" else 0.0
        samples = measure(lambda _i: forward(), lambda _i: None, device=req["device"], **req["cfg"])
    return {"status": "ok", "stats": samples.stats(), "rel_l2_vs_reference": error, "ready_s": ready_s}


def main(argv: list[str]) -> int:
    req = json.loads(Path(argv[0]).read_text())
    if req["device"] == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"status": "unavailable", "message": "no CUDA device visible to torch"}))
        return 0
    try:
        print(json.dumps(run(req)))
    except Exception as exc:  # trusted code that fails: the baseline is not available, and why
        print(json.dumps({"status": "failed", "message": f"{type(exc).__name__}: {str(exc)[-600:]}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
