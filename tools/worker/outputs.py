"""The checked calls' outputs on their way from the candidate's worker to the float64 re-check.

Each kept output's raw bytes go to a file of its own (tmpfs in the job's folder), through pinned host memory:
the device's part is one fast copy, the file's write is host work. `torch.save` of the same outputs cost the
H200 three passes over each (a pageable copy to the host at 1.3 GB/s, the pickle's write, the reader's
load): ~0.15 s for a 64 MB output, ~1.4 s an evaluation of the selective scan's nine
(bench/timing_breakdown.py). An index (JSON, at the shape's `out_path`) names each slot's dtype and shape.

The reader (the truth server, or the parent where the truth came to it) trusts neither: the candidate's
process wrote both. It reads only files it names itself (`<out_path>.<slot>`, no links, regular files of
exactly the size the index implies, read with read(2), never mapped: a file cut short while mapped would
kill the reader), and only dtypes torch has, into host memory (`load_kept`: pinned, in one buffer a
long-lived reader reuses, `Staging`) before any of it goes to the device."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Protocol

import torch

INDEX_MAX_BYTES = 1 << 20


class UnreadableOutputs(Exception):
    """The index or a kept output is not what the writer is bound to leave: the candidate's fault."""


def slot_path(out_path: str | Path, slot: int) -> Path:
    return Path(f"{out_path}.{slot}")


class Turn(Protocol):
    """The worker's turn on the device (tools/worker/device_turn.py): given back, asked for again."""

    def release(self) -> None: ...

    def want(self) -> None: ...


class KeptWriter:
    """The candidate worker's side: `keep(slot, out)` as each checked call settles, `close()` at the end.

    A kept output is copied on its own device at once (a 64 MB output: ~30 us on the H200) and written to its
    file only in `close()`, after the timed loop: the file's write (~30 ms a 64 MB output, nine an
    evaluation) no longer runs between timed calls, where the evaluation holds the device alone. The copy
    is the output as it was when its call settled, in storage no later call can be handed. Past
    `HOLD_BYTES` held, a kept output is written at once."""

    HOLD_BYTES = 2 << 30

    def __init__(self, out_path: str | Path, staging: Staging | None = None) -> None:
        self.out_path = Path(out_path)
        self.index: dict[str, dict[str, Any]] = {}
        self.held: dict[int, torch.Tensor] = {}
        self.staging = staging or WRITER_STAGING

    def keep(self, slot: int, out: torch.Tensor) -> None:
        self.held.pop(slot, None)
        # its own storage, in one pass
        flat = out.detach().clone(memory_format=torch.contiguous_format).reshape(-1)
        self.index[str(slot)] = {"dtype": str(out.dtype).removeprefix("torch."), "shape": list(out.shape)}
        if sum(_nbytes(t) for t in self.held.values()) + _nbytes(flat) > self.HOLD_BYTES:
            _write_host(slot_path(self.out_path, slot), flat.view(torch.uint8).cpu())
        else:
            slot_path(self.out_path, slot).unlink(missing_ok=True)  # a slot kept again: the old file goes
            self.held[slot] = flat

    def close(self, turn: Turn | None = None) -> None:
        """The held outputs to their files, then the index; `turn`, held as it is called, is given back once
        the device's part is done. That part is one copy of every held output into pinned host memory (three
        100 MB outputs: ~15 ms at the link's speed); their files are written after it, on the host alone.
        Copied straight into the files, the outputs ran at ~1.3 GB/s and held the device shared ~0.2-0.3 s
        a shape (H200): ~0.7 s an evaluation in which no other trajectory's timed loop could start. Pinning
        the buffer is host work too: where it must grow, the turn is given back meanwhile."""
        held = sorted(self.held.items())
        if held and held[0][1].is_cuda:
            staged = self._staged(held, turn)
        else:
            staged = [(slot, flat.view(torch.uint8)) for slot, flat in held]
        self.held.clear()
        del held
        if turn is not None:
            turn.release()
        for slot, raw in staged:
            _write_host(slot_path(self.out_path, slot), raw)
        self.out_path.write_text(json.dumps({"slots": self.index}))

    def _staged(
        self, held: list[tuple[int, torch.Tensor]], turn: Turn | None
    ) -> list[tuple[int, torch.Tensor]]:
        """The held device outputs' bytes, copied into one pinned buffer (views of it, in slot order)."""
        spans = _layout([_nbytes(flat) for _, flat in held])
        total = spans[-1][1] if spans else 0
        grow = not self.staging.fits(total)
        if grow and turn is not None:
            turn.release()
        buffer = self.staging.take(total)
        if grow and turn is not None:
            turn.want()
        staged = []
        for (slot, flat), (begin, end) in zip(held, spans, strict=True):
            raw = buffer[begin:end]
            raw.copy_(flat.view(torch.uint8))  # synchronous: the bytes are on the host when it returns
            staged.append((slot, raw))
        return staged


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


ALIGN = 64  # each output's bytes in a shared buffer start here: any dtype's view of them is aligned


def staging_bytes(sizes: list[int]) -> int:
    """The pinned buffer one shape's kept outputs of `sizes` bytes take (`KeptWriter.close`)."""
    spans = _layout(sizes)
    return spans[-1][1] if spans else 0


