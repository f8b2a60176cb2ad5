"""Where a candidate's compile seconds go: tool seconds per candidate, cold and cached, by phase.

A benchmark, not a test. It derives fresh candidates from a split-form solution (default: the shipped
selective-scan best.py) by editing its extension name and adding comments to its sources, so nothing is
cached by accident, and runs each through `compile_kernel` (a fresh isolated worker, as the agent does):

- first:       an empty cache (the harness's precompiled header, if any, is built here)
- new_kernel:  a new `.cu`, the same binding and extension name (what a template-following edit is)
- new_binding: a new `.cu` and a new binding
- hit:         the last candidate again; python_edit: it with a Python-only edit (both build-cache hits)

Per build: ninja's `.ninja_log` (start/end per output: the binding object, the CUDA object, the link),
nvcc's own `-time` phases (host: preprocess, cudafe++, host compile; device: preprocess, cicc, ptxas,
fatbinary) and the harness's compiler-shim records where present. A probe process then times `import
torch`, the cache-hit load_inline (its build part) and the module import, and the first CUDA call where a
GPU exists.

Usage: python bench/compile_latency.py --json OUT.json [--runs 3] [--candidate FILE] [--cache DIR] [--label L]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DEFAULT_CANDIDATE = REPO / "problems" / "selective_scan" / "solutions" / "best.py"
PROBLEM = REPO / "problems" / "selective_scan.yaml"
NVCC_TIME = "nvcc_time.csv"
HOST_PHASES = ("gcc (preprocessing 4)", "cudafe++", "gcc (compiling)")
DEVICE_PHASES = ("gcc (preprocessing 1)", "cicc", "ptxas", "fatbinary", "nvlink")


def variant(source: str, name: str, kernel_tag: str, binding_tag: str) -> str:
    """The candidate with a fresh extension name, tagged sources and nvcc's phase timer on."""
    edits = {
        'name="ss08_lanes4_3xtf32_best"': f'name="{name}"',
        '_CUDA_SRC = r"""\n': f'_CUDA_SRC = r"""\n// latency bench kernel {kernel_tag}\n',
        '_CPP_SRC = r"""\n': f'_CPP_SRC = r"""\n// latency bench binding {binding_tag}\n',
        'extra_cuda_cflags=["-O3"]': f'extra_cuda_cflags=["-O3", "-time", "{NVCC_TIME}"]',
    }
    for old, new in edits.items():
        if old not in source:
            raise SystemExit(f"candidate lacks {old!r}: pass a split-form candidate shaped like best.py")
        source = source.replace(old, new, 1)
    return source


def ninja_phases(build_dir: Path) -> dict[str, float]:
    """Seconds per output from ninja's log (`start end mtime output hash`, ms from ninja's start)."""
    log = build_dir / ".ninja_log"
    if not log.is_file():
        return {}
    spans: dict[str, float] = {}
    starts, ends = [], []
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if line.startswith("#") or len(parts) < 4:
            continue
        start, end = int(parts[0]), int(parts[1])
        spans[parts[3]] = (end - start) / 1000
        starts.append(start)
        ends.append(end)
    if starts:
        spans["ninja_wall"] = (max(ends) - min(starts)) / 1000
    return spans


def nvcc_phases(build_dir: Path) -> dict[str, float]:
    path = build_dir / NVCC_TIME
    if not path.is_file():
        return {}
    out: dict[str, float] = {}
    with path.open() as f:
        for row in csv.reader(f):
            cells = [c.strip() for c in row]
            if len(cells) < 8 or cells[7] != "ms":
                continue
            out[cells[1]] = out.get(cells[1], 0.0) + float(cells[6]) / 1000
    out["host_total"] = sum(v for k, v in out.items() if k in HOST_PHASES)
    out["device_total"] = sum(v for k, v in out.items() if k in DEVICE_PHASES)
    return out


def shim_records(build_dir: Path) -> list[dict[str, Any]]:
    path = build_dir / "kagent_compiles.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compile_once(label: str, source: str, cache: Path) -> dict[str, Any]:
    from tools import compile_kernel
    from tools.problem import load_problem

    start = time.perf_counter()
    result = compile_kernel(load_problem(PROBLEM), source)
    tool_s = time.perf_counter() - start
    row: dict[str, Any] = {
        "label": label,
        "status": result.status,
        "tool_s": round(tool_s, 3),
        "cached": result.cached,
        "build_s": round(sum(b.seconds for b in result.builds), 3),
        "message": result.message[:300] if result.status != "ok" else "",
    }
    for b in result.builds if not result.cached else []:  # a hit's folder holds the first build's logs
        build_dir = cache / "builds" / f"{b.name}-{b.key}"
        row["ninja"] = ninja_phases(build_dir)
        row["nvcc"] = nvcc_phases(build_dir)
        row["shim"] = shim_records(build_dir)
    print(f"{label:12s} {result.status:8s} tool {tool_s:7.2f} s  build {row['build_s']:7.2f} s", flush=True)
    return row


