"""What the judge reads from a CUDA timing loop's record of the device's own state (tools/worker/l2.py):
persisting L2 lines, which a candidate can keep across the flush that should leave each call a cold cache
(GUIDE §2 row 30). Nothing persists while no L2 is set aside; where a candidate set some aside and the loop
could not reset persisting lines before every flush, its clock is not a cold cache's and the result goes the
way of any other disagreement of the clocks (re-measured in a fresh worker, then `suspect`)."""

from __future__ import annotations

from tools.results import ShapeTiming, TimingStats

MIB = 1 << 20


def l2_disagreement(name: str, cand: TimingStats) -> str | None:
    """Why this shape's time may have had a warm L2 despite the flush, or None."""
    if cand.clock != "cuda_event" or not cand.l2_set_aside_bytes or cand.l2_reset in (None, "ok"):
        return None
    return (
        f"{name}: {cand.l2_set_aside_bytes / MIB:.1f} MiB of L2 was set aside for persisting accesses and the "
        f"persisting lines could not be reset before each flush ({cand.l2_reset}): lines kept across the flush "
        "make a warm-cache time; do not keep data resident in L2 between calls"
    )


def l2_notes(timings: list[ShapeTiming]) -> list[str]:
    """A candidate that set L2 aside for persisting lines, where the reset kept the flush honest: said."""
    notes = []
    for t in timings:
        cand = t.candidate
        if cand is not None and cand.l2_set_aside_bytes and cand.l2_reset == "ok":
            notes.append(
                f"{t.name}: the candidate set aside {cand.l2_set_aside_bytes / MIB:.1f} MiB of L2 for persisting "
                "accesses; persisting lines were reset before every flush, so each call still started cold"
            )
    return notes
