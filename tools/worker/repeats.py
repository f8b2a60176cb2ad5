"""The fingerprints of timed outputs: an output equal to an earlier call's, where the inputs were new, was
handed back, not computed (tools/judge/_verdicts.py flags it where the true outputs vary)."""

from __future__ import annotations

import os
import random
from typing import Any

import torch

# Where each timed output is fingerprinted: drawn from the OS before the candidate exists (the zygote
# reseeds it in every child it forks).
PROBE_ORDER = random.Random(int.from_bytes(os.urandom(16), "little"))


class Repeats:
    """Every timed call's inputs are new (tools/worker/fresh.py), so an output equal to an earlier call's
    was not computed from this call's inputs (a cache by pointer, id, shape or a content sample handed it
    back). Each output is fingerprinted outside the clock: its sum weighted by secret random weights, one
    per position, and a few values at positions drawn in secret; the judge's float64 re-check of secretly
    chosen calls covers what a fingerprint cannot. The weights matter: a roll by a multiple of one
    sample's size reorders a batch, and the honest output is then the same values reordered (a plain sum
    and a ReLU's zeros at the probes matched on a small convolution: 3 of 182 honest calls flagged)."""

    PROBES = 8

    def __init__(self) -> None:
        self.seen: dict[tuple[float, ...], tuple[int, ...]] = {}  # fingerprint -> the contents it came from
        self.checked = 0
        self.repeated = 0
        self.nonfinite = 0  # outputs holding NaN or inf (the poison of an unwritten output is NaN)
        self._drawn: tuple[torch.Tensor, torch.Tensor] | None = None  # probed positions, a weight a position

    def _draw(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The probed positions and the weights: drawn once a shape, the same for every call."""
        if self._drawn is None or self._drawn[1].shape != flat.shape or self._drawn[1].device != flat.device:
            positions = [PROBE_ORDER.randrange(flat.numel()) for _ in range(self.PROBES)]
            seeded = torch.Generator(device=flat.device)
            seeded.manual_seed(PROBE_ORDER.getrandbits(63))
            weights = torch.rand(flat.numel(), generator=seeded, device=flat.device, dtype=torch.float32)
            # In [0.5, 1.5): no weight rounds to zero in a half-precision output.
            self._drawn = (torch.tensor(positions, device=flat.device), (weights + 0.5).to(flat.dtype))
        return self._drawn

    def check(self, out: Any, contents: tuple[int, ...]) -> None:
        """`contents`: what identifies the call's inputs (their shifts); the same contents may repeat."""
        if not isinstance(out, torch.Tensor) or out.numel() == 0:
            return  # check_output reports it
        if not out.is_floating_point():
            return  # integer outputs (argmax, labels) may repeat honestly; the checked calls cover them
        flat = out.detach().reshape(-1)
        picks, weights = self._draw(flat)
        # One copy to the host for all of it (three synchronizes cost a 0.5 ms kernel's loop 1.4 ms a call).
        *probe_list, finite = torch.cat(
            [(flat * weights).sum(dtype=torch.float64).reshape(1), flat[picks].double(),
             torch.isfinite(flat).all().double().reshape(1)]
        ).tolist()  # fmt: skip
        probe = tuple(probe_list)
        self.checked += 1
        self.repeated += probe in self.seen and self.seen[probe] != contents
        self.nonfinite += not finite
        self.seen.setdefault(probe, contents)