PROBE = r"""
import json, os, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
from tools.worker import build
build.install()
import importlib.util
spec = importlib.util.spec_from_file_location("kernel", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
t2 = time.perf_counter()
spec.loader.exec_module(mod)
t3 = time.perf_counter()
out = {"import_torch_s": t1 - t0, "candidate_import_s": t3 - t2,
       "load_inline_hit_s": [b.seconds for b in build.REGISTRY.builds]}
if torch.cuda.is_available():
    t4 = time.perf_counter()
    torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
    t5 = time.perf_counter()
    m = mod.ModelNew(256, 16).cuda()
    x = torch.randn(2, 256, 256, device="cuda")
    torch.cuda.synchronize()
    t6 = time.perf_counter()
    m(x); torch.cuda.synchronize()
    t7 = time.perf_counter()
    m(x); torch.cuda.synchronize()
    out.update(cuda_init_s=t5 - t4, first_call_s=t7 - t6, second_call_s=time.perf_counter() - t7)
print("PROBE " + json.dumps(out))
"""


def probe(source: str, cache: Path) -> dict[str, Any]:
    """A cache hit's parts in a fresh process: torch import, the build lookup + module import, first call."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.py"
        path.write_text(source)
        env = {**os.environ, "KERNEL_AGENT_BUILD_CACHE": str(cache / "builds")}
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(path), str(REPO)],
            capture_output=True, text=True, env=env, cwd=tmp, timeout=600,
        )  # fmt: skip
    for line in out.stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[6:])
    return {"error": (out.stdout + out.stderr)[-2000:]}


def environment() -> dict[str, Any]:
    import torch

    from tools.envinfo import harness_sha, nvidia_smi

    def first_line(cmd: list[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
            return out.splitlines()[-1] if out else ""
        except OSError:
            return ""

    smi = nvidia_smi()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "loadavg": os.getloadavg(),
        "gpu": smi["name"] if smi else None,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "nvcc": first_line(["nvcc", "--version"]),
        "cxx": subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.split("\n")[0],
        "python": platform.python_version(),
        "harness_sha": harness_sha(),
        "max_jobs": os.environ.get("MAX_JOBS"),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[str, list[float]] = {}
    for r in rows:
        if r["status"] == "ok":
            by.setdefault(r["label"], []).append(r["tool_s"])
    return {k: {"median_tool_s": statistics.median(v), "n": len(v), "all": v} for k, v in by.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, type=Path, help="where to write the results")
    ap.add_argument("--runs", type=int, default=1, help="new_kernel and new_binding candidates each")
    ap.add_argument("--candidate", type=Path, default=DEFAULT_CANDIDATE)
    ap.add_argument("--cache", type=Path, help="KERNEL_AGENT_CACHE to use (default: a fresh empty one)")
    ap.add_argument("--label", default="", help="free text stored with the results (e.g. before/after)")
    args = ap.parse_args(argv)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="kagent-latency-"))
    os.environ["KERNEL_AGENT_CACHE"] = str(cache)
    base = args.candidate.read_text()
    run = uuid.uuid4().hex[:6]
    name = f"lat_{run}"
    rows = [compile_once("first", variant(base, name, f"{run}k0", f"{run}b0"), cache)]
    source = ""
    for i in range(1, args.runs + 1):
        source = variant(base, name, f"{run}k{i}", f"{run}b0")
        rows.append(compile_once("new_kernel", source, cache))
    for i in range(1, args.runs + 1):
        source = variant(base, name, f"{run}k{i}n", f"{run}b{i}")
        rows.append(compile_once("new_binding", source, cache))
    rows.append(compile_once("hit", source, cache))
    rows.append(compile_once("python_edit", source + "\n# a python-only edit\n", cache))
    result = {
        "label": args.label,
        "env": environment(),
        "candidate": str(
            args.candidate.relative_to(REPO) if args.candidate.is_relative_to(REPO) else args.candidate
        ),
        "summary": summarize(rows),
        "runs": rows,
        "probe_cache_hit": probe(source, cache),
        "cache_mb": round(sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) / 2**20, 1),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print("probe:", json.dumps(result["probe_cache_hit"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
