"""KernelBench level 1's ReLU as it ships: sizes that need 6.4 GB per input, inputs from torch.rand (never
negative), so `return x` passes every case drawn by get_inputs() (tests/test_kernelbench_files.py)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4096
dim = 393216


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed
