"""ReLU of inputs drawn by torch.rand (never negative), as KernelBench draws them: `return x` passes
every case drawn this way (tests/test_input_variants.py)."""

import torch
import torch.nn as nn

batch_size = 4
dim = 256


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.rand(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
