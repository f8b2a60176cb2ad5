"""Rules read from the candidate's source before it runs. Each flag has a name and a line the author can act on.

These are the first line of defence; runtime guards back them (the reference never enters the candidate's
process, outputs are poisoned, inputs are compared, timers are checked, tools.worker.guard audits opens,
subprocesses, sockets and signals). Names are resolved through aliases (`import inspect as i`,
`from sys import _getframe as g`), `getattr(mod, "name")` and `sys.modules["name"]`; dynamic code
(`exec`, `eval`, `__import__`, `importlib`) is its own flag, since it would hide everything else.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tools import pysource
from tools.results import Flag


@dataclass(frozen=True)
class Rule:
    name: str
    explanation: str


RULES = {
    "imports_reference": Rule(
        "imports_reference",
        "do not import the reference or the harness; ModelNew must compute the result itself",
    ),
    "subclasses_reference": Rule(
        "subclasses_reference", "ModelNew must not subclass the reference Model; subclass torch.nn.Module"
    ),
    "frame_introspection": Rule(
        "frame_introspection",
        "no frame or stack introspection (inspect.stack, sys._getframe, f_back, …): a call must not depend on who "
        "calls it",
    ),
    "gc_scanning": Rule(
        "gc_scanning", "no gc.get_objects/get_referrers: the candidate may only use its own inputs"
    ),
    "spawns_workers": Rule(
        "spawns_workers",
        "no threads, processes or subprocesses from Python (OpenMP inside your kernel is fine): work must finish "
        "inside the call",
    ),
    "signals_processes": Rule(
        "signals_processes", "no signals to processes (os.kill, os.killpg, …): leave other processes alone"
    ),
    "dynamic_code": Rule(
        "dynamic_code",
        "no exec/eval/compile/__import__/importlib: every line that runs must be visible in kernel_code",
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
    # Raised at run time (tools.worker.guard, tools.supervise.integrity), named here so every flag has one explanation.
    "forbidden_file_access": Rule(
        "forbidden_file_access",
        "file access outside the sandbox: write only in the working dir, never read the harness's private files",
    ),
    "forbidden_subprocess": Rule(
        "forbidden_subprocess",
        "started a process outside load_inline's own build: all work must happen inside forward, in this process",
    ),
    "forbidden_network": Rule("forbidden_network", "opened a socket: candidates have no network access"),
    "harness_tampering": Rule(
        "harness_tampering",
        "harness or reference files changed on disk while the candidate ran: do not touch them",
    ),
    "cache_tampering": Rule(
        "cache_tampering",
        "changed a build in the shared build cache (wrote, renamed, chmodded or deleted files of an existing "
        "entry or of the cache's own files): the change was dropped, the cache is as it was",
    ),
}

_FORBIDDEN_ROOTS = {
    "reference": "imports_reference",
    "tools": "imports_reference",
    "agent": "imports_reference",
}
_FORBIDDEN_ROOTS |= dict.fromkeys(
    ("threading", "multiprocessing", "subprocess", "concurrent", "_thread", "asyncio", "pty"),
    "spawns_workers",
)
_FORBIDDEN_ROOTS |= {"gc": "gc_scanning", "builtins": "dynamic_code"}
_FORBIDDEN_ROOTS |= {"signal": "signals_processes"}

_QUALIFIED = {
    **dict.fromkeys(
        ("inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.getframeinfo",
         "inspect.trace", "inspect.getinnerframes", "sys._getframe", "sys.settrace", "sys.setprofile",
         "sys._current_frames", "traceback.extract_stack", "traceback.walk_stack", "traceback.format_stack",
         "traceback.print_stack"),
        "frame_introspection",
    ),
    **dict.fromkeys(
        ("os.fork", "os.forkpty", "os.system", "os.popen", "os.spawnl", "os.spawnv", "os.spawnlp", "os.spawnvp",
         "os.posix_spawn", "os.posix_spawnp", "os.execv", "os.execve", "os.execvp", "os.execl", "os.setsid",
         "os.setpgid", "os.setpgrp", "os.daemon"),
        "spawns_workers",
    ),
    "os.kill": "signals_processes",
    "os.killpg": "signals_processes",
    "sys.modules": None,  # resolved through its subscript
}  # fmt: skip
# Attribute names that are only ever used for these purposes, on whatever object (or as getattr strings).
_ANY_ATTR = {
    **dict.fromkeys(("get_objects", "get_referrers", "get_referents"), "gc_scanning"),
    **dict.fromkeys(
        (
            "_getframe",
            "f_back",
            "tb_frame",
            "gi_frame",
            "cr_frame",
            "f_locals",
            "_current_frames",
            "settrace",
        ),
        "frame_introspection",
    ),
    "allow_tf32": "tf32_enabled",
    "fp32_precision": "tf32_enabled",  # torch >= 2.9's way of asking for TF32
    # importlib itself is fine (find_spec locates headers); running a module it found is not.
    **dict.fromkeys(("import_module", "exec_module", "load_module", "reload"), "dynamic_code"),
}
_DYNAMIC_BUILTINS = {"exec", "eval", "compile", "__import__", "__builtins__"}


def _flag(name: str, line: int | None = None) -> Flag:
    rule = RULES[name]
    where = f" (line {line})" if line else ""
    return Flag(name=name, message=f"{rule.explanation}{where}")


def _forward_has_try(cls: ast.ClassDef) -> int | None:
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
            for node in ast.walk(fn):
                if isinstance(node, ast.Try | ast.TryStar) and node.handlers:
                    return node.lineno
                if isinstance(node, ast.Attribute) and node.attr == "suppress":
                    return node.lineno  # contextlib.suppress is a try/except too
    return None


class _Checker(ast.NodeVisitor):
    """One pass over the tree; `aliases` maps a local name to the dotted name it was imported as."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.found: dict[str, Flag] = {}

    def add(self, name: str | None, line: int | None) -> None:
        if name:
            self.found.setdefault(name, _flag(name, line))

    def _module(self, dotted: str, line: int) -> None:
        self.add(_FORBIDDEN_ROOTS.get(dotted.split(".")[0]), line)
        self.add(_QUALIFIED.get(dotted), line)

    def generic_visit(self, node: ast.AST) -> None:
        """No recursion: check_source walks every node itself."""

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted name an expression stands for, when it starts from an imported name."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Subscript) and self.resolve(node.value) == "sys.modules":
            key = node.slice
            return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            self._module(a.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        self._module(mod, node.lineno)
        for a in node.names:
            self.aliases[a.asname or a.name] = f"{mod}.{a.name}"
            self._module(f"{mod}.{a.name}", node.lineno)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.add(_ANY_ATTR.get(node.attr), node.lineno)
        if dotted := self.resolve(node):
            self._module(dotted, node.lineno)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if dotted := self.resolve(node):
            self._module(dotted, node.lineno)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _DYNAMIC_BUILTINS and node.id not in self.aliases:
            self.add("dynamic_code", node.lineno)
        elif node.id in self.aliases:
            self._module(self.aliases[node.id], node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in {"getattr", "setattr", "hasattr", "delattr"}
            and node.args
        ):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self.add(_ANY_ATTR.get(name.value), node.lineno)
                if base := self.resolve(node.args[0]):
                    self._module(f"{base}.{name.value}", node.lineno)
        if isinstance(func, ast.Attribute) and func.attr == "set_float32_matmul_precision":
            self.add("tf32_enabled", node.lineno)


def check_source(source: str) -> tuple[list[Flag], str | None]:
    """(flags, syntax error message or None)."""
    try:
        tree = pysource.parse_module(source, "kernel.py")
    except SyntaxError as exc:
        return [], f"kernel.py line {exc.lineno}: {exc.msg}"
    checker = _Checker()
    # Imports first, wherever they are, so an alias bound late in the file still resolves.
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            checker.visit(node)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            checker.visit(node)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    model_new = classes.get("ModelNew")
    if model_new is None:
        checker.add("no_model_new", None)
    else:
        for base in model_new.bases:
            named = base.id if isinstance(base, ast.Name) else None
            if (named == "Model" or checker.resolve(base) == "reference.Model") and "Model" not in classes:
                checker.add("subclasses_reference", model_new.lineno)
        if line := _forward_has_try(model_new):
            checker.add("try_fallback", line)
    return list(checker.found.values()), None
