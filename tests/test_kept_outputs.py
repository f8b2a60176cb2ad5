"""The checked calls' outputs from the candidate's worker to the re-check (tools/worker/outputs.py): kept
as written, whatever their dtype and layout, and refused, never followed or mapped, where the candidate's
process left something else."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tools.worker.outputs import KeptWriter, Staging, UnreadableOutputs, load_kept, read_kept, slot_path


def kept(tmp_path: Path, outs: dict[int, torch.Tensor]) -> Path:
    path = tmp_path / "timing_0.out.pt"
    writer = KeptWriter(path)
    for slot, out in outs.items():
        writer.keep(slot, out)
    writer.close()
    return path


def test_outputs_come_back_bit_for_bit_in_their_dtype_and_shape(tmp_path: Path) -> None:
    outs = {
        0: torch.randn(3, 5, 7),
        2: torch.randn(6, 4).t(),  # not contiguous
        1: torch.arange(12, dtype=torch.int64).reshape(3, 4),
        3: torch.randn(4, dtype=torch.float64) > 0,
        4: torch.randn(2, 3).to(torch.bfloat16),
        5: torch.empty(0, 8),
        6: torch.tensor(2.5),
    }
    back = read_kept(kept(tmp_path, outs), "cpu")
    assert sorted(back) == sorted(outs)
    for slot, out in outs.items():
        assert back[slot].dtype == out.dtype
        assert back[slot].shape == out.shape
        assert torch.equal(back[slot], out)


def test_a_slot_kept_again_replaces_the_first(tmp_path: Path) -> None:
    path = tmp_path / "o.pt"
    writer = KeptWriter(path)
    writer.keep(0, torch.ones(1000))
    writer.keep(0, torch.zeros(10))
    writer.close()
    assert torch.equal(read_kept(path, "cpu")[0], torch.zeros(10))


def test_an_output_written_over_after_it_was_kept_is_saved_as_it_was_kept(tmp_path: Path) -> None:
    """The files are written after the loop: what is held must be a copy, not the candidate's storage,
    which a later call (or a candidate reusing its buffer) may write again."""
    path = tmp_path / "o.pt"
    writer = KeptWriter(path)
    out = torch.arange(6, dtype=torch.float32)
    writer.keep(0, out)
    assert not slot_path(path, 0).exists()  # held until the loop ends
    out.fill_(-1.0)
    writer.close()
    assert torch.equal(read_kept(path, "cpu")[0], torch.arange(6, dtype=torch.float32))


class Turns:
    """The worker's turn as close() drives it, and which slot files existed at each step."""

    def __init__(self, path: Path, slots: list[int]) -> None:
        self.path, self.slots = path, slots
        self.calls: list[tuple[str, list[int]]] = []

    def files(self) -> list[int]:
        return [s for s in self.slots if slot_path(self.path, s).exists()]

    def release(self) -> None:
        self.calls.append(("release", self.files()))

    def want(self) -> None:
        self.calls.append(("want", self.files()))


def test_the_turn_is_given_back_before_any_file_is_written(tmp_path: Path) -> None:
    """Writing the files is host work: a timed loop waiting for the device alone need not wait for it."""
    path = tmp_path / "o.pt"
    writer = KeptWriter(path)
    outs = {slot: torch.full((100,), float(slot)) for slot in (2, 0, 1)}
    for slot, out in outs.items():
        writer.keep(slot, out)
    turn = Turns(path, sorted(outs))
    writer.close(turn)
    assert turn.calls == [("release", [])]  # a CPU output has no device part: given back at once
    back = read_kept(path, "cpu")
    assert all(torch.equal(back[slot], out) for slot, out in outs.items())


