"""The trusted builder (issue 52): only the harness builds and publishes; a candidate's worker only loads.

A candidate that plants a binary under the key of sources it did not build finds it never published: a
later candidate with exactly those sources runs what they compile to. A call with a flag that would let the
candidate choose what the compiler or linker runs gets a verdict, not a build; and what the candidate wrote
in its own folder is not there for the builder to include.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.adversarial.candidates import with_module_code
from tests.candidates.scan_variants import baseline, replace
from tools import benchmark, compile_kernel
from tools.cache import build_cache_dir
from tools.judge._compile import missing_include_hint
from tools.problem import Problem
from tools.results import Diagnostic
from tools.supervise import WarmPool, isolation
from tools.supervise.build_flags import flag_refusal, refusal
from tools.wire import BuildCall

namespaces = pytest.mark.skipif(
    isolation.mode() != isolation.PIDNS or isolation.cold_support().netns != "",
    reason="this machine refuses PID or network namespaces (needs root or user namespaces)",
)
SKIP_LINE = "yp[row * D + d] = acc + xv * sp[d];"

PLANT = r"""
import ctypes, json, os, sys
from tools.worker import build as _harness_build
_libc = ctypes.CDLL(None, use_errno=True)
_VICTIM = json.loads(VICTIM_CALL)
_entry = f"{_VICTIM['name']}-{_harness_build.build_key(_harness_build.normalised_call(**_VICTIM))}"
_target = os.path.join(os.environ["KERNEL_AGENT_BUILD_CACHE"], _entry)
_own = _ext._module.__file__  # the binary this candidate built: a correct scan, unlike the victim's
def _write(path, data):
    fd = _libc.open(path.encode(), 0o1101, 0o755)  # O_WRONLY | O_CREAT | O_TRUNC, through libc: no audit
    _libc.write(fd, data, len(data)) if fd >= 0 else None
    return 0 if fd >= 0 and _libc.close(fd) == 0 else ctypes.get_errno()
_made = _libc.mkdir(_target.encode(), 0o755)
_planted = [_write(os.path.join(_target, os.path.basename(_own)), open(_own, "rb").read()),
            _write(os.path.join(_target, "kernel_agent_build.json"), json.dumps({"key": _entry.rsplit("-", 1)[1]}).encode())]
print("PLANTED " + json.dumps({"entry": _entry, "mkdir": _made, "files": _planted}), flush=True)
"""


def victim() -> tuple[str, dict[str, object]]:
    """An honest candidate whose own scan is wrong (it adds 1 to every output), with sources nobody has built;
    and its load_inline's arguments."""
    code = replace(SKIP_LINE, f"yp[row * D + d] = acc + xv * sp[d] + 1.0f;  // {uuid.uuid4().hex}")
    source = code.split('CPP_SOURCE = r"""', 1)[1].split('"""', 1)[0]
    call = {
        "name": "scan_cpu_baseline",
        "cpp_sources": source,
        "functions": ["selective_scan"],
        "extra_cflags": ["-O3", "-fopenmp"],
        "extra_ldflags": ["-fopenmp"],
    }
    return code, call


@pytest.mark.slow  # 17 s on 2 cores: two builds of the same sources
@namespaces
def test_a_planted_build_is_never_published_and_the_next_candidate_runs_its_own_sources(
    tiny: Problem, warm: WarmPool
) -> None:
    code, call = victim()
    planter = with_module_code(f"VICTIM_CALL = {json.dumps(call)!r}", *PLANT.strip("\n").splitlines())
    planted = compile_kernel(tiny, planter, pool=warm)
    assert planted.ok, planted.message
    line = next(x for x in planted.output.splitlines() if x.startswith("PLANTED "))
    seen = json.loads(line.removeprefix("PLANTED "))
    assert (seen["mkdir"], seen["files"]) == (0, [0, 0]), seen  # the plant landed in its overlay ...
    entry = build_cache_dir() / seen["entry"]
    assert not entry.exists(), "a candidate's staged entry was published"  # ... and stayed there

    result = benchmark(tiny, code, pool=warm, prefetch_next=False)
    assert result.compile is not None
    assert not result.compile.cached  # built by the harness, not served the plant
    assert result.compile.builds[0].key == seen["entry"].rsplit("-", 1)[1]
    assert result.status == "incorrect", result.message  # its own scan ran: the plant's would have passed
    own = build_cache_dir() / f"scan_cpu_baseline-{planted.builds[0].key}" / "scan_cpu_baseline.so"
    assert (
        entry / "scan_cpu_baseline.so"
    ).read_bytes() != own.read_bytes()  # the harness's build, not the plant


