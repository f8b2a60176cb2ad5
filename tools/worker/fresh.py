"""Fresh input contents for every timed call, made the same way in the candidate's process and the truth
worker: each floating-point input of a shape's base set rolled (flattened, cyclically) by an offset the
judge draws in secret and sends just before the call. The values keep the base set's distribution (a
cyclic shift moves them, it changes none), every call's contents are new, and the offsets whose outputs
are checked against float64 truth look like any other (tools/judge/_calls.py)."""

from __future__ import annotations

from typing import Any

import torch

# Each input gets its own shift, derived from the call's offset (an odd multiplier spreads them).
_SPREAD = 0x9E3779B97F4A7C15


def _shifted(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 1


def _shift(numel: int, index: int, offset: int) -> int:
    return ((offset + index * _SPREAD) % (1 << 62)) % numel


def shifted_sizes(base: list[Any]) -> list[tuple[int, int]]:
    """(position, numel) of each input a call's offset shifts: all the judge needs to tell two offsets'
    contents apart (tools/judge/_calls.py) without the inputs."""
    return [(index, value.numel()) for index, value in enumerate(base) if _shifted(value)]


def shifts_of(sizes: list[tuple[int, int]], offset: int) -> tuple[int, ...]:
    """Each shifted input's shift: two offsets with the same shifts give the same contents (on small
    inputs two random offsets can: a shift is the offset modulo the input's size)."""
    return tuple(_shift(numel, index, offset) for index, numel in sizes)


def shifts(base: list[Any], offset: int) -> tuple[int, ...]:
    return shifts_of(shifted_sizes(base), offset)


def rolled(base: list[Any], offset: int) -> list[Any]:
    """The call's inputs: new tensors (fresh storage) whose contents are the base set's, shifted."""
    out: list[Any] = []
    for index, value in enumerate(base):
        if _shifted(value):
            out.append(
                torch.roll(value.reshape(-1), _shift(value.numel(), index, offset)).reshape(value.shape)
            )
        elif isinstance(value, torch.Tensor):
            out.append(value.clone())
        else:
            out.append(value)
    return out
