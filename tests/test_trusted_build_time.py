"""A build's seconds come from the harness's clock (issue 23): the candidate's import runs in a process whose
clock its own code can replace, so what that process reports is bounded by what the parent saw."""

from __future__ import annotations

from tests.candidates import scan_variants as v
from tools import compile_kernel
from tools.problem import Problem

# At import, before load_inline runs: every later perf_counter reads 1000 s further back than the last.
CLOCK_RUNS_BACKWARDS = v.replace(
    "import torch\n",
    "import torch\nimport time\n_calls = [0.0]\n\n\ndef _backwards() -> float:\n"
    "    _calls[0] -= 1000.0\n    return _calls[0]\n\n\ntime.perf_counter = _backwards\n",
)


def test_a_patched_clock_in_the_candidate_does_not_set_the_build_time(tiny: Problem) -> None:
    honest = compile_kernel(tiny, v.baseline())
    assert honest.status == "ok", honest.message
    patched = compile_kernel(tiny, CLOCK_RUNS_BACKWARDS)
    assert patched.status == "ok", patched.message
    assert 0.0 <= patched.seconds < 120.0, patched.seconds
    for build in patched.builds:
        assert 0.0 <= build.seconds <= patched.seconds, build