@namespaces
@pytest.mark.parametrize(
    "flags",
    [
        {"extra_cflags": ["-O3", "-fplugin=/tmp/evil.so"]},
        {"extra_ldflags": ["-Xlinker", "-plugin", "-Xlinker", "/tmp/evil.so"]},
        {"extra_cflags": ["@/tmp/more-flags"]},
        {"extra_cflags": ["-B/tmp/evil-bin"]},
    ],
    ids=["fplugin", "linker_plugin", "response_file", "program_prefix"],
)
def test_a_forbidden_flag_gets_a_verdict_and_no_build(
    tiny: Problem, warm: WarmPool, flags: dict[str, list[str]]
) -> None:
    old = 'extra_cflags=["-O3", "-fopenmp"],\n    extra_ldflags=["-fopenmp"],'
    new = ", ".join(f"{k}={v!r}" for k, v in flags.items()) + ","
    code = replace(old, new)
    result = compile_kernel(tiny, code, pool=warm)
    assert result.status == "compile_error", result.message
    assert "refused" in result.message, result.message
    shown = next(iter(flags.values()))
    assert any(f in result.message for f in shown), result.message
    assert [b.ok for b in result.builds] == [False]


@namespaces
def test_what_the_candidate_wrote_in_its_folder_is_hidden_from_the_builder(
    tiny: Problem, warm: WarmPool
) -> None:
    """Its sources include a header it wrote at import: the builder sees an empty folder there (and fails
    at once, before the torch headers, as the include comes first)."""
    code = baseline().replace(
        "from torch.utils.cpp_extension import load_inline\n",
        "from torch.utils.cpp_extension import load_inline\nimport os\n"
        "with open('planted.h', 'w') as fh:\n    fh.write('#define PLANTED 1\\n')\n"
        "CWD = os.getcwd()\n",
        1,
    )
    code = code.replace('CPP_SOURCE = r"""\n', 'CPP_SOURCE = r"""\n#include "@CWD@/planted.h"\n', 1)
    code = code.replace("cpp_sources=CPP_SOURCE,", 'cpp_sources=CPP_SOURCE.replace("@CWD@", CWD),', 1)
    assert 'CPP_SOURCE.replace("@CWD@", CWD)' in code, "baseline.py changed: update this test"
    result = compile_kernel(tiny, code, pool=warm)
    assert result.status == "compile_error", result.message
    assert "planted.h: No such file" in result.message, result.message
    assert "files your module writes while it runs are not visible" in result.message, result.message


def test_a_missing_include_is_explained_and_other_failures_are_left_alone() -> None:
    missing = Diagnostic(message="/job/work/defs.cuh: No such file or directory")
    hint = missing_include_hint([Diagnostic(message="expected ';' before '}' token"), missing])
    assert hint.startswith("\n/job/work/defs.cuh was not found by the harness's builder")
    assert missing_include_hint([Diagnostic(message="expected ';' before '}' token")]) == ""


# --- the flag check, without a build -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["-wrapper", "gdb,--args"],
        ["-fplugin=x.so"],
        ["-fplugin-arg-x-y"],
        ["-B/tmp/bin"],
        ["-specs=/tmp/specs"],
        ["--specs=/tmp/specs"],
        ["@/tmp/flags"],
        ["-ccbin", "/tmp/cc"],
        ["--compiler-bindir=/tmp/cc"],
        ["-Xlinker", "-plugin"],
        ["-Xlinker", "--plugin=x.so"],
        ["-Wl,-plugin,x.so"],
        ["-Wl,@/tmp/flags"],
        ["-fuse-ld=/tmp/ld"],
        ["--ld-path=/tmp/ld"],
        ["-Xcompiler", "-fplugin=x.so"],
        ["-Xcompiler=-wrapper,gdb"],
        ["--compiler-options", "-B/tmp"],
        ["-o", "/tmp/elsewhere.so"],
        ["-Wl,-o,/tmp/elsewhere.so"],
        ["--run"],
        ["-optf", "/tmp/flags"],
        ["-O2\nbuild evil: phony"],
        ["-DX=$(touch /tmp/x)"],
        ["-fmodule-mapper=|/tmp/x"],
    ],
)
def test_flags_that_run_load_or_write_what_the_candidate_chooses_are_refused(flags: list[str]) -> None:
    assert flag_refusal(flags), flags


@pytest.mark.parametrize(
    "flags",
    [
        ["-O3", "-fopenmp", "-march=native", "-ffast-math", "-std=c++17", "-DNDEBUG", "-g"],
        ["-lgomp", "-Wl,-Bsymbolic", "-Wl,--as-needed", "-fuse-ld=gold", "-L/usr/lib"],
        ["--use_fast_math", "-Xptxas=-v", "-lineinfo", "-arch=sm_90", "--expt-relaxed-constexpr"],
        ["-Xcompiler", "-fopenmp", "-Xcompiler=-O3,-march=native", "-maxrregcount=64", "-res-usage"],
        ["-fsanitize=address,undefined", "-fno-sanitize=vptr", "-fno-omit-frame-pointer"],
    ],
)
def test_ordinary_flags_pass(flags: list[str]) -> None:
    assert flag_refusal(flags) == ""


def test_an_extension_name_is_a_name_and_include_folders_are_folders() -> None:
    base = {"cpp_sources": ["int x;"]}
    assert refusal(BuildCall(name="my_ext", **base)) == ""
    assert "name" in refusal(BuildCall(name="../../escape", **base))
    assert "name" in refusal(BuildCall(name="a b", **base))
    assert refusal(BuildCall(name="e", extra_include_paths=["/usr/include/x"], **base)) == ""
    assert "extra_include_paths" in refusal(BuildCall(name="e", extra_include_paths=["x\ny"], **base))
