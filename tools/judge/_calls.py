"""The judge's half of a shape's timing loop: every call's input offset, and which calls are checked.

Every timed call gets new input contents (tools/worker/fresh.py: the base set rolled by an offset drawn
here in secret, sent just before the call), so nothing keyed on pointers, shapes or contents ever hits. Two
random offsets can shift every input alike on small inputs (a shift is the offset modulo the input's size):
an offset is drawn again until its shifts differ from every earlier call's of the shape, checked ones
included, while the inputs have that many distinct shifts to give.
A few calls, the checked ones, get offsets whose float64 truth was made ahead; their offsets look like any
other, and the worker learns that a call's output is kept only after that call has returned.

Where the checks go (the loop's length is the candidate's to influence, through its own spread):
- half of them (rounded up) at distinct positions drawn among the first `min_iters` timed calls, which
  always run;
- the rest after the loop's own rule proposes to stop at call n: the loop is extended by at least that
  many calls, and by enough that the calls between `min_iters` and n are never a majority of the loop,
  so a candidate that skips work once past the first checks cannot move the median; the remaining checks
  are placed at random in the extension.
"""

from __future__ import annotations

import math
import random
import secrets
from dataclasses import dataclass, field

from tools.worker.fresh import shifts_of

_RNG = random.SystemRandom()
DRAWS = 64  # tries for an offset whose contents no earlier call had, before a repeat is accepted


@dataclass
class CallSchedule:
    offsets: list[int]  # the checked calls' offsets, by slot; their truth was made ahead
    min_iters: int
    shifted: list[tuple[int, int]] = field(default_factory=list)  # (position, numel) of the shifted inputs
    early: dict[int, int] = field(default_factory=dict)  # timed-call index -> slot
    late: dict[int, int] = field(default_factory=dict)
    stop_at: int | None = None
    n_early: int = 0
    kept: dict[int, int] = field(default_factory=dict)  # slot -> the timed call it was kept from
    _keep_next: int | None = None  # the slot the call now running goes to (said in the next answer)
    _seen: set[tuple[int, ...]] = field(default_factory=set)  # the shifts calls of this shape were given

    def __post_init__(self) -> None:
        self.n_early = min(math.ceil(len(self.offsets) / 2), self.min_iters)
        positions = _RNG.sample(range(self.min_iters), self.n_early)
        self.early = dict(zip(positions, range(self.n_early), strict=True))
        self._seen = {shifts_of(self.shifted, offset) for offset in self.offsets}

    def fresh_offset(self) -> int:
        """A secret offset whose contents no earlier call of the shape had (while there are such left)."""
        if not self.shifted:  # nothing is shifted: every offset gives the same contents
            return secrets.randbits(62)
        for _ in range(DRAWS):
            offset = secrets.randbits(62)
            contents = shifts_of(self.shifted, offset)
            if contents not in self._seen:
                break
        self._seen.add(contents)
        return offset

    def answer(self, index: int, wants_stop: bool) -> str:
        """The line for the worker's `next_call`: `go OFFSET SLOT` or `stop - SLOT`."""
        keep, self._keep_next = self._keep_next, None
        said = "-" if keep is None else str(keep)
        if index >= 0 and wants_stop and self.stop_at is None:
            self._extend(index)
        if self.stop_at is not None and index >= self.stop_at:
            return f"stop - {said}"
        slot = (self.late if self.stop_at is not None else self.early).get(index) if index >= 0 else None
        if slot is None:
            return f"go {self.fresh_offset()} {said}"
        self._keep_next = slot
        self.kept[slot] = index
        return f"go {self.offsets[slot]} {said}"

    def _extend(self, n: int) -> None:
        """The loop's rule proposes to stop before call n: place the checks not yet made after it."""
        unplaced = [slot for pos, slot in self.early.items() if pos >= n]
        self.early = {pos: slot for pos, slot in self.early.items() if pos < n}
        unplaced += range(self.n_early, len(self.offsets))
        length = max(len(unplaced), n - 2 * self.min_iters + 1 + len(unplaced), 0)
        self.late = dict(zip(_RNG.sample(range(n, n + length), len(unplaced)), unplaced, strict=True))
        self.stop_at = n + length

    def checked_slots(self) -> list[int]:
        """The slots whose outputs the worker kept, in the order it saves them."""
        return sorted(self.kept)
