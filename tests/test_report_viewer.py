"""`agent report` as the place to read a whole run: every turn with its verdicts, the diffs between kernels,
a parallel run's trajectories side by side, keys between the turns, and nothing from the log able to run
as script. Read from real runs (the committed H200 scripted run; scripted CPU runs made here, slow), and
in headless Chromium (tests/browser.py: skipped without it, failed in CI)."""

from __future__ import annotations

import difflib
import html
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agent.report.page import build_report, write_report
from agent.runlog.data import RunData
from agent.runlog.events import ToolCallEvent
from agent.runlog.reader import load_run
from tests.browser import chromium, dump_dom
from tests.helpers.charts import charts, marker_points

ROOT = Path(__file__).resolve().parent.parent
H200_RUN = ROOT / "bench" / "results" / "h200" / "scripted_run" / "run.tar.gz"
FIXTURES = Path(__file__).parent / "fixtures" / "runs"
PARALLEL = FIXTURES / "20261129T140000Z-selective_scan_cpu-9a7a11"
SCRIPTED = FIXTURES / "20261129T090000Z-selective_scan_cpu-5c0000"


# ---------------------------------------------------------------- reading the page back


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def turn_sections(page: str) -> dict[str, str]:
    """Each turn's <section> (they never nest), by id."""
    return dict(re.findall(r'<section class="turn" id="([^"]+)"[^>]*>(.*?)</section>', page, flags=re.S))


def root_attributes(dom: str) -> str:
    match = re.search(r"<html[^>]*>", dom)
    assert match, dom[:500]
    return match.group(0)


def diff_body(old: str, new: str) -> list[str]:
    """The +/- lines of a unified diff, as a reader would check them by hand."""
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="")
    return [line for line in list(lines)[2:] if line[:1] in "+-"]


def kernel_order(run: RunData) -> list[tuple[str, str]]:
    """(turn id, kernel path) of each kernel's first run, in log order (one trajectory)."""
    seen: dict[str, str] = {}
    for turn in run.turns:
        for call in turn.tool_calls:
            if call.kernel_path and call.kernel_path not in seen:
                seen[call.kernel_path] = f"turn-{turn.turn}"
    return [(where, path) for path, where in seen.items()]


def check_turns_and_diffs(run: RunData, page: str) -> None:
    """Every turn has its section, holding its model text, every call's verdict with every case and timed
    shape, and each new kernel's diff against the one before it and against the best."""
    sections = turn_sections(page)
    assert list(sections) == [f"turn-{t.turn}" for t in run.turns]
    for turn in run.turns:
        text = text_of(sections[f"turn-{turn.turn}"])
        for call in turn.model_calls:
            assert call.text.strip() in text
            assert call.reasoning.strip() in text
        for call in turn.tool_calls:
            assert f"call → {call.name} {call.kernel_path}{call.status}" in text
            for case in call.result.get("cases", []):
                assert re.search(rf"{re.escape(case['name'])}\S*( \S+=\d+)*{case['status']}", text), case[
                    "name"
                ]
            for timing in call.result.get("timings", []):
                assert timing["name"] + (" *" if timing["primary"] else "") in text
    order = kernel_order(run)
    best = run.best_kernel_path
    assert best is not None
    for (_, before), (where, path) in zip(order, order[1:], strict=False):
        section = sections[where]
        text = text_of(section)
        assert f"diff against the previous kernel: {before} → {path}" in text
        expected = diff_body(run.kernels[before], run.kernels[path])
        added = sum(1 for line in expected if line.startswith("+"))
        assert f"+{added} −{len(expected) - added}" in text
        for line in expected:
            assert line in text
        if path != best and before != best:
            assert f"diff against the best: {path} → {best}" in text
    best_turn = next(where for where, path in order if path == best)
    assert re.search(rf'<section class="turn" id="{best_turn}"[^>]*data-best', page)


# ---------------------------------------------------------------- the committed H200 run