def _layout(sizes: list[int]) -> list[tuple[int, int]]:
    """(begin, end) of each of `sizes` bytes in one buffer, in order, each begin aligned."""
    spans, at = [], 0
    for n in sizes:
        spans.append((at, at + n))
        at += -(-n // ALIGN) * ALIGN
    return spans


def _write_host(path: Path, raw: torch.Tensor) -> None:
    """Host bytes into a new file at `path`, with write(2): tmpfs takes them ~2-3x faster than through a
    mapping's page faults."""
    path.unlink(missing_ok=True)  # a slot kept again (a re-measurement) starts a new file
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = raw.numpy().data.cast("B") if raw.numel() else memoryview(b"")
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])
    finally:
        os.close(fd)


class Staging:
    """One pinned host buffer, grown as needed and reused: a read into it and a copy to the device cost a
    long-lived reader no page faults (a fresh 64 MB of host memory costs ~30 ms to touch or pin)."""

    def __init__(self) -> None:
        self.buffer: torch.Tensor | None = None

    def fits(self, nbytes: int) -> bool:
        return self.buffer is not None and self.buffer.numel() >= nbytes

    def take(self, nbytes: int) -> torch.Tensor:
        """The buffer's first `nbytes` (a view: the next `take` hands out the same bytes)."""
        if not self.fits(nbytes):
            self.buffer = None
            self.buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        assert self.buffer is not None
        return self.buffer[:nbytes]


WRITER_STAGING = Staging()  # the candidate worker's: one per process, its shapes' outputs in turn


# torch's dtypes by name, read from its namespace as it is (a getattr by a name the candidate wrote could
# import one of torch's lazy submodules in the reader)
DTYPES = {name: value for name, value in vars(torch).items() if isinstance(value, torch.dtype)}


def _dtype(name: object) -> torch.dtype:
    value = DTYPES.get(name) if isinstance(name, str) else None
    if value is None:
        raise UnreadableOutputs(f"unknown dtype {str(name)[:40]!r}")
    return value


def _shape(value: object) -> list[int]:
    if (
        not isinstance(value, list)
        or not all(isinstance(d, int) and d >= 0 for d in value)
        or len(value) > 16
    ):
        raise UnreadableOutputs("a shape that is not a list of sizes")
    return value


def _open_regular(path: Path) -> int:
    """A read-only descriptor on a regular file at `path` itself (never a link, a FIFO or a device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise UnreadableOutputs(f"{path.name}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnreadableOutputs(f"{path.name} is not a regular file")
    return fd


def _read_exactly(fd: int, into: torch.Tensor) -> None:
    view = into.numpy().data.cast("B")
    done = 0
    while done < len(view):
        got = os.readv(fd, [view[done:]])
        if got == 0:
            raise UnreadableOutputs("a kept output is shorter than its index says")
        done += got


def _read_index(out_path: Path) -> dict[str, Any]:
    fd = _open_regular(out_path)
    try:
        raw = os.read(fd, INDEX_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > INDEX_MAX_BYTES:
        raise UnreadableOutputs("the index is too large")
    try:
        index = json.loads(raw)
    except ValueError as exc:
        raise UnreadableOutputs(f"the index is not JSON: {exc}") from exc
    slots = index.get("slots") if isinstance(index, dict) else None
    if not isinstance(slots, dict):
        raise UnreadableOutputs("the index names no slots")
    return slots


def load_kept(out_path: str | Path, pinned: bool, staging: Staging | None = None) -> dict[int, torch.Tensor]:
    """Slot -> output, on the host, as the writer kept them: host work alone, no device held meanwhile.
    `pinned`: all of them in one pinned buffer (`staging`'s, reused: copy them to the device before the
    next load), so that their copies to the device run at the link's speed. Every file's size is checked
    before any memory is taken for it: the index alone never sizes an allocation. Raises UnreadableOutputs."""
    out_path = Path(out_path)
    staging = staging or Staging()
    slots = []
    for key, entry in _read_index(out_path).items():
        if not (key.isascii() and key.isdigit()) or not isinstance(entry, dict):  # "²" is a digit to isdigit
            raise UnreadableOutputs(f"a slot named {key[:20]!r}")
        dtype, shape = _dtype(entry.get("dtype")), _shape(entry.get("shape"))
        slots.append((int(key), dtype, shape, math.prod(shape) * dtype.itemsize))
    for slot, _, _, nbytes in slots:
        os.close(_open_sized(out_path, slot, nbytes))
    spans = _layout([nbytes for *_, nbytes in slots])
    buffer = staging.take(spans[-1][1]) if pinned and spans else None
    outs: dict[int, torch.Tensor] = {}
    for (slot, dtype, shape, nbytes), (begin, end) in zip(slots, spans, strict=True):
        fd = _open_sized(out_path, slot, nbytes)  # again: the file read is the file whose size was checked
        try:
            raw = buffer[begin:end] if buffer is not None else torch.empty(nbytes, dtype=torch.uint8)
            if nbytes:
                _read_exactly(fd, raw)
        finally:
            os.close(fd)
        outs[slot] = raw.view(dtype).reshape(shape)
    return outs


def _open_sized(out_path: Path, slot: int, nbytes: int) -> int:
    """A read-only descriptor on slot `slot`'s file, which holds exactly `nbytes` bytes."""
    fd = _open_regular(slot_path(out_path, slot))
    size = os.fstat(fd).st_size
    if size != nbytes:
        os.close(fd)
        raise UnreadableOutputs(f"slot {slot}: {size} bytes where its index implies {nbytes}")
    return fd


def read_kept(out_path: str | Path, device: str, staging: Staging | None = None) -> dict[int, torch.Tensor]:
    """Slot -> output, on `device`, as the writer kept them. Raises UnreadableOutputs."""
    host = load_kept(out_path, device != "cpu", staging)
    return {slot: out.to(device) for slot, out in host.items()}
