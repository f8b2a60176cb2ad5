"""kb_mini, a small model: a 2-layer MLP, fc2(relu(fc1(x))), x [batch_size, in_features]."""

import torch
import torch.nn as nn

batch_size = 32
in_features = 128
hidden = 256
out_features = 64


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, in_features)]


def get_init_inputs() -> list:
    return [in_features, hidden, out_features]
