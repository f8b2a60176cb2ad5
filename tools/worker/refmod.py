"""Building a case from the reference source: sizes applied, weights initialised, inputs drawn.

Used only in the truth worker: the reference module never enters a candidate's process.
"""

from __future__ import annotations

import hashlib
import types
from typing import Any

import torch

from tools import kbfile
from tools.kbfile import SizeValue
from tools.problem import INPUT_SCALE, Case, ConstantInit, NormalInit, ParamInit, UniformInit


def load_reference(source: str, pins: dict[str, SizeValue]) -> types.ModuleType:
    """A fresh module from the reference text with `pins` in place of its own assignments to them, so
    that the constants derived from them are recomputed (tools/kbfile.py)."""
    module = types.ModuleType("reference")
    module.__file__ = "reference.py"
    kbfile.execute(source, "reference.py", pins, module.__dict__)
    return module


def tensor_attributes(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Tensors the model keeps as plain attributes, neither parameters nor buffers (KernelBench level 3's
    `self.h0`): the state a state dict does not carry. Dotted names for submodules'."""
    found: dict[str, torch.Tensor] = {}
    for prefix, sub in model.named_modules():
        for name, value in vars(sub).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                found[f"{prefix}.{name}" if prefix else name] = value
    return found


def set_tensor_attribute(model: torch.nn.Module, dotted: str, value: torch.Tensor) -> None:
    owner_path, _, name = dotted.rpartition(".")
    setattr(model.get_submodule(owner_path) if owner_path else model, name, value)


def derive_seed(master: int, label: str) -> int:
    """Independent per-case seeds from one per-evaluation master seed."""
    digest = hashlib.sha256(f"{master}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 62) - 1)


def apply_init(model: torch.nn.Module, init: dict[str, ParamInit], generator: torch.Generator) -> None:
    params = dict(model.named_parameters())
    for name, rule in init.items():
        if name not in params:
            raise KeyError(f"init: the reference has no parameter {name!r} (has {sorted(params)})")
        p = params[name]
        with torch.no_grad():
            if isinstance(rule, ConstantInit):
                p.fill_(rule.value)
            elif isinstance(rule, UniformInit):
                p.copy_(
                    torch.rand(p.shape, generator=generator, dtype=p.dtype) * (rule.high - rule.low)
                    + rule.low
                )
            elif isinstance(rule, NormalInit):
                p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * rule.std + rule.mean)


def varied(t: torch.Tensor, how: str) -> torch.Tensor:
    """One input as a case asks for it (tools/problem.py `Case.inputs`): floating tensors negated or scaled."""
    if how == "as_drawn" or not t.is_floating_point():
        return t.contiguous()
    return (-t if how == "negated" else t * INPUT_SCALE).contiguous()


def build_case(source: str, case: Case, pins: dict[str, SizeValue], seed: int) -> dict[str, Any]:
    """Init args, fp32 CPU state dict, tensor attributes and fp32 CPU inputs for one case, from `seed`."""
    module = load_reference(source, pins)
    torch.manual_seed(seed)
    init_inputs = list(module.get_init_inputs())
    model = module.Model(*init_inputs)
    apply_init(model, case.init, torch.Generator().manual_seed(seed ^ 0x5EED))
    inputs = [varied(t, case.inputs) if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
    return {
        "init_inputs": init_inputs,
        "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "attributes": {k: v.detach().clone() for k, v in tensor_attributes(model).items()},
        "inputs": inputs,
        "module": module,
        "model": model,
    }


def to_device(values: list[Any], device: str, dtype: torch.dtype | None = None) -> list[Any]:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if dtype is not None and v.is_floating_point():
                v = v.to(dtype)
        out.append(v)
    return out
