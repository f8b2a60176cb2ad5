"""A KernelBench file's module constants: found and evaluated from the source without running it (the
evaluator's process never executes a reference), and pinned when the truth worker executes it.

Overriding a constant pins it: the module's own assignments to it are skipped and every other top-level
statement runs as written, so a constant derived from it (`bias_shape = (out_channels, 1, 1)`) is
recomputed, and `height = width = 128` pins one name and keeps the other.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

from tools import pysource

SizeValue = int | float | tuple[int | float, ...]
"""What a module constant may be overridden with: an int, a float, or a tuple of them."""

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_CALLS: dict[str, Callable[..., Any]] = {"int": int, "float": float, "min": min, "max": max, "abs": abs}


class Unknown(Exception):
    """An expression the static evaluator does not follow (a call into torch, a list, a string)."""


def is_size_value(value: object) -> bool:
    if isinstance(value, tuple):
        return all(is_size_value(v) and not isinstance(v, tuple) for v in value)
    return type(value) in (int, float)


def evaluate(node: ast.expr, env: dict[str, SizeValue]) -> SizeValue:
    """The value of a constant expression over names already known; `Unknown` for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value  # type: ignore[return-value]  # int or float, checked above
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Tuple):
        items = tuple(evaluate(e, env) for e in node.elts)
        if not is_size_value(items):
            raise Unknown
        return items  # type: ignore[return-value]  # a tuple of numbers, checked above
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = evaluate(node.operand, env)
        if isinstance(value, tuple):
            raise Unknown
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        result = _BINARY[type(node.op)](evaluate(node.left, env), evaluate(node.right, env))
        if not is_size_value(result):
            raise Unknown
        return result  # type: ignore[no-any-return]  # checked above
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        if node.keywords:
            raise Unknown
        result = _CALLS[node.func.id](*(evaluate(a, env) for a in node.args))
        if not is_size_value(result):
            raise Unknown
        return result  # type: ignore[no-any-return]  # checked above
    raise Unknown


def simple_targets(stmt: ast.stmt) -> list[str] | None:
    """The names a top-level `a = b = <expr>` (or `a: T = <expr>`) binds; None for any other statement."""
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [stmt.target.id]
    return None


def complex_bindings(tree: ast.Module) -> dict[str, str]:
    """Names bound at the top level other than by a simple assignment (tuple unpacking, `+=`, a loop, an
    `if`...), with the line: an override of one of them cannot be pinned, so it is refused."""
    found: dict[str, str] = {}
    for stmt in tree.body:
        if simple_targets(stmt) is not None or isinstance(
            stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom
        ):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                found.setdefault(node.id, f"line {stmt.lineno}: {ast.unparse(stmt).splitlines()[0][:80]}")
    return found


def assigned_names(tree: ast.Module) -> set[str]:
    """Every name a simple top-level assignment binds: the constants an override may pin."""
    return {name for stmt in tree.body for name in simple_targets(stmt) or []} - set(complex_bindings(tree))


def constants(tree: ast.Module, pins: dict[str, SizeValue] | None = None) -> dict[str, SizeValue]:
    """The module constants' values, statement by statement, with `pins` fixed: derived ones recomputed.
    A constant the evaluator cannot follow (or that depends on one) is left out; the worker's execution
    still computes it."""
    pins = pins or {}
    env: dict[str, SizeValue] = dict(pins)
    for stmt in tree.body:
        targets = simple_targets(stmt)
        if targets is None:
            continue
        free = [t for t in targets if t not in pins]
        assert isinstance(stmt, ast.Assign | ast.AnnAssign)  # simple_targets' rule
        assert stmt.value is not None
        value = stmt.value
        try:
            result = evaluate(value, env)
        except (Unknown, ArithmeticError, TypeError, ValueError):
            for name in free:
                env.pop(name, None)
            continue
        env.update(dict.fromkeys(free, result))
    blocked = complex_bindings(tree)
    order = [name for stmt in tree.body for name in simple_targets(stmt) or []]  # as the module reads
    ranked = sorted(env, key=lambda name: order.index(name) if name in order else len(order))
    return {name: env[name] for name in ranked if name not in blocked}


def pinned_tree(tree: ast.Module, pins: dict[str, SizeValue]) -> ast.Module:
    """The module with its assignments to pinned names removed (a chained one keeps its other names)."""
    body: list[ast.stmt] = []
    for stmt in tree.body:
        targets = simple_targets(stmt)
        if targets is None or not set(targets) & set(pins):
            body.append(stmt)
        elif isinstance(stmt, ast.Assign) and (kept := [t for t in stmt.targets if t.id not in pins]):  # type: ignore[attr-defined]
            body.append(ast.copy_location(ast.Assign(targets=kept, value=stmt.value), stmt))
        else:
            body.append(ast.copy_location(ast.Pass(), stmt))
    return ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))


def refusal(tree: ast.Module, pins: dict[str, SizeValue]) -> str | None:
    """Why these pins cannot be applied to this module, or None."""
    blocked = complex_bindings(tree)
    bad = [f"{name} ({blocked[name]})" for name in pins if name in blocked]
    if bad:
        return (
            f"cannot override {', '.join(bad)}: assigned other than by `NAME = value`, so what derives from "
            "it cannot be recomputed"
        )
    unknown = sorted(set(pins) - assigned_names(tree))
    if unknown:
        return f"{unknown} are not module constants of the reference (known: {sorted(assigned_names(tree))})"
    return None


def execute(source: str, filename: str, pins: dict[str, SizeValue], namespace: dict[str, Any]) -> None:
    """Run the module's source in `namespace` with `pins` in place of its own assignments to them."""
    tree = pysource.parse_module(source, filename)
    if why := refusal(tree, pins):
        raise ValueError(why)
    namespace.update(pins)
    exec(compile(pinned_tree(tree, pins), filename, "exec"), namespace)


def as_size_value(value: object) -> SizeValue:
    """A size as it came through JSON (a tuple arrives as a list)."""
    if isinstance(value, list):
        value = tuple(value)
    if not is_size_value(value):
        raise ValueError(f"a size is an int, a float or a tuple of them, got {value!r}")
    return value  # type: ignore[return-value]  # checked above


def parse_size(text: str) -> tuple[str, SizeValue]:
    """`NAME=VALUE` from the command line: `batch_size=16`, `scale=0.5`, `bias_shape=(16,1,1)`."""
    name, sep, raw = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    try:
        value = pysource.literal(raw.strip())
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"{name}: {raw!r} is not a number or a tuple of numbers") from exc
    try:
        return name.strip(), as_size_value(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc


FLOOR_OPERATORS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Pow: lambda a, b: a**b,
}


def size_expression(expr: str, sizes: Mapping[str, SizeValue]) -> float:
    """An arithmetic expression of a shape's sizes (`2*batch_size*seq_len`): numbers, size names, + - * / //
    ** and parentheses, nothing else (a spec is data, never code)."""

    def value(node: ast.AST) -> float:
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
        ):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in sizes:
                raise ValueError(f"unknown size {node.id!r} (known: {', '.join(sorted(sizes))})")
            size = sizes[node.id]
            if not isinstance(size, int | float):
                raise ValueError(f"size {node.id!r} is {size!r}, not a number")
            return float(size)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in FLOOR_OPERATORS:
            return float(FLOOR_OPERATORS[type(node.op)](value(node.left), value(node.right)))
        raise ValueError(f"not allowed in a size expression: {ast.unparse(node)!r}")

    try:
        tree = pysource.parse_expression(expr)
    except SyntaxError as exc:
        raise ValueError(f"does not parse: {exc.msg}") from exc
    return value(tree.body)
