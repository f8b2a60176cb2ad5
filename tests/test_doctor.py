"""`agent doctor`: the checks as data (each missing part with its fix, an nvcc that is not torch's CUDA),
what they allow, the view of a synthetic report as text, and the real command here: it says what this
machine lacks and names the fix, never prints a key, and exits 1 only where even CPU problems cannot run."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from agent.cli.doctor import key_checks
from agent.views.doctor import doctor_view
from tests.helpers import REPO
from tools.machine import (
    CAPABILITIES,
    CPU_PROBLEMS,
    CUDA_PROBLEMS,
    MachineReport,
    capabilities,
    check,
    counters_check,
    disk_check,
    gpu_check,
    nvcc_check,
    torch_checks,
)

H200 = {"name": "NVIDIA H200", "memory": "143771 MiB", "driver": "580.95.05"}
SECRET = "sk-ant-not-a-real-key-0123456789"


# --- the checks as data ------------------------------------------------------------------------------------


def test_an_nvcc_of_another_major_cuda_is_a_mismatch_whose_fix_names_the_matching_install() -> None:
    installs = {"12.4": "/usr/local/cuda-12.4", "13.0": "/usr/local/cuda-13.0"}
    wrong = nvcc_check("/usr/local/cuda-12.4", "12.4", "13.0", installs)
    assert (wrong.status, wrong.fix) == ("mismatch", "export CUDA_HOME=/usr/local/cuda-13.0")
    assert wrong.found == "12.4 at /usr/local/cuda-12.4, but torch's is 13.0"
    right = nvcc_check("/usr/local/cuda-13.0", "13.0", "13.0", installs)
    assert (right.status, right.fix) == ("ok", "")
    assert nvcc_check(None, None, "13.0", installs).fix == "export CUDA_HOME=/usr/local/cuda-13.0"
    none_installed = nvcc_check(None, None, "13.0", {})
    assert none_installed.status == "missing"
    assert none_installed.fix == "install the CUDA toolkit 13.0 (torch's), then export CUDA_HOME=<its folder>"


def test_a_cpu_build_of_torch_runs_cpu_problems_but_not_cuda_ones() -> None:
    checks = torch_checks("2.14.1+cpu", None)
    assert [(c.name, c.status) for c in checks] == [("torch", "ok"), ("torch CUDA", "missing")]
    assert "--index-url https://download.pytorch.org/whl/cu130" in checks[1].fix
    ready = {c.name: c.ready for c in capabilities(checks, CAPABILITIES)}
    assert ready[CPU_PROBLEMS]
    assert not ready[CUDA_PROBLEMS]
    assert torch_checks(None, None)[0].needed_for == [CPU_PROBLEMS, CUDA_PROBLEMS]


def test_gpu_disk_and_counters() -> None:
    assert gpu_check(H200, "9.0").found == "NVIDIA H200, 143771 MiB, sm_90, driver 580.95.05"
    assert gpu_check(None, None).status == "missing"
    assert disk_check(REPO, 100 * 2**30).status == "ok"
    low = disk_check(REPO, 2**30)
    assert low.status == "missing"
    assert low.fix.endswith("export KERNEL_AGENT_CACHE=<a folder on a disk with room>")
    admin_only = "ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n"
    assert counters_check(admin_only, root=False, gpu=True).found == "admin only"
    assert counters_check(admin_only, root=True, gpu=True).status == "ok"
    assert counters_check("RmProfilingAdminOnly: 0\n", root=False, gpu=True).found == "permitted"
    assert counters_check(None, root=False, gpu=True).status == "ok"  # unknown here: ncu itself will say


def test_a_key_is_only_ever_set_or_not_set() -> None:
    checks = key_checks({"ANTHROPIC_API_KEY": SECRET})
    assert [(c.name, c.status, c.found) for c in checks] == [
        ("ANTHROPIC_API_KEY", "ok", "set"),
        ("OPENAI_API_KEY", "missing", "not set"),
    ]
    assert SECRET not in MachineReport(host="h", checks=checks, capabilities=[]).model_dump_json()


# --- the view ----------------------------------------------------------------------------------------------


def synthetic_report() -> MachineReport:
    checks = [
        check("python", [CPU_PROBLEMS], "3.11.7"),
        check(
            "nvcc",
            [CUDA_PROBLEMS],
            "12.4 at /usr/local/cuda-12.4, but torch's is 13.0",
            "export CUDA_HOME=/x",
            "mismatch",
        ),
        check("GPU", [CUDA_PROBLEMS], "none", "run them on a GPU machine"),
        check("ANTHROPIC_API_KEY", ["Claude models"], "set"),
    ]
    return MachineReport(
        host="box",
        checks=checks,
        capabilities=capabilities(checks, (CPU_PROBLEMS, CUDA_PROBLEMS, "Claude models")),
    )


def render(report: MachineReport, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, legacy_windows=False)
    for line in doctor_view(report):
        console.print(line)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_the_view_lists_each_check_its_fix_and_what_can_run() -> None:
    assert render(synthetic_report()) == (
        "machine box\n"
        "ok       python             3.11.7\n"
        "mismatch nvcc               12.4 at /usr/local/cuda-12.4, but torch's is 13.0\n"
        "                            fix: export CUDA_HOME=/x\n"
        "missing  GPU                none\n"
        "                            fix: run them on a GPU machine\n"
        "ok       ANTHROPIC_API_KEY  set\n"
        "can run: CPU problems; Claude models\n"
        "cannot:  CUDA problems (nvcc mismatch, no GPU)\n"
    )


# --- the real command --------------------------------------------------------------------------------------


def doctor(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"NO_COLOR": "1"} | extra
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "doctor", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def gpu_visible() -> bool:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def test_doctor_here_says_what_runs_names_each_fix_and_never_prints_a_key() -> None:
    done = doctor(ANTHROPIC_API_KEY=SECRET)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine ")
    assert any(line.startswith("ok       python") for line in lines)
    assert "ok       ANTHROPIC_API_KEY  set" in lines
    assert SECRET not in done.stdout + done.stderr
    assert "can run: CPU problems" in done.stdout
    if not gpu_visible():
        assert "missing  GPU                none (nvidia-smi found none)" in lines
        assert any(line.strip().startswith("fix: CUDA problems need an NVIDIA GPU") for line in lines)
        assert "cannot:  CUDA problems (no GPU)" in lines
    report = MachineReport.model_validate_json(doctor("--json").stdout)
    assert {c.name for c in report.checks} >= {"python", "torch", "nvcc", "C++ compiler", "GPU", "ncu"}


def test_doctor_exits_1_where_even_cpu_problems_cannot_run() -> None:
    done = doctor("--json", CXX="/nonexistent/c++")
    assert done.returncode == 1, done.stderr
    compiler = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "C++ compiler")
    assert compiler["status"] == "missing"
    assert compiler["fix"] == "apt-get install g++ (or set CXX)"


@pytest.mark.gpu
def test_doctor_on_a_gpu_machine_can_run_cuda_problems() -> None:
    done = doctor()
    assert done.returncode == 0, done.stderr
    gpu = next(line for line in done.stdout.splitlines() if line.split()[1:2] == ["GPU"])
    assert gpu.startswith("ok "), done.stdout
    assert ", sm_" in gpu, done.stdout
    assert "CUDA problems" in done.stdout.split("can run:", 1)[1].split("\n", 1)[0], done.stdout
