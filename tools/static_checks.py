"""Rules read from the candidate's source before it runs. Each flag has a name and a line the author can act on.

These are the first line of defence; runtime guards back them (the reference never enters the candidate's
process, outputs are poisoned, inputs are compared, timers are checked).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tools.results import Flag


@dataclass(frozen=True)
class Rule:
    name: str
    explanation: str


RULES = {
    "imports_reference": Rule(
        "imports_reference", "do not import the reference module; ModelNew must compute the result itself"
    ),
    "subclasses_reference": Rule(
        "subclasses_reference", "ModelNew must not subclass the reference Model; subclass torch.nn.Module"
    ),
    "frame_introspection": Rule(
        "frame_introspection",
        "no frame or stack introspection (inspect.stack, sys._getframe, …): a call must not depend on who calls it",
    ),
    "gc_scanning": Rule(
        "gc_scanning", "no gc.get_objects/get_referrers: the candidate may only use its own inputs"
    ),
    "spawns_workers": Rule(
        "spawns_workers",
        "no threads, processes or subprocesses from Python (OpenMP inside your kernel is fine): work must finish "
        "inside the call",
    ),
    "try_fallback": Rule(
        "try_fallback",
        "no try/except around the kernel call in forward: a failing kernel must fail, not fall back to torch",
    ),
    "no_model_new": Rule("no_model_new", "kernel_code must define a class named ModelNew at module level"),
    "tf32_enabled": Rule(
        "tf32_enabled",
        "this problem is fp32: do not enable TF32 (allow_tf32 / set_float32_matmul_precision); the harness resets "
        "these flags before every call anyway",
    ),
}

_SPAWNING = {"threading", "multiprocessing", "subprocess", "concurrent", "_thread", "asyncio"}
_SPAWN_CALLS = {"fork", "forkpty", "system", "popen", "spawnl", "spawnv", "posix_spawn", "execv", "execve"}
_INTROSPECTION = {
    "stack",
    "currentframe",
    "getouterframes",
    "_getframe",
    "getframeinfo",
    "trace",
    "settrace",
    "setprofile",
}


def _flag(name: str, line: int | None = None) -> Flag:
    rule = RULES[name]
    where = f" (line {line})" if line else ""
    return Flag(name=name, message=f"{rule.explanation}{where}")


def _imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def _forward_has_try(cls: ast.ClassDef) -> int | None:
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
            for node in ast.walk(fn):
                if isinstance(node, ast.Try) and node.handlers:
                    return node.lineno
    return None


def check_source(source: str) -> tuple[list[Flag], str | None]:
    """(flags, syntax error message or None)."""
    try:
        tree = ast.parse(source, filename="kernel.py")
    except SyntaxError as exc:
        return [], f"kernel.py line {exc.lineno}: {exc.msg}"
    found: dict[str, Flag] = {}

    def add(name: str, line: int | None) -> None:
        found.setdefault(name, _flag(name, line))

    for node in ast.walk(tree):
        for mod in _imported_names(node):
            root = mod.split(".")[0]
            if root in {"reference", "tools", "agent"}:
                add("imports_reference", node.lineno)
            if root in _SPAWNING:
                add("spawns_workers", node.lineno)
            if root == "gc":
                add("gc_scanning", node.lineno)
        if isinstance(node, ast.Attribute):
            if (
                node.attr in _INTROSPECTION
                and isinstance(node.value, ast.Name)
                and node.value.id in {"inspect", "sys"}
            ):
                add("frame_introspection", node.lineno)
            if node.attr in _SPAWN_CALLS and isinstance(node.value, ast.Name) and node.value.id == "os":
                add("spawns_workers", node.lineno)
            if node.attr in {"get_objects", "get_referrers", "get_referents"}:
                add("gc_scanning", node.lineno)
            if node.attr == "allow_tf32":
                add("tf32_enabled", node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "set_float32_matmul_precision":
                add("tf32_enabled", node.lineno)
        if isinstance(node, ast.Name) and node.id in {"__import__"}:
            add("imports_reference", node.lineno)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    model_new = classes.get("ModelNew")
    if model_new is None:
        add("no_model_new", None)
    else:
        for base in model_new.bases:
            if isinstance(base, ast.Name) and base.id in {"Model"} and "Model" not in classes:
                add("subclasses_reference", model_new.lineno)
        if line := _forward_has_try(model_new):
            add("try_fallback", line)
    return list(found.values()), None
