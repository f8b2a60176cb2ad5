"""log of inputs drawn by torch.rand: negated inputs give NaN, so that input variant is not applicable
(tests/test_input_variants.py)."""

import torch
import torch.nn as nn

batch_size = 4
dim = 256


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x + 0.5)


def get_inputs() -> list[torch.Tensor]:
    return [torch.rand(batch_size, dim)]


def get_init_inputs() -> list[int]:
    return []