@pytest.mark.gpu
def test_device_outputs_are_copied_to_pinned_memory_in_the_turn_and_written_after_it(tmp_path: Path) -> None:
    """The turn covers the outputs' copies to the host only; where the pinned buffer must grow, the turn is
    given back while it is pinned. What comes back, pinned or not, is what was kept, bit for bit."""
    staging = Staging()
    outs = {
        0: torch.randn(1000, 33, device="cuda"),
        1: torch.randn(7, device="cuda", dtype=torch.float64),
        2: torch.randn(5, 3, device="cuda").t(),  # not contiguous
        3: torch.randn(13, device="cuda") > 0,
    }
    calls = []
    for round_ in range(2):
        path = tmp_path / f"o{round_}.pt"
        writer = KeptWriter(path, staging)
        for slot, out in outs.items():
            writer.keep(slot, out)
        turn = Turns(path, sorted(outs))
        writer.close(turn)
        calls.append(turn.calls)
        for device in ("cuda", "cpu"):
            back = read_kept(path, device, Staging())
            assert all(torch.equal(back[s].cpu(), out.cpu()) for s, out in outs.items())
        pinned = load_kept(path, True, Staging())
        assert all(t.is_pinned() and torch.equal(t, outs[s].cpu()) for s, t in pinned.items())
    assert calls[0] == [("release", []), ("want", []), ("release", [])]  # the buffer pinned outside the turn
    assert calls[1] == [("release", [])]  # the same buffer again: the copies, then the turn given back


def test_past_the_held_bytes_a_kept_output_is_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(KeptWriter, "HOLD_BYTES", 64)
    path = tmp_path / "o.pt"
    writer = KeptWriter(path)
    writer.keep(0, torch.ones(10))  # 40 bytes: held
    writer.keep(1, torch.zeros(10))  # 80 bytes in all: written now
    assert not slot_path(path, 0).exists()
    assert slot_path(path, 1).stat().st_size == 40
    writer.close()
    back = read_kept(path, "cpu")
    assert torch.equal(back[0], torch.ones(10))
    assert torch.equal(back[1], torch.zeros(10))


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        (lambda p: slot_path(p, 0).write_bytes(b"\0" * 12), "bytes where its index implies"),
        (
            lambda p: p.write_text(json.dumps({"slots": {"0": {"dtype": "os", "shape": [4]}}})),
            "unknown dtype",
        ),
        (lambda p: p.write_text(json.dumps({"slots": {"0": {"dtype": "float32", "shape": [-1]}}})), "shape"),
        (lambda p: p.write_text(json.dumps({"slots": {"../x": {"dtype": "float32", "shape": [4]}}})), "slot"),
        (lambda p: p.write_text(json.dumps({"slots": {"²": {"dtype": "float32", "shape": [4]}}})), "slot"),
        (lambda p: p.write_text("not json"), "not JSON"),
        (lambda p: p.write_text(" " * (2 << 20)), "too large"),
        (lambda p: slot_path(p, 0).unlink(), "No such file"),
    ],
)
def test_a_tampered_index_or_file_is_refused_with_why(
    tmp_path: Path, tamper: Callable[[Path], object], says: str
) -> None:
    path = kept(tmp_path, {0: torch.randn(4)})
    tamper(path)
    with pytest.raises(UnreadableOutputs, match=says):
        read_kept(path, "cpu")


def test_an_index_that_claims_more_than_its_files_hold_takes_no_memory_for_it(tmp_path: Path) -> None:
    """The candidate's process wrote the index: a size it claims is checked against the file before the
    reader takes pinned memory for it (a claim of a terabyte must not take the truth server down)."""
    path = kept(tmp_path, {0: torch.randn(4), 1: torch.randn(4)})
    index = json.loads(path.read_text())
    index["slots"]["1"]["shape"] = [1 << 40]
    path.write_text(json.dumps(index))

    class Refusing(Staging):
        def take(self, nbytes: int) -> torch.Tensor:
            raise AssertionError(f"asked for {nbytes} bytes")

    with pytest.raises(UnreadableOutputs, match="bytes where its index implies"):
        load_kept(path, True, Refusing())


def test_links_and_fifos_are_refused_not_followed_or_waited_on(tmp_path: Path) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\1" * 16)
    path = kept(tmp_path, {0: torch.randn(4)})
    slot_path(path, 0).unlink()
    slot_path(path, 0).symlink_to(secret)  # the right size, somewhere else
    with pytest.raises(UnreadableOutputs):
        read_kept(path, "cpu")
    slot_path(path, 0).unlink()
    os.mkfifo(slot_path(path, 0))  # a reader that opened it would wait forever
    with pytest.raises(UnreadableOutputs, match="not a regular file"):
        read_kept(path, "cpu")