@pytest.fixture(scope="module")
def h200_run(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    if not H200_RUN.is_file():
        pytest.skip(f"{H200_RUN} is not in this checkout")
    where = tmp_path_factory.mktemp("h200")
    with tarfile.open(H200_RUN) as archive:
        archive.extractall(where, filter="data")
    (run_dir,) = (where / "runs").iterdir()
    return load_run(run_dir)


@pytest.fixture(scope="module")
def h200_page(h200_run: RunData) -> str:
    return build_report(h200_run)


def test_h200_run_report_has_every_turn_and_every_diff(h200_run: RunData, h200_page: str) -> None:
    page = h200_page
    check_turns_and_diffs(h200_run, page)
    sections = turn_sections(page)
    assert len(sections) == 8
    recheck = text_of(sections["turn-8"])  # the final re-check points back at the turns that ran its kernels
    assert "kernels/007.py, first run in turn 7" in recheck
    assert "kernels/006.py, first run in turn 6" in recheck
    assert '<a href="#turn-7">turn 7</a>' in sections["turn-8"]
    assert "new best" in text_of(sections["turn-7"])
    assert '<span class="badge best">best kernel</span>' in sections["turn-7"]
    nav = re.search(r'<nav id="turn-nav">.*?</nav>', page, flags=re.S)
    assert nav
    assert re.findall(r'href="#(turn-\d+)"', nav.group(0)) == list(sections)
    assert "turn 7 · 131×" in text_of(nav.group(0))


def test_h200_report_charts_each_timed_shape(h200_run: RunData, h200_page: str) -> None:
    page = h200_page
    shapes = re.findall(r'<g id="(shape-\d+-chart)"', page)
    assert shapes == ["shape-0-chart", "shape-1-chart", "shape-2-chart"]
    for name in ("b16_l1024_d1024 * · reference", "b8_l4096_d768 · reference", "b4_l2048_d2048 · reference"):
        assert name in page
    found = charts(page)
    for index, name in enumerate(["b16_l1024_d1024", "b8_l4096_d768", "b4_l2048_d2048"]):
        expected = [
            (float(c.turn), t["candidate"]["median_ms"])
            for c in h200_run.events
            if isinstance(c, ToolCallEvent) and c.name == "benchmark"
            for t in c.result["timings"]
            if t["name"] == name
        ]
        assert len(expected) == 7
        points = marker_points(
            found[f"shape-{index}-chart"], f"shape-{index}-ms-0"
        )  # one trajectory: one line
        assert points == [(x, pytest.approx(y, rel=0.01)) for x, y in expected]


# ---------------------------------------------------------------- a parallel run


def test_parallel_run_shows_trajectories_side_by_side() -> None:
    run = load_run(PARALLEL)
    page = build_report(run)
    lanes = re.search(
        r'<div class="lanes" style="grid-template-columns: repeat\(3, [^"]+\)">(.*?)</div>\n', page
    )
    assert lanes, "no three-column lanes"
    cells = lanes.group(1)
    heads = re.findall(r'<div class="lane-head">(.*?)</div>', cells)
    assert [text_of(h).split(" · ")[:2] for h in heads] == [
        ["trajectory 1", "sample"],
        ["trajectory 2", "sample"],
        ["trajectory 3", "branch of kernels/002.py"],
    ]
    # row by row: turn 1 of each trajectory, then turn 2 (trajectory 3 has none), then the re-check
    assert re.findall(r'<a class="card" href="#([^"]+)"', cells) == [
        "turn-t1-1", "turn-t2-1", "turn-t3-1", "turn-t1-2", "turn-t2-2", "turn-2",
    ]  # fmt: skip
    assert '<div class="lane-empty">' in cells
    sections = turn_sections(page)
    assert list(sections) == ["turn-t1-1", "turn-t1-2", "turn-t2-1", "turn-t2-2", "turn-t3-1", "turn-2"]
    assert 'data-trajectory="3"' in page
    assert "no calls" in text_of(
        cells
    )  # the fixture's branch ended at once (a real one: the slow test below)
    second = text_of(sections["turn-t2-1"])  # another trajectory's first kernel has nothing before it
    assert "the first kernel of its trajectory" in second


# ---------------------------------------------------------------- untrusted text


PAYLOAD = (
    '</div></pre></section><script>document.documentElement.setAttribute("data-pwned","script")</script>'
    "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">$\\frac{$"
)


def hostile_run(tmp_path: Path) -> Path:
    """The scripted fixture with the payload in every text the log and the kernels carry."""
    run_dir = tmp_path / SCRIPTED.name
    shutil.copytree(SCRIPTED, run_dir)
    lines = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "model_call":
            event["text"], event["reasoning"] = PAYLOAD, PAYLOAD
        if event["event"] == "tool_call":
            event["summary"] = PAYLOAD
            for case in event["result"].get("cases", []):
                case["message"] = PAYLOAD
            for timing in event["result"].get("timings", []):
                timing["name"] = PAYLOAD
        lines.append(json.dumps(event))
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    for kernel in [*(run_dir / "kernels").glob("*.py"), run_dir / "best.py"]:
        kernel.write_text(kernel.read_text() + f"# {PAYLOAD}\n'''{PAYLOAD}'''\n")
    return run_dir


def test_text_from_the_log_is_escaped(tmp_path: Path) -> None:
    page = build_report(load_run(hostile_run(tmp_path)))
    assert re.findall(r"<script[^>]*>", page, flags=re.I) == ["<script>"]  # the page's own, nothing else
    assert not re.search(r"<img|<iframe|<link", page, flags=re.I)
    assert not re.search(r"<[a-z][^>]*\son[a-z]+\s*=", page, flags=re.I)  # no event-handler attribute
    assert text_of(page).count(PAYLOAD) >= 10  # shown, as text


def test_text_from_the_log_does_not_run_in_chromium(tmp_path: Path) -> None:
    page = write_report(load_run(hostile_run(tmp_path)), tmp_path / "report.html")
    dom = dump_dom(page)
    root = root_attributes(dom)
    assert 'data-viewer="ready"' in root
    assert "data-pwned" not in root


# ---------------------------------------------------------------- in the browser


def test_a_missing_browser_skips_here_but_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        chromium()
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=".ci/run installs it"):
        chromium()


KEYS = """<script>
var seen = [];
KEYS.forEach(function (key) {
  document.dispatchEvent(new KeyboardEvent("keydown", {key: key, bubbles: true}));
  seen.push(document.body.getAttribute("data-current"));
});
document.body.setAttribute("data-keys-seen", seen.join(" "));
</script></body>"""


def press(page: Path, keys: list[str], fragment: str = "") -> list[str]:
    """The current turn after each key, pressed by a script added to a copy of the page."""
    pressed = page.with_name("pressed.html")
    source = page.read_text(encoding="utf-8")
    pressed.write_text(source.replace("</body>", KEYS.replace("KEYS", json.dumps(keys))), encoding="utf-8")
    dom = dump_dom(pressed, fragment)
    found = re.search(r'data-keys-seen="([^"]*)"', dom)
    assert found, "the key script did not run"
    return found.group(1).split()


def test_h200_report_runs_in_headless_chromium(h200_page: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(h200_page, encoding="utf-8")
    dom = dump_dom(page)
    root = root_attributes(dom)
    assert 'data-viewer="ready"' in root
    assert 'data-turns="8"' in root
    assert '<div id="viewer-status">turn 1  (1 of 8)' in dom
    assert re.search(r'<section class="turn current" id="turn-1"', dom)
    assert len(re.findall(r'<section class="turn[^"]*" id="turn-\d+"', dom)) == 8
    assert dom.count('<details class="diff" data-against="the previous kernel" open=""') == 6
    assert '<a href="#turn-1" class="current">' in dom
    assert re.search(r'<section class="turn current" id="turn-7"', dump_dom(page, "#best"))
    keys = press(page, ["j", "j", "b", "k", "ArrowRight", "G", "g", "ArrowLeft", "d"])
    assert keys == ["turn-2", "turn-3", "turn-7", "turn-6", "turn-7", "turn-8", "turn-1", "turn-1", "turn-1"]


def test_parallel_report_keys_move_between_trajectories(tmp_path: Path) -> None:
    page = write_report(load_run(PARALLEL), tmp_path / "report.html")
    keys = press(page, ["t", "t", "t", "j", "t", "T", "T"])
    assert keys == ["turn-t2-1", "turn-t3-1", "turn-t1-1", "turn-t1-2", "turn-t2-2", "turn-t1-2", "turn-t3-1"]
    dom = dump_dom(page, "#turn-t2-2")
    assert re.search(r'<section class="turn current" id="turn-t2-2"', dom)
    assert '<a class="card current" href="#turn-t2-2">' in dom


# ---------------------------------------------------------------- scripted CPU runs made here


def agent(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=1500
    )


@pytest.mark.slow
def test_report_of_a_scripted_cpu_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = agent(
        "run", "tests/problems/scan_tiny_playback.yaml", "--model", "scripted", "--runs-dir", str(runs)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = runs.iterdir()
    shown = agent("report", str(run_dir))
    assert shown.returncode == 0, shown.stderr
    page = run_dir / "report.html"
    run = load_run(run_dir)
    check_turns_and_diffs(run, page.read_text(encoding="utf-8"))
    assert [path for _, path in kernel_order(run)] == ["kernels/001.py", "kernels/002.py", "kernels/003.py"]
    dom = dump_dom(page)
    assert 'data-viewer="ready"' in root_attributes(dom)
    assert dom.count('data-against="the previous kernel" open=""') == 2


@pytest.mark.slow
def test_report_of_a_parallel_scripted_cpu_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    args = ["--model", "scripted", "--parallel", "2", "--branches", "1", "--max-turns", "2"]
    done = agent("run", "tests/problems/scan_tiny_playback.yaml", *args, "--runs-dir", str(runs))
    # 4: every trajectory reached --max-turns; 0: their ends differed (which one ends how depends on which
    # kernel was best when the branch started, so on the timings).
    assert done.returncode in (0, 4), done.stderr[-3000:]
    (run_dir,) = runs.iterdir()
    run = load_run(run_dir)
    page = write_report(run, tmp_path / "report.html")
    text = page.read_text(encoding="utf-8")
    numbers = [t.number for t in run.trajectories]
    assert len(numbers) == 3
    assert f"grid-template-columns: repeat({len(numbers)}," in text
    sections = turn_sections(text)
    for turn in run.turns:
        assert (
            f"turn-t{turn.trajectory}-{turn.turn}" if turn.trajectory else f"turn-{turn.turn}"
        ) in sections
    branch = run.trajectories[-1]
    assert branch.kind == "branch"
    first = next(c.kernel_path for t in branch.turns for c in t.tool_calls)
    assert f"diff against the previous kernel: {branch.from_kernel} → {first}" in text_of(text)
    keys = press(page, ["t", "t"])
    assert keys == ["turn-t2-1", "turn-t3-1"]
