"""Candidates for tests/problems/elementwise_*.yaml: one C++ extension (built once, shared), and ModelNew
choosing what to compute with it."""

from __future__ import annotations

_MODULE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor apply(torch::Tensor x, int64_t op) {
  auto c = x.contiguous();
  auto y = torch::empty_like(c);
  const float* xp = c.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    const float v = xp[i];
    yp[i] = op == 0 ? v : op == 1 ? (v > 0.f ? v : 0.f) : std::log(v + 0.5f);
  }
  return y;
}
"""

_ext = load_inline(name="elementwise_ops", cpp_sources=CPP, functions=["apply"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.apply(x, OP)
'''


def candidate(op: str) -> str:
    """`identity` (returns x: fitted to inputs that are never negative), `relu` or `log`."""
    return _MODULE + f"\n\nOP = {['identity', 'relu', 'log'].index(op)}\n"
