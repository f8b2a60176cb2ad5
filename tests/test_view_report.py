"""`agent report`: the charts carry the run's numbers (read back from the SVG), the page is self-contained,
and it renders in headless Chromium (tests/browser.py). The turn-by-turn viewer: tests/test_report_viewer.py."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

import pytest

from agent.report.charts import LLM_COLOR, TOOL_COLOR
from agent.report.page import build_report, write_report
from agent.runlog.data import RunData
from agent.runlog.events import ToolCallEvent
from agent.runlog.reader import load_run
from tests.browser import screenshot
from tests.helpers.charts import SVG, charts, has, marker_points, path_points
from tools.results import BenchResult

RUNS = Path(__file__).parent / "fixtures" / "runs"
COMPLETE = RUNS / "20261129T101500Z-selective_scan-a1b2c3"
PARTIAL = RUNS / "20261129T120000Z-selective_scan-d4e5f6"
SCRIPTED = RUNS / "20261129T090000Z-selective_scan_cpu-5c0000"
NOW = datetime.fromisoformat("2026-11-30T08:00:00+00:00")


def bar(axes: ET.Element, gid: str) -> tuple[float, float]:
    """(bottom, top) of a bar in data units."""
    ys = [y for _, y in path_points(axes, gid)]
    return min(ys), max(ys)


# ---------------------------------------------------------------- the fixture's own numbers


def benchmarks(run: RunData, tool: str = "benchmark") -> list[tuple[int, BenchResult]]:
    calls = [e for e in run.events if isinstance(e, ToolCallEvent) and e.name == tool]
    return [(c.turn, BenchResult.model_validate(c.result)) for c in calls]


@pytest.fixture(scope="module")
def complete() -> tuple[RunData, dict[str, ET.Element]]:
    run = load_run(COMPLETE, now=NOW)
    return run, charts(build_report(run))


def test_speedup_chart_carries_each_candidate(complete: tuple[RunData, dict[str, ET.Element]]) -> None:
    run, found = complete
    axes = found["speedup-chart"]
    results = benchmarks(run)
    correct = [(float(t), b.speedup) for t, b in results if b.correct]
    failed = [(float(t), 0.0) for t, b in results if not b.correct]
    assert correct == [(3.0, 12.4), (4.0, 31.7)]  # the fixture as designed
    assert marker_points(axes, "speedup-ok") == [(x, pytest.approx(y, abs=0.01)) for x, y in correct]
    assert marker_points(axes, "speedup-failed") == [(x, pytest.approx(y, abs=0.01)) for x, y in failed]
    rechecked = [(float(t), b.speedup) for t, b in benchmarks(run, "final_recheck")]
    assert marker_points(axes, "speedup-final") == [(x, pytest.approx(y, abs=0.01)) for x, y in rechecked]
    assert [y for _, y in path_points(axes, "reference-line")] == [pytest.approx(1.0, abs=0.01)] * 2


def test_best_so_far_line_steps_up_at_each_new_best(complete: tuple[RunData, dict[str, ET.Element]]) -> None:
    _, found = complete
    points = path_points(found["speedup-chart"], "best-so-far")
    best_at: dict[float, float] = {}
    for x, y in points:  # steps-post: at a turn's x the line ends on that turn's best
        best_at[x] = max(best_at.get(x, 0.0), y)
    assert best_at == {
        3.0: pytest.approx(12.4, abs=0.01),
        4.0: pytest.approx(31.7, abs=0.01),
        5.0: pytest.approx(31.7, abs=0.01),
    }


def test_each_recheck_star_names_its_kernel(complete: tuple[RunData, dict[str, ET.Element]]) -> None:
    run, found = complete
    labels = [t.text for t in found["speedup-chart"].iter(f"{SVG}text")]
    rechecked = [b.speedup for _, b in benchmarks(run, "final_recheck")]
    assert rechecked == [31.2]  # the fixture: kernels/005.py, measured 31.7× in turn 4
    assert "005.py re-check 31.2×" in labels


def test_the_page_says_why_the_final_best_is_not_where_the_line_ends() -> None:
    page = build_report(load_run(COMPLETE, now=NOW))
    note = html.unescape(re.search(r'<p class="note" id="recheck-note">(.*?)</p>', page).group(1))  # type: ignore[union-attr]
    assert "it ends at 31.7× (kernels/005.py, turn 4)" in note
    assert "the final best: kernels/005.py at 31.2×" in note
    assert "fresh seeds" in note
    assert 'id="recheck-note"' not in build_report(load_run(SCRIPTED, now=NOW))  # no re-check, no note


def test_time_chart_stacks_llm_and_tool_seconds(complete: tuple[RunData, dict[str, ET.Element]]) -> None:
    run, found = complete
    axes = found["time-chart"]
    for turn in run.turns:
        llm_bottom, llm_top = bar(axes, f"llm-seconds-{turn.turn}")
        tool_bottom, tool_top = bar(axes, f"tool-seconds-{turn.turn}")
        assert llm_bottom == pytest.approx(0.0, abs=0.05)
        assert llm_top == pytest.approx(turn.llm_seconds, abs=0.05)
        assert tool_bottom == pytest.approx(turn.llm_seconds, abs=0.05)
        assert tool_top - tool_bottom == pytest.approx(turn.tool_seconds, abs=0.05)
    assert bar(axes, "llm-seconds-1")[1] == pytest.approx(48.5, abs=0.05)
    assert bar(axes, "tool-seconds-1")[1] == pytest.approx(127.3, abs=0.05)


def test_tokens_chart_stacks_each_kind(complete: tuple[RunData, dict[str, ET.Element]]) -> None:
    run, found = complete
    axes = found["tokens-chart"]
    kinds = [
        ("input", "input_tokens"),
        ("cache-read", "cache_read_tokens"),
        ("cache-write", "cache_write_tokens"),
        ("output", "output_tokens"),
    ]
    for turn in run.turns:
        bottom = 0.0
        for kind, field in kinds:
            low, high = bar(axes, f"tokens-{kind}-{turn.turn}")
            assert low == pytest.approx(bottom, abs=1.0)
            assert high - low == pytest.approx(getattr(turn.usage, field), abs=1.0)
            bottom = high
        assert bottom == pytest.approx(turn.usage.total, abs=1.0)


def test_page_is_self_contained_and_carries_the_best_kernel(
    complete: tuple[RunData, dict[str, ET.Element]],
) -> None:
    page = build_report(load_run(COMPLETE, now=NOW))
    assert page.startswith("<!DOCTYPE html>")
    assert re.findall(r"<script[^>]*>", page, flags=re.I) == ["<script>"]  # the viewer's own, inline
    assert not re.search(r"<link|<img|<iframe|@import|src=", page, flags=re.I)
    assert set(re.findall(r"https?://[^\"'\s)]+", page)) <= {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "scan_kernel<<<grid, 256>>>(delta, A, Bm, Cm, x, Dv, y, L, D);" in text
    best = BenchResult.model_validate(load_run(COMPLETE).best.bench)  # type: ignore[union-attr]
    for case in best.cases:
        assert re.search(rf"{case.name}batch_size=\d+ seq_len=\d+ d_model=\d+ d_state=16{case.status}", text)
    assert "31.2× · kernels/005.py · turn 4 · re-checked at the end" in text


def test_partial_run_report() -> None:
    run = load_run(PARTIAL, now=NOW)
    page = build_report(run)
    axes = charts(page)["speedup-chart"]
    assert marker_points(axes, "speedup-ok") == [(2.0, pytest.approx(5.1, abs=0.01))]
    assert marker_points(axes, "speedup-failed") == [(1.0, pytest.approx(0.0, abs=0.01))]
    assert not has(axes, "speedup-final")
    time_axes = charts(page)["time-chart"]
    assert bar(time_axes, "llm-seconds-3")[1] == pytest.approx(30.4, abs=0.05)  # the cut-off turn is drawn
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert re.search(r"turn 3\s*incomplete \(no turn_end\)", text)
    assert "benchmark: no result logged" in text
    assert "events.jsonl line 9 is truncated" in text


def test_scripted_run_report_has_no_token_chart() -> None:
    page = build_report(load_run(SCRIPTED, now=NOW))
    found = charts(page)
    assert sorted(found) == ["shape-0-chart", "speedup-chart", "time-chart"]
    assert "scripted playback: no model calls, no tokens." in page
    assert marker_points(found["speedup-chart"], "speedup-ok") == [(2.0, pytest.approx(3.4, abs=0.01))]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    from PIL import Image

    page = write_report(load_run(COMPLETE, now=NOW), tmp_path / "report.html")
    shot = screenshot(page, tmp_path / "report.png", 1280, 2400)
    assert png_size(shot.read_bytes()) == (1280, 2400)
    with Image.open(shot) as image:
        colors = {rgb for _, rgb in image.convert("RGB").getcolors(maxcolors=1 << 22) or []}
    for hex_color in (LLM_COLOR, TOOL_COLOR):  # the stacked bars were drawn
        assert tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5)) in colors
