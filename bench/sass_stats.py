"""What a kernel module's CUDA compiles to, without a GPU: instruction counts per kernel from its SASS.

    python -m bench.sass_stats KERNEL.py [KERNEL.py ...] [--arch sm_90] [--kernel REGEX] [--json OUT]

For each module (one defining ModelNew with its CUDA source in a module-level string whose name contains
"CUDA", as the shipped selective-scan solutions have it): the source is compiled with `nvcc -cubin` and
disassembled with `cuobjdump -sass`. Per kernel: the instruction count, registers and the opcode histogram,
and the stretch between two barriers with the most `MUFU.EX2` (a tiled scan's unrolled inner loop) with its
instructions per EX2. Dynamic counts need Nsight Compute on a GPU (bench/h200_scan_probe.sh); this is the
static side, to see what an edit did to the loop before spending device time on it.

Needs nvcc (CUDA_HOME/bin or PATH) and cuobjdump with nvdisasm beside it: on PATH, or from NVIDIA's wheels
(`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`, which put them in site-packages/nvidia/cu13/bin).
"""

from __future__ import annotations

import argparse
import ast
import collections
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)[^;]*;")


def cuda_source(path: Path) -> str:
    """The module's CUDA source: its module-level string constants whose names contain "CUDA", joined."""
    tree = ast.parse(path.read_text())
    parts = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and any(isinstance(t, ast.Name) and "CUDA" in t.id.upper() for t in node.targets)
    ]
    if not parts:
        raise SystemExit(f"{path}: no module-level string named like *CUDA* holds CUDA source")
    return "\n".join(parts)


def tool(name: str) -> str | None:
    """`name` on PATH, in CUDA_HOME/bin, or in NVIDIA's pip wheels (site-packages/nvidia/cu*/bin)."""
    if found := shutil.which(name):
        return found
    home = os.environ.get("CUDA_HOME")
    candidates = [Path(home) / "bin" / name] if home else []
    spec = importlib.util.find_spec("nvidia")
    for root in list(spec.submodule_search_locations or []) if spec else []:
        candidates += sorted(Path(root).glob(f"cu*/bin/{name}"))
    return next((str(c) for c in candidates if c.is_file()), None)


def disassemble(source: str, arch: str, work: Path) -> tuple[str, str]:
    """(SASS text, ptxas's resource lines) of `source` compiled for `arch`."""
    nvcc, cuobjdump = tool("nvcc"), tool("cuobjdump")
    if nvcc is None or cuobjdump is None:
        raise SystemExit("needs nvcc and cuobjdump (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    cu, cubin = work / "k.cu", work / "k.cubin"
    cu.write_text(source)
    built = subprocess.run(
        [nvcc, f"-arch={arch}", "-O3", "-cubin", "-Xptxas", "-v", str(cu), "-o", str(cubin)],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise SystemExit(f"nvcc failed:\n{built.stderr[-2000:]}")
    env = dict(os.environ)
    if nvdisasm := tool("nvdisasm"):  # cuobjdump calls it for -sass
        env["PATH"] = f"{Path(nvdisasm).parent}{os.pathsep}{env.get('PATH', '')}"
    sass = subprocess.run(
        [cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False
    )
    if sass.returncode != 0 or "Function :" not in sass.stdout:
        raise SystemExit(f"cuobjdump -sass failed:\n{(sass.stderr or sass.stdout)[-2000:]}")
    return sass.stdout, built.stderr


def registers(ptxas: str) -> dict[str, int]:
    """Registers per kernel (mangled name) from ptxas -v."""
    found: dict[str, int] = {}
    current = None
    for line in ptxas.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            current = m.group(1)
        elif (m := re.search(r"Used (\d+) registers", line)) and current:
            found[current] = int(m.group(1))
    return found


def kernel_stats(name: str, body: str) -> dict[str, Any]:
    ops = INSTRUCTION.findall(body)
    segments: list[list[str]] = [[]]
    for op in ops:
        segments[-1].append(op)
        if op.startswith("BAR"):
            segments.append([])
    loop = max(segments, key=lambda s: sum(op == "MUFU.EX2" for op in s))
    ex2 = sum(op == "MUFU.EX2" for op in loop)

    def histogram(seq: list[str]) -> dict[str, int]:
        keys = (op if op.startswith("MUFU") else op.split(".")[0] for op in seq)
        return dict(collections.Counter(keys).most_common())

    return {
        "kernel": name,
        "instructions": len(ops),
        "histogram": histogram(ops),
        "ex2_loop": {"instructions": len(loop), "ex2": ex2, "histogram": histogram(loop)} if ex2 else None,
    }


def stats(path: Path, arch: str, pattern: str) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="sass-") as tmp:
        sass, ptxas = disassemble(cuda_source(path), arch, Path(tmp))
    regs = registers(ptxas)
    rows = []
    for chunk in re.split(r"\n\s*Function : ", sass)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        if re.search(pattern, name):
            rows.append({**kernel_stats(name, chunk), "registers": regs.get(name)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kernels", nargs="+", type=Path)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--kernel", default=".", help="only kernels whose mangled name matches this regex")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    report = {}
    for path in args.kernels:
        rows = stats(path, args.arch, args.kernel)
        report[str(path)] = rows
        print(path)
        for r in rows:
            top = ", ".join(f"{k} {v}" for k, v in list(r["histogram"].items())[:8])
            print(
                f"  {r['kernel'][:60]}: {r['instructions']} instructions, {r['registers']} registers ({top})"
            )
            if loop := r["ex2_loop"]:
                per = loop["instructions"] / loop["ex2"]
                print(
                    f"    EX2 loop: {loop['instructions']} instructions, {loop['ex2']} EX2, {per:.2f} per EX2"
                )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
