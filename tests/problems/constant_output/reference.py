"""A degenerate reference (tests/test_constant_output.py): the selective scan, then a softmax over a
dimension of size 1, so every output element is 1.0 whatever the inputs (KernelBench has such problems).
From problems/selective_scan/reference.py.

Module-level constants size the problem; the harness overrides them per correctness case and per
timing shape, then calls `get_init_inputs()` and `get_inputs()`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
seq_len = 1024
d_model = 1024
d_state = 16


class Model(nn.Module):
    def __init__(self, d_model: int, d_state: int):
        super().__init__()
        self.d_model, self.d_state = d_model, d_state
        self.A_log = nn.Parameter(torch.randn(d_model, d_state))
        self.proj_B = nn.Linear(d_model, d_state, bias=False)
        self.proj_C = nn.Linear(d_model, d_state, bias=False)
        self.proj_delta = nn.Linear(d_model, d_model, bias=True)
        self.D = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, d_model = x.shape
        A = -torch.exp(self.A_log)  # [D, N]
        delta = F.softplus(self.proj_delta(x))  # [B, L, D]
        B = self.proj_B(x)  # [B, L, N]
        C = self.proj_C(x)  # [B, L, N]
        dA = torch.exp(delta.unsqueeze(-1) * A)  # [B, L, D, N]  (1 GiB at shape 1)
        dB = delta.unsqueeze(-1) * B.unsqueeze(2)  # [B, L, D, N]
        h = torch.zeros(batch, d_model, self.d_state, device=x.device, dtype=x.dtype)
        ys = []
        for t in range(seq_len):
            h = dA[:, t] * h + dB[:, t] * x[:, t, :, None]
            ys.append((h * C[:, t, None, :]).sum(-1))
        y = torch.stack(ys, dim=1) + x * self.D
        return torch.softmax(y[..., :1], dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs() -> list[int]:
    return [d_model, d_state]
