"""Build, check and time selective-scan candidates in one GPU session.

Standalone on purpose (the H200 image has torch and PyYAML but not this package's deps): it reads
problems/selective_scan.yaml with PyYAML, loads the reference module from its file, computes float64
truth on the GPU, then for every variant file (a module defining ModelNew):
  - builds all variants in parallel child processes (load_inline at import), recording build time;
  - checks every correctness case (and each timing shape) against float64 truth with the spec's
    atol/rtol (elementwise) and rel_l2, plus input-unchanged and run-to-run determinism;
  - times every timing shape: CUDA events, a 256 MB L2 flush before each call, warm-ups, the median
    over `--iters` calls rotating through 3 input sets;
  - optionally sweeps FORCE_CHUNKS for modules that expose it, and profiles the primary shape's
    kernels (device time by kernel name) with torch.profiler.
Writes `<out>/scan_variants.json` and prints a short table last.

  python3 bench/scan_variants.py [--variants a.py b.py ...] [--out DIR] [--iters 30] [--sweep 1,2,4,8]
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
SPEC_PATH = ROOT / "problems" / "selective_scan.yaml"
SOLUTIONS = ROOT / "problems" / "selective_scan" / "solutions"
FLUSH_BYTES = 256 * 1024 * 1024


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def variant_name(path: Path) -> str:
    rel = path.relative_to(SOLUTIONS) if path.is_relative_to(SOLUTIONS) else Path(path.name)
    return str(rel.with_suffix("")).replace("/", "__")


def prebuild(paths: list[Path], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Import each variant in its own process at once, so the load_inline builds run in parallel."""
    procs: dict[str, tuple[subprocess.Popen[str], float]] = {}
    for p in paths:
        code = (
            "import importlib.util, sys; "
            f"s = importlib.util.spec_from_file_location('v', {str(p)!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)"
        )
        procs[variant_name(p)] = (
            subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            ),
            time.monotonic(),
        )
    out: dict[str, dict[str, Any]] = {}
    for name, (proc, t0) in procs.items():
        try:
            log, _ = proc.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            log, _ = proc.communicate()
        out[name] = {
            "ok": proc.returncode == 0,
            "seconds": round(time.monotonic() - t0, 1),
            "log": log[-3000:],
        }
    return out


