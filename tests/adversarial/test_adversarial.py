"""Cheat-proof and fault-proof, part 1 (CPU): one candidate per exploit class and fault, each with its exact
verdict, and honest candidates that must come out clean. Every candidate but the template explosion shares
the baseline's C++, so the suite builds one extension (and kills one compile).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.adversarial import candidates as c
from tests.candidates import scan_variants as v
from tests.helpers import TESTS, TINY
from tools import benchmark, orders
from tools.judge import check_source
from tools.problem import Problem, load_problem
from tools.results import BenchResult
from tools.supervise import isolation
from tools.supervise.integrity import Snapshot
from tools.supervise.jobs import _check_no_secrets
from tools.worker import build
from tools.worker.refmod import derive_seed

HERE = Path(__file__).resolve().parent


def _processes_with(needle: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


# --- honest candidates: zero false positives -------------------------------------------------------------


@pytest.mark.parametrize(
    "make", [v.baseline, c.heavy_legal_python], ids=["openmp_and_library_gemm", "heavy_legal_python"]
)
def test_honest_candidates_come_out_clean(tiny: Problem, make) -> None:
    assert check_source(make())[0] == []
    result = benchmark(tiny, make())
    assert result.status == "ok", result.message
    assert result.correct
    assert result.flags == []
    # A paired check on this busy machine may find the cached reference moved, and a loop timed while other
    # processes kept the host busy says so (_verdicts.busy_note; both failed here at load 3-4, 2026-12-06):
    # notes on the host, not on the candidate.
    host = ("reference's cached median", "may not be what a quiet machine gives")
    assert [n for n in result.notices if not any(h in n for h in host)] == []
    assert result.usage is not None
    assert result.usage.own_calls_per_forward == 1


# --- caches and memoisation: fresh contents every call, the re-check of secretly chosen timed calls -------


@pytest.mark.parametrize("make", [c.cache_by_shape, c.cache_by_version], ids=["per_shape", "version"])
def test_output_caches_are_caught_by_the_timed_recheck(tiny: Problem, make) -> None:
    result = benchmark(tiny, make())
    assert [x.status for x in result.cases[:2]] == ["passed", "passed"]  # each spec case a new shape: no hit
    assert "cache hit" in result.output
    assert result.status == "incorrect", result.message
    # Caught by the smallest case's input variants (its shape, other contents: the cache hands back odd's
    # output), else by the timed re-check.
    variants = [x.status for x in result.cases[2:]]
    assert "failed" in variants or "timed_output_mismatch" in result.flags
    # The profiled call reuses a timed input set: a cache hit there shows as no call into the extension.
    assert set(result.flags) <= {"timed_output_mismatch", "no_custom_kernel"}
    assert result.speedup is None


def never_gains(result: BenchResult) -> None:
    """A cache either never hits (every call did the work: ok, clean) or what it handed back is caught."""
    if "cache hit" in result.output:
        assert not result.correct, result.message
        assert any(x.status == "failed" for x in result.cases) or "timed_output_mismatch" in result.flags
    else:
        assert result.status == "ok", result.message
        assert result.flags == []


def test_a_content_keyed_cache_never_hits(tiny: Problem) -> None:
    """Every timed call's inputs are new contents (tools/worker/fresh.py): a key made of sampled values
    never recurs, so every call does the work and is timed doing it."""
    result = benchmark(tiny, c.cache_by_content_sample())
    never_gains(result)


def test_a_cache_keyed_on_what_the_shift_keeps_hands_back_stale_outputs_and_is_caught(tiny: Problem) -> None:
    result = benchmark(tiny, c.cache_by_content_sum())
    assert "cache hit" in result.output
    assert result.status == "incorrect", result.message
    assert "timed_output_mismatch" in result.flags
    assert result.speedup is None


def test_a_candidate_that_cheats_once_past_the_first_calls_is_caught(tiny: Problem) -> None:
    """Honest through the cases, the warm-up and the first `min_iters` timed calls, wrong after: the checks
    the judge places after the loop's own stop see it (tools/judge/_calls.py)."""
    cfg = tiny.spec.timing_config
    honest = len(tiny.correctness_cases) + cfg.warmup + cfg.min_iters
    result = benchmark(tiny, c.correct_only_while_counted(honest))
    assert [x.status for x in result.cases] == ["passed"] * len(result.cases)
    assert result.status == "incorrect", result.message
    assert "timed_output_mismatch" in result.flags
    assert result.speedup is None


