"""kb_mini, GEMM with an epilogue: relu(x @ W^T + b), x [batch_size, in_features]."""

import torch
import torch.nn as nn

batch_size = 64
in_features = 128
out_features = 96


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, in_features)]


def get_init_inputs() -> list:
    return [in_features, out_features]
