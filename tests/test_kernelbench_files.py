"""KernelBench files as they ship (tests/problems/kb): a bare `.py` on the machine's device, any module
constant overridden with what derives from it recomputed, KernelBench's tolerance by name, state that is
not a parameter carried into ModelNew, and the own-kernel rule on the CPU. Real builds and workers."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from tests.candidates.kernelbench import CONV, relu, rnn
from tools import benchmark, kbfile
from tools.problem import ProblemError, load_problem
from tools.supervise import WarmPool
from tools.worker import build, cpu_usage, refmod

KB = Path(__file__).resolve().parent / "problems" / "kb"
REPO = KB.parent.parent.parent
SMALL_RELU = {"batch_size": 64, "dim": 16384}  # 4 MB: the work, not call overheads, dominates a call
SMALL_CONV = {"batch_size": 2, "out_channels": 8, "height": 12}


def test_a_bare_file_runs_where_the_machine_can_unless_told() -> None:
    here = "cuda" if torch.cuda.is_available() else "cpu"
    assert load_problem(KB / "relu.py").spec.device == here
    cpu = load_problem(KB / "relu.py", device="cpu").spec
    assert (cpu.device, cpu.language) == ("cpu", "cpp")
    cuda = load_problem(KB / "relu.py", device="cuda").spec
    assert (cuda.device, cuda.language) == ("cuda", "cuda")
    with pytest.raises(ProblemError, match="device: cpu; --device cuda is for bare KernelBench files"):
        load_problem(REPO / "problems" / "selective_scan_cpu.yaml", device="cuda")


def test_a_derived_constant_is_recomputed_and_a_chained_one_split() -> None:
    source = (KB / "conv_bias.py").read_text()
    module = refmod.load_reference(source, {"out_channels": 8, "height": 20})
    assert (module.bias_shape, module.height, module.width) == ((8, 1, 1), 20, 32)
    assert tuple(module.get_inputs()[0].shape) == (128, 3, 20, 32)
    problem = load_problem(KB / "conv_bias.py", device="cpu", sizes={**SMALL_CONV, "width": 9})
    sizes = problem.sizes_of(problem.spec.correctness[0])
    assert sizes == {
        "batch_size": 2, "in_channels": 3, "out_channels": 8, "height": 12, "width": 9, "kernel_size": 3,
        "bias_shape": (8, 1, 1),
    }  # fmt: skip
    built = refmod.build_case(
        source, problem.spec.correctness[0], problem.pins(problem.spec.correctness[0]), 1
    )
    assert tuple(built["state_dict"]["bias"].shape) == (8, 1, 1)


def test_a_constant_that_cannot_be_pinned_is_refused_by_name(tmp_path: Path) -> None:
    ref = tmp_path / "unpacked.py"
    ref.write_text(
        (KB / "relu.py")
        .read_text()
        .replace("batch_size = 4096\ndim = 393216", "batch_size, dim = 4096, 393216")
    )
    with pytest.raises(
        ProblemError, match=r"cannot override dim \(line \d+: batch_size, dim = \(4096, 393216\)\)"
    ):
        load_problem(ref, device="cpu", sizes={"dim": 300})
    with pytest.raises(ProblemError, match=r"\['dimm'\] are not module constants of the reference"):
        load_problem(KB / "relu.py", device="cpu", sizes={"dimm": 300})


def test_sizes_from_the_command_line_are_numbers_or_tuples() -> None:
    assert kbfile.parse_size("height=128") == ("height", 128)
    assert kbfile.parse_size("scale = 0.5") == ("scale", 0.5)
    assert kbfile.parse_size("bias_shape=(8, 1, 1)") == ("bias_shape", (8, 1, 1))
    assert kbfile.parse_size("kernel_size=[3,5]") == ("kernel_size", (3, 5))
    for bad in ("height", "height=abc", "height='x'", "2x=3", "shape=((1,2),3)"):
        with pytest.raises(ValueError):  # noqa: PT011  # the messages differ; each names what is wrong
            kbfile.parse_size(bad)


def test_static_constants_follow_what_python_computes() -> None:
    tree = ast.parse("a = 6\nb = c = a // 4 + 1\nd = (a, -b, 2.5 * c)\ne = torch.randn(3)\nf = max(a, 9)\n")
    assert kbfile.constants(tree) == {"a": 6, "b": 2, "c": 2, "d": (6, -2, 5.0), "f": 9}
    assert kbfile.constants(tree, {"a": 10, "c": 7}) == {
        "a": 10,
        "b": 3,
        "c": 7,
        "d": (10, -3, 17.5),
        "f": 10,
    }


def test_kernelbench_tolerance_by_name(tmp_path: Path) -> None:
    tol = load_problem(KB / "relu.py", device="cpu", tolerance="kernelbench").spec.tolerance
    assert (tol.atol, tol.rtol) == (1e-2, 1e-2)
    spec = tmp_path / "p.yaml"
    body = (REPO / "tests" / "problems" / "elementwise_relu.yaml").read_text()
    spec.write_text(body.replace("reference: elementwise/relu.py", f"reference: {KB.parent}/elementwise/relu.py")
                    .replace("tolerance: {atol: 1.0e-5, rtol: 1.0e-5, rel_l2: 1.0e-6}", "tolerance: kernelbench"))  # fmt: skip
    assert load_problem(spec).spec.tolerance.atol == 1e-2
    spec.write_text(spec.read_text().replace("tolerance: kernelbench", "tolerance: loose"))
    with pytest.raises(ProblemError, match="unknown tolerance preset 'loose'"):
        load_problem(spec)


def test_cpu_usage_charges_library_ops_not_the_extension() -> None:
    """A stand-in extension (counted like a real one) whose work is pure Python: own time; torch.relu
    beside it: elementwise library; an op the extension itself calls: library too."""

    def spin(x: torch.Tensor) -> torch.Tensor:
        total = 0
        for i in range(200_000):
            total += i
        return x

    ext = build.CountingModule(types.SimpleNamespace(spin=spin, noop=lambda t: t, relu=torch.relu))
    x = torch.randn(512, 2048)
    own = cpu_usage.profile_cpu_call(lambda t: ext.spin(t), [x])
    assert (own["method"], own["own_calls_per_forward"]) == ("cpu_profiler", 1)
    assert own["own_share"] > 0.9, own
    big = torch.randn(4096, 4096)  # a relu of some ms: the profiler's own cost per call stays small beside it
    beside = cpu_usage.profile_cpu_call(lambda t: (ext.noop(t[:1]), torch.relu(t))[1], [big])
    inside = cpu_usage.profile_cpu_call(lambda t: ext.relu(t), [big])
    for usage in (beside, inside):
        assert usage["own_calls_per_forward"] == 1
        assert usage["library_share"]["elementwise"] > 0.8, usage
    assert cpu_usage.op_kind("aten::addmm") == "gemm"
    assert cpu_usage.op_kind("aten::empty_like") == "free"
    assert cpu_usage.op_kind("aten::relu_") == "elementwise"


@pytest.fixture(scope="module")
def small_relu() -> object:
    return load_problem(KB / "relu.py", device="cpu", sizes=SMALL_RELU)


@pytest.mark.slow  # the elementwise extension's build: the fast tier builds the scan baseline only
def test_relu_as_it_ships_honest_fitted_and_wrapped(warm: WarmPool, small_relu: object) -> None:
    honest = benchmark(small_relu, relu("honest"), pool=warm)
    assert honest.status == "ok", honest.message
    assert honest.usage is not None
    assert honest.usage.method == "cpu_profiler"
    assert honest.usage.own_share is not None
    assert honest.usage.own_share > 0.5, honest.usage
    assert honest.flags == []
    fitted = benchmark(small_relu, relu("identity"), pool=warm)
    assert not fitted.correct
    assert {c.name: c.status for c in fitted.cases}["seed0.negated"] == "failed"
    wrapped = benchmark(small_relu, relu("library"), pool=warm)
    assert not wrapped.correct, (wrapped.message, wrapped.usage)
    flags = {f.name: f.message for f in wrapped.flag_details}
    assert "library_policy" in flags, wrapped.message
    assert "of CPU time is in library calls outside the allowed (elementwise" in flags["library_policy"]


@pytest.mark.slow
def test_a_derived_shape_is_benchmarked_not_a_harness_error(warm: WarmPool) -> None:
    problem = load_problem(KB / "conv_bias.py", device="cpu", sizes=SMALL_CONV)
    result = benchmark(problem, CONV, pool=warm)
    assert result.status == "ok", result.message
    assert result.cases[0].sizes["bias_shape"] == (8, 1, 1)


@pytest.mark.slow  # the elementwise extension's build: the fast tier builds the scan baseline only
def test_state_that_is_not_a_parameter_is_carried_or_named(warm: WarmPool) -> None:
    problem = load_problem(KB / "rnn_hidden.py", device="cpu")
    carried = benchmark(problem, rnn("h0"), pool=warm)
    assert carried.status == "ok", carried.message
    missing = benchmark(problem, rnn("init_h"), pool=warm)
    assert not missing.correct
    assert "the tensor attribute `self.h0` (4, 16)" in missing.message, missing.message
    assert "(found: nothing)" in missing.message
    # ModelNew's file keeps its own batch of 4 when the evaluation overrides the reference's.
    smaller = benchmark(
        load_problem(KB / "rnn_hidden.py", device="cpu", sizes={"batch_size": 2}), rnn("h0"), pool=warm
    )
    assert not smaller.correct
    assert "`self.h0` (2, 16)" in smaller.message, smaller.message
    assert "(found: Tensor (4, 16)); a size the evaluation overrides (--size)" in smaller.message


@pytest.mark.slow
def test_agent_bench_takes_a_bare_file_with_its_device_and_sizes(tmp_path: Path) -> None:
    kernel = tmp_path / "relu_kernel.py"
    kernel.write_text(relu("honest"))
    argv = [sys.executable, "-m", "agent.cli", "bench", str(KB / "relu.py"), str(kernel), "--json"]
    argv += [
        "--device",
        "cpu",
        "--size",
        "batch_size=64",
        "--size",
        "dim=16384",
        "--tolerance",
        "kernelbench",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=600, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    result = json.loads(done.stdout)
    assert result["status"] == "ok"
    assert result["cases"][0]["sizes"] == SMALL_RELU
    bad = subprocess.run(
        [*argv[:6], "--size", "height=width"], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert bad.returncode == 2
    assert "height: 'width' is not a number or a tuple of numbers" in bad.stderr


@pytest.mark.gpu
@pytest.mark.nvcc
def test_on_a_gpu_a_wrapped_library_call_is_flagged_as_before(warm: WarmPool) -> None:
    """The GPU's rule, unchanged, on a bare file: `torch.relu` beside a dummy launch is `library_policy`."""
    from tests.candidates import kernelbench_cuda

    problem = load_problem(KB / "relu.py", device="cuda", sizes={"batch_size": 256, "dim": 16384})
    honest = benchmark(problem, kernelbench_cuda.relu("honest"), pool=warm)
    assert honest.status == "ok", honest.message
    assert honest.flags == []
    assert honest.usage is not None
    assert honest.usage.method == "cuda_profiler"
    wrapped = benchmark(problem, kernelbench_cuda.relu("library"), pool=warm)
    flags = {f.name: f.message for f in wrapped.flag_details}
    assert "library_policy" in flags, (wrapped.message, wrapped.usage)
    assert "of device time is in library kernels outside the allowed (elementwise" in flags["library_policy"]


def test_agent_check_runs_the_reference_with_the_derived_shape() -> None:
    from tools.judge import check_problem

    result = check_problem(load_problem(KB / "conv_bias.py", device="cpu", sizes=SMALL_CONV))
    assert result.ok, result.message
    assert result.output_shape == [2, 8, 10, 30]
    assert "'bias_shape': (8, 1, 1)" in result.message
