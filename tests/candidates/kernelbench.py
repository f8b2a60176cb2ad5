"""Candidates for the KernelBench-format fixtures (tests/problems/kb): ModelNew classes around the one C++
extension of tests/candidates/elementwise.py (same source, so one build serves them all)."""

from __future__ import annotations

from tests.candidates.elementwise import _MODULE

_HEADER = _MODULE.split("class ModelNew")[0]

RELU = {
    "honest": "return _ext.apply(x, 1)",
    # `return x`, through the extension: right on torch.rand's inputs, wrong on negated ones.
    "identity": "return _ext.apply(x, 0)",
    # The library does the work; the extension is called on one element so that "an own kernel ran".
    "library": "_ext.apply(x[:1, :1], 0)\n        return torch.relu(x)",
}


def relu(kind: str) -> str:
    body = RELU[kind]
    return _HEADER + f"class ModelNew(nn.Module):\n    def forward(self, x):\n        {body}\n"


CONV = (
    _HEADER
    + '''
class ModelNew(nn.Module):
    """The library's convolution (a GEMM: allowed), the bias and ReLU in the extension."""

    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return _ext.apply(torch.add(self.conv(x), self.bias), 1)
'''
)


def rnn(hidden_name: str) -> str:
    """An honest RNN (GEMMs from the library, ReLU in the extension) keeping its initial state, drawn at
    random as the reference's is, under `hidden_name` (the reference's is `h0`)."""
    return (
        _HEADER
        + f"""
class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.{hidden_name} = torch.randn((4, hidden_size))
        self.wx = nn.Linear(input_size, hidden_size)
        self.wh = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x):
        h = self.{hidden_name}.to(x.device)
        for t in range(x.shape[1]):
            h = _ext.apply(torch.addmm(self.wx(x[:, t]), h, self.wh.weight.t()), 1)
        return h
"""
    )
