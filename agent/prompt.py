"""The system prompt and the run's opening message (the tools offered are agent.toolbox's records).

The prompt is built once per run from the problem spec (it never changes mid-run, so it caches):
the task, the reference source, the `ModelNew` contract, precision and tolerance, the library policy,
the correctness cases and timed shapes, the hardware, the tools and the budget.
"""

from __future__ import annotations

from agent import toolbox
from agent.budget import Budget
from tools.cache.peaks import host_peaks
from tools.envinfo import collect_env
from tools.floor import floor_lines, peaks_text
from tools.host import timing_threads
from tools.kbfile import SizeValue
from tools.problem import Case, Problem, TimingShape
from tools.results import HostPeaks

LANGUAGE = {"cpp": "C++", "cuda": "CUDA"}


def _sizes(sizes: dict[str, SizeValue]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items()) or "the reference's defaults"


def _case_line(case: Case) -> str:
    init = "; ".join(f"{name} ~ {spec.model_dump_json()}" for name, spec in case.init.items())
    extra = f"; parameters re-initialised: {init}" if init else ""
    why = f" — {case.why}" if case.why else ""
    return f"- {case.name}: {_sizes(case.sizes)}{extra}{why}"


def _shape_line(shape: TimingShape) -> str:
    primary = " (primary: profiled here)" if shape.primary else ""
    return f"- {shape.name}: {_sizes(shape.sizes)}{primary}"


def _budget_lines(budget: Budget) -> list[str]:
    lines = []
    if budget.max_turns is not None:
        lines.append(f"- at most {budget.max_turns} turns (one turn = one reply of yours and its tool calls)")
    if budget.max_cost_usd is not None:
        lines.append(f"- at most ${budget.max_cost_usd:.2f} of model usage")
    if budget.max_minutes is not None:
        lines.append(f"- at most {budget.max_minutes:g} minutes of wall time")
    if budget.target_speedup is not None:
        lines.append(
            f"- the run ends as soon as a correct kernel reaches {budget.target_speedup:g}× against the launch-free "
            "reference"
        )
    if budget.stop_at_floor is not None:
        lines.append(
            f"- the run ends as soon as your best kernel reaches {budget.stop_at_floor:.0%} of the speed-of-light "
            "floor (geomean over the timing shapes)"
        )
    return lines or ["- no explicit limit; end your turn without a tool call when you are done"]


def _language_notes(problem: Problem) -> str:
    if problem.spec.language == "cpp":
        return (
            "Build C++ with torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., functions=[...], "
            "extra_cflags=['-O3', '-fopenmp'], extra_ldflags=['-fopenmp']). An unchanged source is served from "
            "cache. The torch headers dominate a build; the harness precompiles them once per set of "
            "extra_cflags, so keep your flags the same from version to version."
        )
    return (
        "Build CUDA with torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=..., "
        "functions=[...]). An unchanged source is served from cache. Check launch errors; the harness poisons "
        "outputs and re-checks them while timing.\n"
        "Use the split form below: builds take seconds instead of tens of seconds. The .cu holds only kernels "
        "and plain C launchers (nvcc never parses the torch headers); the tensor binding goes in cpp_sources "
        "and starts with `#include <torch/extension.h>` (the harness precompiles that header). Keep the "
        "extension name, the binding and the flags unchanged when only the kernel changes: the compiled "
        "binding is then reused as is.\n" + SPLIT_FORM_TEMPLATE
    )


# The split form (GUIDE §3): the .cu holds only kernels and a plain C launcher, so nvcc never parses the
# torch headers; the tensor binding lives in cpp_sources and starts with torch/extension.h, which the
# harness's compiler shim precompiles (tools/worker/ccshim.py); an unchanged binding's object is reused.
SPLIT_FORM_TEMPLATE = """```python
CUDA_SRC = r\"\"\"
#include <cuda_runtime.h>
__global__ void my_kernel(const float* __restrict__ x, float* __restrict__ y, int n) { /* ... */ }
void launch_my_kernel(const float* x, float* y, int n, cudaStream_t stream) {
  my_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
}
\"\"\"
CPP_SRC = r\"\"\"
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
void launch_my_kernel(const float* x, float* y, int n, cudaStream_t stream);
torch::Tensor my_op(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32);
  auto y = torch::empty_like(x);
  launch_my_kernel(x.data_ptr<float>(), y.data_ptr<float>(), (int)x.numel(), c10::cuda::getCurrentCUDAStream());
  return y;
}
\"\"\"
ext = load_inline(name="my_ext", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["my_op"],
                  extra_cuda_cflags=["-O3"], no_implicit_headers=True)
```"""


