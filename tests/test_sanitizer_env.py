"""How the sanitized worker is launched, on the CPU: the candidate worker runs one real case under a
stand-in compute-sanitizer (tests/fixtures/fake_compute_sanitizer.py) that reports, as a finding, the
allocator setting in the worker's environment and the `--padding` it was given. Every tensor must be its
own cudaMalloc (PYTORCH_NO_CUDA_MEMORY_CACHING=1) with a padding buffer behind it, or memcheck misses a read
a few elements past an input's end (issue 52: judged correct at 29x on an H100)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, TINY
from tools.judge._sanitize import _case_data, _run_tool
from tools.judge._sanitizer_tools import NO_PADDING, PADDING_BYTES, sanitizer_command
from tools.problem import load_problem
from tools.supervise import Job

FAKE = REPO / "tests" / "fixtures" / "fake_compute_sanitizer.py"
HELP = REPO / "tests" / "fixtures" / "sanitizer" / "help.txt"


def reference_as_candidate() -> str:
    """The reference itself as ModelNew: no build, so the worker's one case takes seconds."""
    return (
        (REPO / "problems" / "selective_scan" / "reference.py")
        .read_text()
        .replace("class Model(", "class ModelNew(")
    )


def test_the_sanitized_worker_has_every_tensor_in_its_own_padded_allocation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KERNEL_AGENT_COMPUTE_SANITIZER", str(FAKE))
    problem = load_problem(TINY)
    job = Job.create(reference_as_candidate())
    try:
        items, hidden, failed = _case_data(problem, problem.smallest_case().name, job, None)
        assert failed == ""
        run = _run_tool("memcheck", problem, job, items, hidden, 60.0, None, frozenset())
    finally:
        job.cleanup()
    assert (run.status, run.kernel) == ("errors", "fake_launch_probe"), run
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1" in run.first
    assert f"padding={PADDING_BYTES} tool=memcheck app_rc=0" in run.first


def test_padding_only_where_this_compute_sanitizer_lists_it_and_only_for_memcheck(tmp_path: Path) -> None:
    full = HELP.read_text()
    cmd = sanitizer_command("cs", "memcheck", tmp_path / "m.log", full)
    assert cmd[cmd.index("--padding") :][:2] == ["--padding", str(PADDING_BYTES)]
    assert PADDING_BYTES >= 64 * 8  # 64 doubles past the end are still in the padding
    assert "--padding" not in sanitizer_command("cs", "initcheck", tmp_path / "i.log", full)
    old = "\n".join(line for line in full.splitlines() if "--padding" not in line)
    assert "--padding" not in sanitizer_command("cs", "memcheck", tmp_path / "m.log", old)
    assert "--padding" in NO_PADDING  # what a clean memcheck run says where the option is missing
