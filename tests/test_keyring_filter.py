"""The worker's keyring filter (tools/worker/contain.py `block_keyrings`) goes in through seccomp(2) with
SECCOMP_FILTER_FLAG_SPEC_ALLOW, so the kernel does not force speculation mitigations on the worker (they slow
the host's path through a timed call, which its figure counts), and still refuses the keyring calls; where
the kernel refuses the flag (or the caller asks), prctl installs the same filter. Each case in a fresh process: a filter cannot be
removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import ctypes, json, sys
from tools.worker import contain
took = [False]  # stays False where block_keyrings takes prctl's path
install = contain.install_filter_allowing_speculation
contain.install_filter_allowing_speculation = lambda c, f: took.append(install(c, f)) or took[-1]
contain.block_keyrings(allow_speculation=sys.argv[1] == "flag")
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.syscall(248, b"user", b"probe", b"payload", 7, -4)  # add_key into the user keyring
print(json.dumps({"spec_allow": took[-1], "seccomp": status["Seccomp"].strip(), "add_key": [rc, ctypes.get_errno()]}))
"""


def filtered(mode: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return json.loads(out.stdout)


pytestmark = pytest.mark.skipif(
    os.uname().machine != "x86_64", reason="the test's add_key number is x86_64's"
)


def test_the_filter_allows_speculation_and_refuses_the_keyring() -> None:
    found = filtered("flag")
    assert found == {"spec_allow": True, "seccomp": "2", "add_key": [-1, 1]}  # EPERM


def test_through_prctl_the_same_filter_holds() -> None:
    found = filtered("prctl")
    assert found == {"spec_allow": False, "seccomp": "2", "add_key": [-1, 1]}
