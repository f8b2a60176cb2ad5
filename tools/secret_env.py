"""Secrets (API keys, tokens) kept out of every process a candidate could read.

A candidate worker's own environment is an allowlist (`_spawn.ENV_ALLOWLIST`): no key reaches it. What
it could still read is another process's environment, in `/proc/<pid>/environ`: the harness's (the CLI
holds ANTHROPIC_API_KEY), a Ray worker's, a trusted helper's. In a PID namespace of its own (the default
where the machine allows it: tools/supervise/isolation.py) it sees no other process. Where it does not
(the process-group fallback), these narrow what it can see:

- `hide_own_environ`: the harness process blanks the secret values in its own initial environment block
  (the memory `/proc/<pid>/environ` reads), takes them out of libc's environment (what a child started
  without an explicit `env` inherits) and marks itself non-dumpable, so a process without CAP_SYS_PTRACE
  cannot read its `/proc/<pid>/environ` or `mem` at all, even as the same user. Python's `os.environ` is
  a copy made at start-up: the process itself keeps its keys for the clients it builds.
- `without_secrets` / `withheld`: trusted helpers (a peaks probe, a local Ray instance) start with no
  secret in their environment.

What stays open there (docs/containment.md): other processes of the same user that hold keys (the shell
that started the harness), and, as root with capabilities, the harness's memory. Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Iterator, Mapping

PR_SET_DUMPABLE = 4
# Names that hold credentials: a part equal to one of these, or containing one of the longer words.
SECRET_PARTS = frozenset({"KEY", "KEYS", "APIKEY", "TOKEN", "AUTH", "PAT", "PASS", "PWD", "COOKIE"})
SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "APIKEY", "ACCESS_KEY")


def looks_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (ANTHROPIC_API_KEY, GH_TOKEN,
    AWS_SECRET_ACCESS_KEY, PGPASSWORD, ...)."""
    upper = name.upper()
    return any(w in upper for w in SECRET_WORDS) or bool(SECRET_PARTS & set(re.split(r"[^A-Z0-9]+", upper)))


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """The values of the secret-looking variables of `env` (default: this process's), longest first."""
    env = os.environ if env is None else env
    return sorted({v for k, v in env.items() if looks_secret(k) and len(v) >= 4}, key=len, reverse=True)


def without_secrets(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) less every secret-looking variable and every variable whose value
    carries a secret's value."""
    env = dict(os.environ if env is None else env)
    values = secret_values(env)
    return {k: v for k, v in env.items() if not looks_secret(k) and not any(s in v for s in values)}


@contextlib.contextmanager
def withheld() -> Iterator[None]:
    """This process's secret-looking variables out of `os.environ` for a block (what it starts inherits
    none of them), put back afterwards."""
    saved = {k: v for k, v in os.environ.items() if looks_secret(k)}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


def _environ_block() -> tuple[int, int]:
    """Where this process's initial environment lies in its memory (/proc/self/stat fields 50 and 51)."""
    with open("/proc/self/stat") as fh:
        after_name = fh.read().rsplit(")", 1)[1].split()
    return int(after_name[47]), int(after_name[48])  # field 3 is after_name[0]


def _blank_block_values(start: int, end: int, names: set[str]) -> int:
    """Overwrite, in place, the values of `names` in the block [start, end): returns how many."""
    blanked, offset = 0, 0
    block = ctypes.string_at(start, end - start)
    for entry in block.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and value and name.decode(errors="replace") in names:
            ctypes.memset(start + offset + len(name) + 1, ord("*"), len(value))
            blanked += 1
        offset += len(entry) + 1
    return blanked


def hide_own_environ() -> list[str]:
    """Blank this process's secrets in `/proc/self/environ` and make it non-dumpable. Returns why each step
    the machine refused did not take ([] where both did). Leaves `os.environ` as it is; a child started
    without an explicit `env` inherits no secret."""
    refused = []
    names = {k for k in os.environ if looks_secret(k)}
    try:
        start, end = _environ_block()
        with open("/proc/self/environ", "rb") as fh:
            seen = fh.read()
        if names and ctypes.string_at(start, end - start) == seen:  # the block is where the kernel says
            _blank_block_values(start, end, names)
    except (OSError, ValueError, IndexError) as exc:
        refused.append(f"environment block not blanked: {exc}")
    libc = ctypes.CDLL(None, use_errno=True)
    for name in sorted(names):  # libc's copy only: children inherit none; os.environ keeps them
        libc.unsetenv(name.encode())
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        refused.append(f"prctl(PR_SET_DUMPABLE): {os.strerror(ctypes.get_errno())}")
    return refused