@pytest.mark.parametrize("make", [c.cache_by_pointer, c.cache_by_id], ids=["data_ptr", "id"])
def test_pointer_and_id_caches_never_hit(tiny: Problem, make) -> None:
    """Inputs of past timed calls stay alive: no data_ptr or id recurs among them, so every timed call does
    the work. Between cases one may recur (the input variants share the smallest case's shape, and a freed
    tensor's id or address is reused): the hit hands back the other case's output, and that case fails."""
    never_gains(benchmark(tiny, make()))


@pytest.mark.parametrize(
    ("make", "flag", "needle"),
    [
        (c.lazy_subclass, None, "plain torch.Tensor"),
        (c.mutates_input, "input_mutation", "modified its input"),
        (c.patches_timer, "timer_tampering", "time.perf_counter"),
    ],
    ids=["tensor_subclass", "input_mutation", "patched_timer"],
)
def test_output_type_inputs_and_timers_are_guarded(
    tiny: Problem, make, flag: str | None, needle: str
) -> None:
    result = benchmark(tiny, make())
    assert result.status == "incorrect", result.message
    assert result.flags == ([flag] if flag else [])
    assert needle in result.message or any(needle in x.message for x in result.cases), result.message


# --- the truth stays out of the candidate's reach --------------------------------------------------------


def test_gc_scan_finds_no_truth_and_is_flagged(tiny: Problem) -> None:
    result = benchmark(tiny, c.gc_scan())
    assert "gc found 0 float64 tensors" in result.output
    assert "gc_scanning" in result.flags
    assert result.status == "incorrect"
    assert all(x.status == "failed" for x in result.cases)  # it found nothing to return


def test_private_truth_files_are_gone_and_unreadable(tiny: Problem) -> None:
    result = benchmark(tiny, c.read_private_truth())
    assert "truth files visible: 0" in result.output
    assert "read private file" not in result.output
    assert "refused:" in result.output
    assert result.flags == ["forbidden_file_access"]
    assert result.status == "incorrect"


def test_no_seed_reaches_the_candidate(tiny: Problem) -> None:
    master = 987_654_321_012_345
    result = benchmark(tiny, c.dump_environment(), seed=master)
    assert result.status == "ok", result.message
    assert "REQUEST" in result.output
    assert "KERNEL_AGENT_JOB" in result.output  # it did print its environment
    names = [x.name for x in tiny.correctness_cases] + [t.name for t in tiny.spec.timing]
    for secret in [str(master)] + [str(derive_seed(master, n)) for n in names]:
        assert secret not in result.output
    assert "truth" not in result.output.split("REQUEST", 1)[1].split("FILES", 1)[0]


def test_a_leaked_seed_stops_the_evaluation_before_the_candidate_starts() -> None:
    secret = "918273645546372819"

    def request(data_path: str) -> orders.CandidateRequest:
        case = orders.CandidateCase(name="odd", data_path=data_path, out_path="/job/work/case_0.out.pt")
        return orders.CandidateRequest(mode="bench", cases=[case])

    clean = request("/job/shared/case_0.pt")
    _check_no_secrets({"PATH": "/usr/bin"}, clean, [secret])  # clean: no error
    with pytest.raises(RuntimeError, match="secret value"):
        _check_no_secrets({"EXTRA": f"x{secret}"}, clean, [secret])
    with pytest.raises(RuntimeError, match="secret value"):
        _check_no_secrets({}, request(f"/job/shared/{secret}.pt"), [secret])


# --- the runtime guard (audit hook) ------------------------------------------------------------------------


