"""`agent bench`'s page (agent.views.result.bench_page), rendered into a string Console: each thing said once,
nothing printed that the evaluation did not have (`seed None`, `CUDA None`), and the kernel named by the
path the user gave, not the job folder's kernel.py (agent.cli.bench.named_as)."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

from agent.cli.bench import named_as
from agent.views.result import bench_page
from tools.results import BenchResult, CompileResult, EnvInfo, Flag

CPU_ENV = EnvInfo(harness_sha="abc123", torch="2.13.0+cpu", cuda=None, gpu=None, device="cpu")
NO_MODEL_NEW = "kernel_code must define a class named ModelNew"


def text_of(renderable: RenderableType, width: int = 160) -> str:
    console = Console(file=io.StringIO(), width=width, legacy_windows=False)
    console.print(renderable)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())  # type: ignore[attr-defined]


def test_a_cpu_machine_and_no_seed_are_not_printed_as_none() -> None:
    result = BenchResult(
        status="import_error", correct=False, speedup=None, message="SyntaxError: kernel.py line 2: invalid syntax",
        env=CPU_ENV, workers="warm", seed=None, seconds=0.01,
    )  # fmt: skip
    last = text_of(bench_page(result)).splitlines()[-1]
    assert last == "0.0s · warm workers · CPU · torch 2.13.0+cpu · harness abc123"
    with_seed = result.model_copy(update={"seed": 7, "env": CPU_ENV.model_copy(update={"cuda": "13.0"})})
    assert "· seed 7 ·" in text_of(bench_page(with_seed))
    assert "· CUDA 13.0 ·" in text_of(bench_page(with_seed))


def test_a_kernel_without_model_new_is_said_once() -> None:
    result = BenchResult(
        status="import_error", correct=False, speedup=None, message=NO_MODEL_NEW, env=CPU_ENV,
        compile=CompileResult(status="import_error", message=NO_MODEL_NEW),
        flag_details=[Flag(name="no_model_new", message=f"{NO_MODEL_NEW} at module level")],
    )  # fmt: skip
    assert text_of(bench_page(result)).count(NO_MODEL_NEW) == 1


def test_messages_name_the_users_file() -> None:
    message = 'constructor failed:   File "/tmp/kagent-job-1/kernel.py", line 6, in __init__'
    result = BenchResult(status="incorrect", correct=False, speedup=None, message=message, env=CPU_ENV)
    renamed = BenchResult.model_validate(named_as(result.model_dump(mode="json"), "my/scan.py"))
    assert renamed.message == 'constructor failed:   File "my/scan.py", line 6, in __init__'
    assert named_as("SyntaxError: kernel.py line 2", "a.py") == "SyntaxError: a.py line 2"
    assert named_as("my_kernel.py and kernel.pyc stay", "a.py") == "my_kernel.py and kernel.pyc stay"


def test_a_build_is_said_once() -> None:
    build = CompileResult(status="ok", message="compiled 1 extension in 34.4 s", seconds=34.4)
    result = BenchResult(
        status="incorrect", correct=False, speedup=None, message="x", env=CPU_ENV, compile=build
    )
    assert "compiled 1 extension in 34.4 s" in text_of(bench_page(result)).splitlines()
