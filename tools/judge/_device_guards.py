"""What the judge reads from a timing loop's record beyond its clocks, each a disagreement of the clocks where
it says the time is not the work's (re-measured in a fresh worker, then `suspect`, as any other):
- outputs that changed after their call had ended (tools/worker/late.py): work finished on no clock;
- persisting L2 lines (tools/worker/l2.py), which a candidate can keep across the flush that should leave
  each call a cold cache (GUIDE §2 row 30). Nothing persists while no L2 is set aside; where a candidate set
  some aside and the loop could not reset persisting lines before every flush, its time is a warm cache's."""

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


def late_disagreement(name: str, cand: TimingStats) -> str | None:
    """Why this shape's outputs were finished off the clock, or None (tools/worker/late.py)."""
    if not cand.late_writes:
        return None
    return (
        f"{name}: the output of {cand.late_writes} of {cand.n} timed calls changed after the call had ended and "
        "before the harness read it: work went on after the call (a thread, another stream, context or process "
        "finishing it) on no clock; finish every write to the output inside forward, on its stream"
    )


def device_disagreement(name: str, cand: TimingStats) -> str | None:
    """Why this shape's clock did not see all of its work or saw a warm cache, or None."""
    return late_disagreement(name, cand) or l2_disagreement(name, cand)


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