def floor_section(problem: Problem, peaks: HostPeaks | None) -> str:
    """Each timed shape's work and speed-of-light floor at this host's measured peaks ("" without a floor)."""
    if problem.spec.floor is None:
        return ""
    peaks = peaks or host_peaks(problem.spec.device, collect_env(problem), timing_threads(problem))
    return (
        "## Speed-of-light floor\nmax(FLOPs / fp32 FLOP/s, bytes / memory bandwidth) at this host's peaks: "
        f"{peaks_text(peaks)}. Every benchmark reports your kernel's % of it at every shape.\n"
        + "\n".join(floor_lines(problem, peaks))
    )


def system_prompt(problem: Problem, hardware: str, budget: Budget, peaks: HostPeaks | None = None) -> str:
    """`peaks`: the host's, for the floor (default: measured once per host, then cached)."""
    spec = problem.spec
    tol = spec.tolerance
    sections = [
        f"You write fast, correct {LANGUAGE[spec.language]} kernels for PyTorch. Problem: {spec.name}.",
        spec.description.strip(),
        "## Reference (KernelBench format)\n```python\n" + problem.reference_source.strip() + "\n```",
        "## What to submit\n"
        "One self-contained Python module defining `class ModelNew(nn.Module)` with the same constructor "
        "arguments as `Model` and the same parameter names and shapes, so that "
        "`ModelNew(*get_init_inputs()).load_state_dict(Model(...).state_dict(), strict=True)` works; its "
        "forward takes the same inputs and returns the same output. Do not subclass or call `Model`, do not "
        "fall back to the reference, do not special-case the checker. " + _language_notes(problem),
        f"## Precision\n{spec.precision} in and out. Compared against float64 ground truth: every element "
        f"within atol={tol.atol:g} + rtol={tol.rtol:g}*|truth| and relative L2 error <= {tol.rel_l2:g}"
        + (
            f"; on a case where the fp32 reference itself is further from the truth (a long recurrence), both "
            f"bounds widen to {tol.calibration:g}× the reference's own error there"
            if tol.calibration
            else ""
        )
        + ". Lower-precision arithmetic (TF32, fp16, bf16) will fail; split-precision schemes that keep fp32 "
        "accuracy (e.g. 3xTF32) are judged by their measured error like anything else.",
        f"## Library policy\n{spec.library_policy.summary.strip()}",
        "## Correctness cases (fresh random seed on every benchmark call)\n"
        + "\n".join(_case_line(c) for c in spec.correctness)
        + (
            f"\nAlso {problem.smallest_case().name} with every floating input "
            + " and, separately, ".join(
                "negated" if v == "negated" else "scaled by 8" for v in spec.input_variants
            )
            + ": fitting the distribution get_inputs() draws from fails these."
            if spec.input_variants
            else ""
        ),
        "## Timed shapes\n"
        + "\n".join(_shape_line(t) for t in spec.timing)
        + (
            f"\nIn every case and shape: {_sizes(spec.sizes)} (what derives from them recomputed)."
            if spec.sizes
            else ""
        ),
        f"## Hardware\n{hardware.strip()}",
        floor_section(problem, peaks),
        "## Tools\n"
        + "\n".join(toolbox.prompt_lines())
        + "\nEvery tool call takes the whole module. The fastest correct kernel you benchmark is kept as the "
        "result; it is replaced only by one faster beyond the measured spread.",
        "## Budget\n" + "\n".join(_budget_lines(budget)),
    ]
    if spec.hints.strip():
        sections.append(f"## Hints\n{spec.hints.strip()}")
    sections.append(
        "Work in small verified steps: get a correct kernel first, then make it faster, benchmarking each "
        "version. When you cannot improve further, reply without a tool call to end the run."
    )
    return "\n\n".join(s for s in sections if s)


def first_user_message(problem: Problem) -> str:
    return (
        f"Write a faster ModelNew for {problem.spec.name}. Start with a correct version and benchmark it, "
        "then iterate."
    )
