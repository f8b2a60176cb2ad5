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

from tools.worker.outputs import KeptWriter, UnreadableOutputs, read_kept, slot_path


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


def test_between_runs_between_two_outputs_copies_each_written_whole_before_it(tmp_path: Path) -> None:
    """The worker gives the device back between two kept outputs' copies (`between`): each file is whole
    when it runs, none after the last, and what comes back is what was kept."""
    path = tmp_path / "o.pt"
    writer = KeptWriter(path)
    outs = {slot: torch.full((100,), float(slot)) for slot in (2, 0, 1)}
    for slot, out in outs.items():
        writer.keep(slot, out)
    seen: list[list[int]] = []
    writer.close(between=lambda: seen.append(sorted(s for s in outs if slot_path(path, s).exists())))
    assert seen == [[0], [0, 1]]  # in slot order, once between each two, never after the last
    back = read_kept(path, "cpu")
    assert all(torch.equal(back[slot], out) for slot, out in outs.items())


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
