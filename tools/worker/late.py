"""The output as it was when the call ended, against the output when the harness reads it (GUIDE §2 rows 8,
12 and 25).

A timed call's output is read (fingerprinted, kept for the float64 re-check) only after the judge's answer to
the next `next_call`: a pipe round trip after the call's device-wide synchronize. Work started after that
synchronize is on no clock, yet can finish before the read: a native thread that launches once the device is
idle, or a second CUDA context or process, which the synchronize does not wait for. So right after each timed
call (on CUDA: after its end event is recorded, before the host waits for it, so on the call's own stream and
ahead of anything launched later) the values at SAMPLES positions drawn afresh are copied; when the output is
read they must be unchanged, NaN for NaN. An output finished by then holds still; one written afterwards does
not. A call whose output changed counts as a late write, and the judge treats the shape's clock as not
telling the truth (tools/judge/_device_guards.py).
"""

from __future__ import annotations

import secrets

import torch

SAMPLES = 256


class LateWrites:
    """Snapshots of timed outputs at positions drawn from a secret seed, and how many changed afterwards."""

    def __init__(self) -> None:
        self._seed = secrets.randbits(63)
        self._generators: dict[torch.device, torch.Generator] = {}
        self._snap: tuple[torch.Tensor, torch.Tensor] | None = None
        self.late = 0

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            gen = torch.Generator(device=device)
            gen.manual_seed(self._seed)
            self._generators[device] = gen
        return self._generators[device]

    def snapshot(self, out: object) -> None:
        """The values at fresh positions of `out` now (queued on the current stream; no host wait)."""
        self._snap = None
        if type(out) is not torch.Tensor or out.numel() == 0 or out.is_meta:
            return
        flat = out.detach().reshape(-1)
        where = torch.randint(
            flat.numel(), (SAMPLES,), device=flat.device, generator=self._generator(flat.device)
        )
        self._snap = (where, flat[where])

    def check(self, out: object) -> None:
        """Whether `out` still holds its snapshot's values; a change counts one late write."""
        snap, self._snap = self._snap, None
        if snap is None or type(out) is not torch.Tensor:
            return
        where, before = snap
        now = out.detach().reshape(-1)[where]
        same = now == before
        if now.is_floating_point():
            same |= now.isnan() & before.isnan()
        self.late += not bool(same.all())
