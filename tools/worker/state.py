"""Module state a state dict does not carry: tensors a reference keeps as plain attributes (KernelBench
level 3's `self.h0`, drawn at random in its constructor), carried from `Model` into `ModelNew`."""

from __future__ import annotations

import torch

SHAPE_HINT = (
    "; a size the evaluation overrides (--size) is not changed in ModelNew's own file: read it from the "
    "constructor's arguments or the inputs, not from a module constant of your own"
)


def carry_attributes(model: torch.nn.Module, attributes: dict[str, torch.Tensor]) -> str | None:
    """The reference's values replace ModelNew's own tensors of the same dotted names, so both start from
    the same state. Where ModelNew has no such tensor: why (the evaluation stops with that error, naming
    the attribute), never a verdict reached from other state."""
    for dotted, value in attributes.items():
        owner_path, _, name = dotted.rpartition(".")
        try:
            owner: torch.nn.Module | None = model.get_submodule(owner_path) if owner_path else model
        except AttributeError:
            owner = None
        mine = vars(owner).get(name) if owner is not None else None
        if not isinstance(mine, torch.Tensor) or mine.shape != value.shape:
            found = (
                "nothing" if mine is None else f"{type(mine).__name__} {tuple(getattr(mine, 'shape', ()))}"
            )
            return (
                f"the reference's Model keeps the tensor attribute `self.{dotted}` {tuple(value.shape)} (not a "
                "parameter or buffer, so load_state_dict does not carry it); ModelNew must keep "
                f"`self.{dotted}` as a plain tensor of that shape to receive the reference's value (found: {found})"
                + (SHAPE_HINT if mine is not None else "")
            )
        setattr(owner, name, value.to(mine.device))
    return None