class Reference:
    """The problem's reference module, sized and initialised per case as the harness does."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.mod = load_module(SPEC_PATH.parent / spec["reference"], "ss_reference")

    def build(
        self, sizes: dict[str, int], init: dict[str, Any], seed: int
    ) -> tuple[torch.nn.Module, torch.Tensor]:
        for k, v in sizes.items():
            setattr(self.mod, k, v)
        torch.manual_seed(seed)
        model = self.mod.Model(*self.mod.get_init_inputs())
        with torch.no_grad():
            for pname, how in init.items():
                param = getattr(model, pname)
                if how["kind"] == "uniform":
                    param.uniform_(how["low"], how["high"])
                elif how["kind"] == "normal":
                    param.normal_(how.get("mean", 0.0), how.get("std", 1.0))
                else:
                    param.fill_(how["value"])
        (x,) = self.mod.get_inputs()
        return model.cuda(), x.cuda()

    @staticmethod
    def truth(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return copy.deepcopy(model).double()(x.double())


def errors(out: torch.Tensor, truth: torch.Tensor, tol: dict[str, float]) -> dict[str, Any]:
    o = out.double()
    diff = (o - truth).abs()
    bound = tol["atol"] + tol["rtol"] * truth.abs()
    finite = bool(torch.isfinite(out).all())
    rel_l2 = float(torch.linalg.vector_norm(o - truth) / torch.linalg.vector_norm(truth))
    worst = float((diff / bound).max())
    return {
        "max_abs": float(diff.max()),
        "worst_over_bound": worst,  # <= 1 passes the elementwise test
        "rel_l2": rel_l2,
        "finite": finite,
        "pass": finite and worst <= 1.0 and rel_l2 <= tol["rel_l2"],
    }


def make_candidate(mod: ModuleType, ref: torch.nn.Module) -> torch.nn.Module:
    m = mod.ModelNew(ref.d_model, ref.d_state).cuda()
    m.load_state_dict(ref.state_dict(), strict=True)
    return m


def check_case(
    mod: ModuleType, ref: torch.nn.Module, x: torch.Tensor, truth: torch.Tensor, tol: dict[str, float]
):
    cand = make_candidate(mod, ref)
    xin = x.clone()
    with torch.no_grad():
        out1 = cand(xin)
        torch.cuda.synchronize()
        out2 = cand(xin)
        torch.cuda.synchronize()
    res = errors(out1, truth, tol)
    res["input_unchanged"] = bool(torch.equal(xin, x))
    res["deterministic"] = bool(torch.equal(out1, out2))
    res["pass"] = res["pass"] and res["input_unchanged"] and type(out1) is torch.Tensor
    return res


def time_calls(
    cand: torch.nn.Module, xs: list[torch.Tensor], iters: int, flush: torch.Tensor
) -> dict[str, Any]:
    with torch.no_grad():
        for i in range(3):
            cand(xs[i % len(xs)])
        torch.cuda.synchronize()
        times = []
        for i in range(iters):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            cand(xs[i % len(xs)])
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    times.sort()
    med = statistics.median(times)
    sd = statistics.stdev(times) if len(times) > 1 else 0.0
    return {
        "median_ms": round(med, 4),
        "p10_ms": round(times[len(times) // 10], 4),
        "p90_ms": round(times[(len(times) * 9) // 10], 4),
        "rse": round(sd / (len(times) ** 0.5) / statistics.fmean(times), 5),
        "iters": len(times),
    }


def profile_kernels(cand: torch.nn.Module, x: torch.Tensor, calls: int = 5) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        cand(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                cand(x)
            torch.cuda.synchronize()
    rows = []
    for evt in prof.key_averages():
        t = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0.0)
        if t > 0:
            rows.append(
                {"kernel": evt.key[:120], "us_per_call": round(t / calls, 2), "count": evt.count // calls}
            )
    rows.sort(key=lambda r: -r["us_per_call"])
    return rows[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--variants", nargs="*", type=Path, help="variant files (default: solutions/*.py, alt/*.py)"
    )
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "bench" / "results")))
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--sweep", default="", help="FORCE_CHUNKS values to time, e.g. 1,2,4,8,16")
    ap.add_argument("--sweep-variants", default="", help="comma list of variant names to sweep (default all)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--build-timeout", type=float, default=480.0)
    args = ap.parse_args()

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/ext")
    os.environ.setdefault("MAX_JOBS", "16")
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    torch.backends.cuda.matmul.allow_tf32 = False  # the evaluator's default: fp32 GEMMs stay fp32
    torch.backends.cudnn.allow_tf32 = False

    paths = args.variants or sorted(SOLUTIONS.glob("[0-9]*.py")) + sorted((SOLUTIONS / "alt").glob("*.py"))
    paths = [p.resolve() for p in paths]
    spec = yaml.safe_load(SPEC_PATH.read_text())
    tol = spec["tolerance"]
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()

    builds = prebuild(paths, args.build_timeout)
    print(
        f"[build] {time.monotonic() - t_start:.0f}s: "
        + ", ".join(f"{k}={v['ok']}/{v['seconds']}s" for k, v in builds.items()),
        flush=True,
    )

    reference = Reference(spec)
    cases = []
    for i, case in enumerate(spec["correctness"]):
        ref, x = reference.build(case.get("sizes", {}), case.get("init", {}), seed=1000 + i)
        cases.append((case["name"], ref, x, reference.truth(ref, x)))
    shapes = []
    for i, shape in enumerate(spec["timing"]):
        ref, x = reference.build(shape.get("sizes", {}), {}, seed=2000 + i)
        truth = reference.truth(ref, x)
        xs = [x] + [torch.randn_like(x) for _ in range(2)]
        shapes.append((shape["name"], ref, xs, truth, bool(shape.get("primary"))))
        torch.cuda.empty_cache()
    print(f"[truth] {time.monotonic() - t_start:.0f}s", flush=True)

    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    sweep = [int(v) for v in args.sweep.split(",") if v]
    sweep_only = {v for v in args.sweep_variants.split(",") if v}
    results: dict[str, Any] = {}
    for path in paths:
        name = variant_name(path)
        res: dict[str, Any] = {
            "file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
            "build": builds[name],
        }
        results[name] = res
        if not builds[name]["ok"]:
            print(f"[{name}] build failed:\n{builds[name]['log'][-1500:]}", flush=True)
            continue
        try:
            mod = load_module(path, f"variant_{name}")
            res["cases"] = {cn: check_case(mod, ref, x, truth, tol) for cn, ref, x, truth in cases}
            res["timing"], res["shape_check"] = {}, {}
            for sn, ref, xs, truth, primary in shapes:
                cand = make_candidate(mod, ref)
                with torch.no_grad():
                    res["shape_check"][sn] = errors(cand(xs[0]), truth, tol)
                res["timing"][sn] = time_calls(cand, xs, args.iters, flush)
                if primary and not args.no_profile:
                    res["profile_primary"] = profile_kernels(cand, xs[0])
                del cand
            if sweep and hasattr(mod, "FORCE_CHUNKS") and (not sweep_only or name in sweep_only):
                res["sweep"] = {}
                for sn, ref, xs, _truth, _p in shapes:
                    cand = make_candidate(mod, ref)
                    row = {}
                    for nc in sweep:
                        mod.FORCE_CHUNKS = nc
                        row[str(nc)] = time_calls(cand, xs, max(10, args.iters // 2), flush)["median_ms"]
                    mod.FORCE_CHUNKS = None
                    res["sweep"][sn] = row
                    del cand
            res["all_pass"] = all(c["pass"] for c in res["cases"].values()) and all(
                c["pass"] for c in res["shape_check"].values()
            )
        except Exception:  # a broken variant must not stop the others
            res["error"] = traceback.format_exc()[-3000:]
            print(f"[{name}] error:\n{res['error']}", flush=True)
        torch.cuda.empty_cache()
        print(f"[{name}] done at {time.monotonic() - t_start:.0f}s", flush=True)

    props = torch.cuda.get_device_properties(0)
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "method": (
            f"CUDA events around one forward, {FLUSH_BYTES >> 20} MB L2 flush before each, 3 warm-ups, "
            f"median of {args.iters} calls over 3 input sets; errors vs float64 truth of the reference"
        ),
        "tolerance": tol,
        "wall_s": round(time.monotonic() - t_start, 1),
        "variants": results,
    }
    (args.out / "scan_variants.json").write_text(json.dumps(report, indent=1))

    # Short table last: times at each shape, worst errors over the correctness cases.
    shape_names = [s[0] for s in shapes]
    print(
        "\nvariant".ljust(34) + "".join(s[:16].rjust(18) for s in shape_names) + "   pass  max_abs   rel_l2"
    )
    for name, res in results.items():
        if "timing" not in res or "cases" not in res:
            print(name.ljust(33) + "  FAILED")
            continue
        cells = "".join(
            f"{res['timing'][s]['median_ms']:>10.3f} ±{res['timing'][s]['rse'] * 100:4.1f}%  "
            for s in shape_names
        )
        worst_abs = max(c["max_abs"] for c in res["cases"].values())
        worst_l2 = max(c["rel_l2"] for c in res["cases"].values())
        print(f"{name:33s}{cells} {str(res.get('all_pass')):>5s} {worst_abs:8.1e} {worst_l2:8.1e}")
    for name, res in results.items():
        if "sweep" in res:
            print(f"sweep {name}: " + "; ".join(f"{s}: {row}" for s, row in res["sweep"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
