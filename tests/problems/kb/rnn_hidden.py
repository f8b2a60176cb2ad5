"""KernelBench level 3's RNN shape: the initial hidden state is a plain tensor attribute drawn at random in
the constructor (`self.h0`), neither a parameter nor a buffer, so load_state_dict does not carry it
(tests/test_kernelbench_files.py)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super(Model, self).__init__()
        self.h0 = torch.randn((batch_size, hidden_size))
        self.wx = nn.Linear(input_size, hidden_size)
        self.wh = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        h = self.h0
        for t in range(x.shape[1]):
            h = torch.relu(self.wx(x[:, t]) + self.wh(h))
        return h


batch_size = 4
seq_len = 5
input_size = 8
hidden_size = 16


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
