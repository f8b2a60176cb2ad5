"""kb_mini, convolution with an activation: relu(conv2d(x)), a kernel_size x kernel_size convolution
with stride 1 and "same" padding (kernel_size // 2), x [batch_size, in_channels, height, width]."""

import torch
import torch.nn as nn

batch_size = 2
in_channels = 4
out_channels = 8
height = 16
width = 16
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs() -> list:
    return [in_channels, out_channels, kernel_size]
