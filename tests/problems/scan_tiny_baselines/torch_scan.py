"""A library composition of the selective scan in torch ops (tests/test_baselines.py): F.linear projections,
then the recurrence one timestep at a time on a [B, D, N] state, never the [B, L, D, N] tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, d_model: int, d_state: int) -> None:
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(d_model, d_state))
        self.proj_B = nn.Linear(d_model, d_state, bias=False)
        self.proj_C = nn.Linear(d_model, d_state, bias=False)
        self.proj_delta = nn.Linear(d_model, d_model, bias=True)
        self.D = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        A = -torch.exp(self.A_log)
        delta = F.softplus(self.proj_delta(x))
        B, C = self.proj_B(x), self.proj_C(x)
        h = x.new_zeros(x.shape[0], x.shape[2], A.shape[1])
        ys = []
        for t in range(x.shape[1]):
            d = delta[:, t, :, None]
            h = torch.exp(d * A) * h + d * B[:, t, None, :] * x[:, t, :, None]
            ys.append((h * C[:, t, None, :]).sum(-1))
        return torch.stack(ys, dim=1) + x * self.D
