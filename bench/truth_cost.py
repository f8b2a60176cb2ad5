"""Where one evaluation's truth and judge seconds go, step by step: a benchmark, not a test.

    python bench/truth_cost.py problems/selective_scan.yaml --json OUT.json

In one process, as the warm truth worker (tools/worker/truth.py) makes one evaluation's data and truth,
each step timed on its own: building a shape's weights and inputs, rolling the checked calls' inputs, the
float64 reference per call (eager, and replayed from a CUDA graph captured once, with the replay's output
compared bit for bit with the eager one), the fp32 reference's call, the truth's copy to the host, the
data and truth files written and read back (tmpfs where it has room), and the parent's float64 comparison
of one fp32 output against its truth (tools/compare.py) at the default thread count and at a few.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tools.compare import compare  # noqa: E402
from tools.problem import Case, load_problem  # noqa: E402
from tools.supervise.pool import scratch_root  # noqa: E402
from tools.worker import fresh, refmod  # noqa: E402
from tools.worker.truth import Judge, reset_backend_flags  # noqa: E402


def timed(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def graphed(model: torch.nn.Module, example: list[Any]) -> tuple[Callable[[list[Any]], torch.Tensor], float]:
    """The model's forward captured once as a CUDA graph on static inputs; replay copies new inputs in."""
    static = [t.clone() if isinstance(t, torch.Tensor) else t for t in example]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        model(*static)  # warm-up outside the capture (allocator, cuBLAS workspaces)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    start = time.perf_counter()
    with torch.cuda.graph(graph), torch.no_grad():
        out = model(*static)
    torch.cuda.synchronize()
    capture_s = time.perf_counter() - start

    def replay(inputs: list[Any]) -> torch.Tensor:
        for s, t in zip(static, inputs, strict=True):
            if isinstance(s, torch.Tensor):
                s.copy_(t)
        graph.replay()
        return out

    return replay, capture_s


def shape_costs(problem: Any, shape: Any, folder: Path, device: str) -> dict[str, Any]:
    row: dict[str, Any] = {"name": shape.name}
    pins = problem.pins(shape)
    row["build_s"], built = timed(
        lambda: refmod.build_case(problem.reference_source, Case(name=shape.name), pins, 1234), "cpu"
    )
    sets_n = problem.spec.timing_config.input_sets
    row["roll_s"], sets = timed(lambda: [fresh.rolled(built["inputs"], 77 + k) for k in range(sets_n)], "cpu")
    row["judge_init_s"], judge = timed(lambda: Judge(built["model"], device), device)
    on_dev = [refmod.to_device(s, device, torch.float64) for s in sets]
    eager: list[float] = []
    truths = []
    for s in on_dev:
        with torch.no_grad():
            secs, out = timed(lambda s=s: judge.model64(*s).detach(), device)
        eager.append(secs)
        truths.append(out)
    row["fp64_eager_s"] = eager
    args32 = refmod.to_device(sets[0], device)
    with torch.no_grad():
        row["fp32_eager_s"], out32 = timed(lambda: judge.model32(*args32).detach(), device)
    if device == "cuda":
        try:
            replay, row["fp64_capture_s"] = graphed(judge.model64, on_dev[0])
            reps = []
            same = True
            for s, t in zip(on_dev, truths, strict=True):
                secs, out = timed(lambda s=s: replay(s), device)
                reps.append(secs)
                same = same and bool(torch.equal(out, t))
            row["fp64_replay_s"], row["replay_bitwise_equal"] = reps, same
            replay32, row["fp32_capture_s"] = graphed(judge.model32, args32)
            row["fp32_replay_s"], r32 = timed(lambda: replay32(args32), device)
            row["fp32_replay_equal"] = bool(torch.equal(r32, out32))
            del replay, replay32
        except Exception as exc:  # a reference that cannot be captured says why
            row["graph_error"] = f"{type(exc).__name__}: {exc}"
    row["to_host_s"], host = timed(lambda: [t.to("cpu", torch.float64) for t in truths], device)
    data_path, truth_path = folder / f"{shape.name}.pt", folder / f"{shape.name}.truth.pt"
    payload = {"state_dict": built["state_dict"], "base": built["inputs"]}
    row["save_data_s"], _ = timed(lambda: torch.save(payload, data_path), "cpu")
    row["save_truth_s"], _ = timed(lambda: torch.save(host, truth_path), "cpu")
    row["truth_bytes"] = truth_path.stat().st_size
    row["load_truth_s"], loaded = timed(lambda: torch.load(truth_path, weights_only=True), "cpu")
    row["load_data_s"], _ = timed(lambda: torch.load(data_path, weights_only=True), "cpu")
    candidate_out = out32.to("cpu")
    tol = problem.spec.tolerance
    sizes = problem.sizes_of(shape)
    threads = torch.get_num_threads()
    row["compare_s"] = {}
    for n in sorted({threads, 8, 4, 2}):
        torch.set_num_threads(n)
        row["compare_s"][str(n)], _ = timed(
            lambda: compare(shape.name, candidate_out, loaded[0], tol, sizes), "cpu"
        )
    torch.set_num_threads(threads)
    if device == "cuda":
        gpu_truth = truths[0]
        secs, _ = timed(lambda: compare(shape.name, out32, gpu_truth, tol, sizes), device)
        row["compare_on_gpu_s"] = secs
    judge.release()
    data_path.unlink()
    truth_path.unlink()
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("problem")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    problem = load_problem(args.problem)
    device = problem.spec.device
    reset_backend_flags()
    if device == "cuda":
        torch.empty(1, device="cuda")
    rows = []
    with tempfile.TemporaryDirectory(dir=scratch_root()) as tmp:
        for shape in problem.spec.timing:
            rows.append(shape_costs(problem, shape, Path(tmp), device))
            print(json.dumps(rows[-1]), flush=True)
            if device == "cuda":
                torch.cuda.empty_cache()
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "problem": problem.name,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "threads": torch.get_num_threads(),
        "shapes": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
