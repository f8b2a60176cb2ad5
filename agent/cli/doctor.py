"""`agent doctor`: what this machine can run (tools.machine's checks, then the models' API keys), each
missing part with its fix. Exit 0 where CPU problems can run; 1 where even they cannot."""

from __future__ import annotations

import argparse
import os

from tools.machine import CPU_PROBLEMS, MachineCheck, MachineReport, check

# The models' keys: (variable, what it enables, the fix). A key is only ever reported as set or not set.
KEYS = (
    (
        "ANTHROPIC_API_KEY",
        "Claude models",
        "export ANTHROPIC_API_KEY=<your key> (without one, agent run plays back a scripted trajectory)",
    ),
    (
        "OPENAI_API_KEY",
        "OpenAI-compatible models",
        "export OPENAI_API_KEY=<your key> (a local server that checks none: OPENAI_API_KEY=none)",
    ),
)
EXIT_READY, EXIT_CANNOT_RUN = 0, 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="what this machine can run: Python, torch, nvcc, compiler, GPU, disk, sanitizer, profiler, keys",
        description="Check this machine for what the harness needs and print the fix for each missing part. "
        "Exit 0 where CPU problems can run, 1 where even they cannot.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as one JSON object")
    doctor.set_defaults(handler=run_doctor)


def key_checks(environ: dict[str, str] | os._Environ[str]) -> list[MachineCheck]:
    """Whether each model's key is in the environment: "set" or "not set", never the key."""
    return [
        check(variable, [enables], "set")
        if environ.get(variable)
        else check(variable, [enables], "not set", fix)
        for variable, enables, fix in KEYS
    ]


def cpu_ready(report: MachineReport) -> bool:
    return any(c.name == CPU_PROBLEMS and c.ready for c in report.capabilities)


def run_doctor(args: argparse.Namespace) -> int:
    from agent.cli.console import make_console
    from agent.views.doctor import doctor_view
    from tools.machine import machine_report

    report = machine_report(key_checks(os.environ), tuple(enables for _, enables, _ in KEYS))
    if args.json:
        print(report.model_dump_json())
    else:
        console = make_console()
        for line in doctor_view(report):
            console.print(line)
    return EXIT_READY if cpu_ready(report) else EXIT_CANNOT_RUN