def test_writing_outside_the_workdir_is_refused_and_flagged(tiny: Problem, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    result = benchmark(tiny, c.write_outside(str(target)))
    assert not target.exists()
    assert result.flags == ["forbidden_file_access"]
    assert result.status == "incorrect"
    assert str(target) in result.flag_details[0].message


def test_a_subprocess_is_refused_and_flagged(tiny: Problem) -> None:
    result = benchmark(tiny, c.run_subprocess())
    assert "forbidden_subprocess" in result.flags  # at run time, through getattr(__import__(...))
    assert "dynamic_code" in result.flags  # and statically
    assert result.status == "incorrect"


def test_a_socket_is_refused_and_flagged(tiny: Problem) -> None:
    result = benchmark(tiny, c.open_socket())
    assert result.flags == ["forbidden_network"]
    assert result.status == "incorrect"


# --- faults: the harness lives on ------------------------------------------------------------------------


@pytest.mark.parametrize("make", [c.kill_parent, c.kill_own_group], ids=["kill_parent", "killpg_0"])
def test_signalling_the_parent_or_group_is_a_crash_not_a_dead_harness(tiny: Problem, make) -> None:
    if isolation.mode() != isolation.PIDNS:
        pytest.skip("without a PID namespace a same-user candidate can signal the harness (docs/exploits.md)")
    result = benchmark(tiny, make())
    assert result.status == "crashed", result.message
    assert "SIGKILL" in result.message
    assert "signals_processes" in result.flags
    after = benchmark(tiny, v.baseline())
    assert after.status == "ok", after.message


@pytest.mark.parametrize("mode", [isolation.PIDNS, isolation.GROUP])
def test_a_setsid_sleeper_is_gone_afterwards(tiny: Problem, mode: str, monkeypatch) -> None:
    if mode == isolation.PIDNS and isolation.mode() != isolation.PIDNS:
        pytest.skip("unshare is refused on this machine")
    monkeypatch.setenv("KERNEL_AGENT_ISOLATION", mode)
    seconds = 900_000 + uuid.uuid4().int % 99_999  # a sleep no other process here runs
    result = benchmark(tiny, c.setsid_sleeper(seconds))
    assert result.env.isolation == mode
    assert result.status == "ok", result.message
    assert _processes_with(f"sleep\0{seconds}") == []


def test_output_spam_is_captured_bounded(tiny: Problem) -> None:
    result = benchmark(tiny, c.output_spam(100))
    assert result.status == "ok", result.message
    assert len(result.output) < 20_000
    assert "bytes of output omitted" in result.output
    assert result.compile is not None
    assert len(result.compile.output) < 20_000


@pytest.mark.slow
@pytest.mark.serial  # checks the shared cache's staging and every process naming it: another build is both
def test_template_explosion_times_out_and_leaves_nothing_behind() -> None:
    problem = load_problem(HERE / "fast_fail.yaml")
    cache = Path(os.environ["KERNEL_AGENT_CACHE"])
    result = benchmark(problem, c.template_explosion())
    assert result.status == "timeout", result.message
    assert result.seconds < 120
    builds = cache / "builds"
    tmp = builds / ".tmp"  # where an unsealed worker builds; a sealed one builds in its job's staging folder
    assert not tmp.exists() or list(tmp.iterdir()) == []  # the killed build's folder and lock are removed
    assert not (cache / "staging").exists() or list((cache / "staging").iterdir()) == []
    assert not [p for p in builds.iterdir() if "template_boom" in p.name]
    assert _processes_with(str(cache)) == []  # no compiler left running


def test_compiles_run_under_the_memory_cap(tmp_path: Path) -> None:
    wrapper = tmp_path / "ninja"
    wrapper.write_text(build.ninja_wrapper(shutil.which("sh") or "/bin/sh", 1_234_567))
    wrapper.chmod(0o755)
    out = subprocess.run([str(wrapper), "-c", "ulimit -v"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1234567"  # inherited by ninja and every compiler it starts


# --- the harness's own files and the reference ------------------------------------------------------------


def _problem_with_own_reference(tmp_path: Path) -> tuple[Problem, Path]:
    ref = tmp_path / "reference.py"
    shutil.copy(TESTS.parent / "problems" / "selective_scan" / "reference.py", ref)
    spec = TINY.read_text()
    (tmp_path / "p.yaml").write_text(spec.replace("../../problems/selective_scan/reference.py", str(ref)))
    return load_problem(tmp_path / "p.yaml"), ref


@pytest.mark.skipif(isolation.mode() != isolation.PIDNS, reason="needs a mount namespace for the worker")
def test_tampering_with_the_reference_is_refused_by_the_read_only_mounts(tmp_path: Path) -> None:
    problem, ref = _problem_with_own_reference(tmp_path)
    before = ref.read_text()
    result = benchmark(problem, c.tamper_with(str(ref)))
    assert ref.read_text() == before  # the write failed (EROFS): nothing to flag
    assert (result.status, result.flags) == ("ok", []), result.message


def test_tampering_with_the_reference_is_flagged_and_has_no_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the worker's mounts are not sealed (the process-group fallback), a write lands, and is caught."""
    monkeypatch.setenv("KERNEL_AGENT_ISOLATION", isolation.GROUP)
    problem, ref = _problem_with_own_reference(tmp_path)
    result = benchmark(problem, c.tamper_with(str(ref)))
    assert "# tampered" in ref.read_text()
    assert "harness_tampering" in result.flags
    assert result.status == "incorrect"
    after = benchmark(problem, v.baseline())  # the problem keeps the text it read at load time
    assert after.status == "ok", after.message
    assert after.flags == []
    assert any("changed on disk" in n and str(ref) in n for n in after.notices)


def test_workers_run_from_the_snapshot_and_changes_are_reported(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "worker.py").write_text("X = 1\n")
    snap = Snapshot.take(tools)
    (tools / "worker.py").write_text("X = 2\n")
    assert snap.changed() == [str(tools / "worker.py")]
    copy = snap.write_package(tmp_path / "job")
    assert (copy / "tools" / "worker.py").read_text() == "X = 1\n"


# --- static rules: aliases and indirection, no false positives ---------------------------------------------


@pytest.mark.parametrize(
    ("source", "flag"),
    [
        ("import inspect as i\ni.stack()", "frame_introspection"),
        ("import sys\ngetattr(sys, '_getframe')(1)", "frame_introspection"),
        ("from sys import _getframe as g", "frame_introspection"),
        ("def f(e):\n    return e.__traceback__.tb_frame.f_back", "frame_introspection"),
        ("import sys as s\ns.modules['gc'].get_objects()", "gc_scanning"),
        ("import gc as g", "gc_scanning"),
        ("__import__('gc')", "dynamic_code"),
        ("import importlib\nimportlib.import_module('gc')", "dynamic_code"),
        ("exec('import gc')", "dynamic_code"),
        ("eval('1')", "dynamic_code"),
        ("import os as o\no.fork()", "spawns_workers"),
        ("from concurrent.futures import ThreadPoolExecutor as P", "spawns_workers"),
        ("import os\nos.setsid()", "spawns_workers"),
        ("from os import killpg", "signals_processes"),
        ("import sys\nsys.modules['reference'].Model", "imports_reference"),
        ("from tools import guard", "imports_reference"),
    ],
)
def test_static_rules_see_through_aliases(source: str, flag: str) -> None:
    flags, error = check_source(source + "\n\nclass ModelNew:\n    pass\n")
    assert error is None
    assert flag in [f.name for f in flags]


def test_static_rules_have_no_false_positives_on_legal_python() -> None:
    legal = (
        "import math\nimport os\nimport sys\nimport torch\nimport torch.nn.functional as F\n"
        "signal = 3\ngc = {'a': 1}\nstack = torch.stack\n"
        "def helper(t):\n    return getattr(t, 'contiguous')()\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        n = os.cpu_count()\n"
        "        y = torch.stack([x, x]).sum(0) * math.pi\n        return helper(y) if sys.version_info > (3,) else y\n"
    )
    assert check_source(legal)[0] == []
    assert check_source("import importlib.util\nimportlib.util.find_spec('nvidia')\n" + legal)[0] == []
    for make in (v.baseline, c.heavy_legal_python, c.output_spam):
        assert check_source(make())[0] == []
    shipped = sorted((TESTS.parent / "problems").glob("*/solutions/*.py"))
    assert shipped
    for path in shipped:  # every shipped honest solution, CUDA ones included
        assert check_source(path.read_text())[0] == [], path
