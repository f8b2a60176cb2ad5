"""`agent show` and `agent ls` renderers, printed into a string Console and compared as text."""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
from datetime import datetime
from pathlib import Path

from rich.console import Console, RenderableType

from agent.runlog.events import Heartbeat, RunInfo
from agent.runlog.reader import list_runs, load_run
from agent.views.run import ShowOptions, render_ls, render_run

RUNS = Path(__file__).parent / "fixtures" / "runs"
COMPLETE = RUNS / "20261129T101500Z-selective_scan-a1b2c3"
PARTIAL = RUNS / "20261129T120000Z-selective_scan-d4e5f6"
SCRIPTED = RUNS / "20261129T090000Z-selective_scan_cpu-5c0000"
NOW = datetime.fromisoformat("2026-11-30T08:00:00+00:00")


def text_of(renderable: RenderableType, width: int = 140) -> str:
    console = Console(file=io.StringIO(), width=width, legacy_windows=False)
    console.print(renderable)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in output.splitlines())


def show(run_dir: Path, opts: ShowOptions | None = None, width: int = 140) -> str:
    return text_of(render_run(load_run(run_dir, now=NOW), opts or ShowOptions()), width)


TURN_1 = """\
turn 1 · 127.4s turn · 48.5s LLM · 78.8s tools · tokens in=2,805 · out=4,663 · total=7,468 · $0.133
reasoning
  The reference materialises dA and dB as [B, L, D, N] tensors: 1 GiB at the primary shape.
  One thread per (batch, channel) with the 16 states in registers avoids that entirely.
assistant
  I'll start with one thread per (batch, channel), the 16 states in registers, x and y coalesced along D.
call → compile_kernel
  kernels/001.py · 68 lines · error at line 23
    19     for (int t = 0; t < L; ++t) {
    20         size_t row = ((size_t)b * L + t);
    21         float dt = delta[row * D + d], xv = x[row * D + d], acc = 0.f;
    22         for (int n = 0; n < 16; ++n) {
  ❱ 23             h_state[n] = exp2f(dt * a[n]) * h_state[n] + dt * Bm[row * 16 + n] * xv;
    24             acc += h[n] * Cm[row * 16 + n];
    25         }
    26         y[row * D + d] = acc + xv * Dv[d];
  … lines 19–26 of 68 (--full shows all)
result ← compile_kernel (compile_error)
  compile_error: nvcc reported 1 error
  kernels/001.py:23: error: identifier "h_state" is undefined
      h_state[n] = exp2f(dt * a[n]) * h_state[n] + dt * Bm[row * 16 + n] * xv;
  78.8s in compile_kernel
"""

TURN_2_BENCH = """\
call → benchmark
  kernels/003.py · 68 lines · same code as kernels/002.py
result ← benchmark (incorrect)
  incorrect: case long_memory failed: rel_l2 0.231 > 2e-05 (the recurrence loses state)
  5/6 correctness cases passed
   case         sizes                 status  max abs  rel L2  why
   long_memory  B=2 L=3000 D=64 N=16  failed  0.41     0.23    rel_l2 0.231 > 2e-05; max_abs 0.412 at [1, 2871, 17] (expected 1.93, got 1.518)
  21.7s in benchmark
"""

TURN_4_RESULT = """\
result ← benchmark (ok)
  correct · speedup (launch-free ref) 30.5× · eager speedup 30.5× (b16_l1024_d1024: 1.820 ms, eager reference 57.700 ms, rse 0.3%)
  6/6 correctness cases passed
   shape              candidate   rse  % of floor  launch-free ref  speedup (launch-free ref)   eager ref  eager speedup
   b16_l1024_d1024 *   1.820 ms  0.3%           –            eager                      31.7×   57.700 ms          31.7×
   b8_l4096_d768       7.830 ms  0.3%           –            eager                      29.5×  231.000 ms          29.5×
   b4_l2048_d2048      3.709 ms  0.3%           –            eager                      30.2×  112.000 ms          30.2×
  launch-free reference: eager (recorded before launch-free references: its speedup is against the eager reference)
  no floor: none in this result (the problem's spec states no `floor:`, its work per call)
  device time: own kernels 41% · gemm 59%
  36.2s in benchmark
new best: 31.7× · kernels/005.py · 1.820 ms (rse 0.3%)
"""


def footer(run_dir: Path) -> str:
    return f"""\
total ─
time    6m 07s wall · 142.5s LLM (39%) · 182.8s tools (50%) · 35.3s final re-check (10%)
tokens  in=26,255 (input 2,395 · cache read 16,820 · cache write 7,040) · out=10,833 (thinking 6,850) · total=37,088
cost    $0.335
best    31.2× · kernels/005.py · turn 4, re-checked · saved as {run_dir / "best.py"}
turns   5 · finished (submitted)"""


def test_turn_header_is_exactly_the_known_format() -> None:
    lines = show(COMPLETE).splitlines()
    assert (
        "turn 1 · 127.4s turn · 48.5s LLM · 78.8s tools · tokens in=2,805 · out=4,663 · total=7,468 · $0.133"
        in lines
    )
    headers = [line for line in lines if line.startswith("turn ") and " · " in line]
    assert headers == [
        "turn 1 · 127.4s turn · 48.5s LLM · 78.8s tools · tokens in=2,805 · out=4,663 · total=7,468 · $0.133",
        "turn 2 · 60.5s turn · 31.2s LLM · 29.3s tools · tokens in=3,792 · out=2,210 · total=6,002 · $0.067",
        "turn 3 · 66.4s turn · 27.9s LLM · 38.5s tools · tokens in=5,630 · out=1,890 · total=7,520 · $0.062",
        "turn 4 · 61.3s turn · 25.1s LLM · 36.2s tools · tokens in=6,728 · out=1,650 · total=8,378 · $0.053",
        "turn 5 · 9.8s turn · 9.8s LLM · 0.0s tools · tokens in=7,300 · out=420 · total=7,720 · $0.019",
    ]


def test_complete_run_transcript() -> None:
    text = show(COMPLETE, width=200)
    assert TURN_1 in text
    assert TURN_2_BENCH in text
    assert TURN_4_RESULT in text
    assert (
        "final re-check: 31.2× · kernels/005.py · 1.849 ms (rse 0.2%)\nrun ended: submitted (target reached)"
        in text
    )
    tail = text[text.index("total ─") :]
    assert tail.split("─")[0] + "─" + tail[tail.index("\n") :] == footer(COMPLETE)
    assert text.splitlines()[:5] == [
        COMPLETE.name + " " + "─" * (200 - len(COMPLETE.name) - 1),
        "problem  selective_scan (problems/selective_scan.yaml)",
        "model    anthropic/claude-opus-5-5",
        "status   finished (submitted): target reached",
        "started  2026-11-29 10:15:00 UTC · gpu-box-07 · NVIDIA H200 · torch 2.11.0 · CUDA 13.0",
    ]


def test_turn_and_last_select_turns() -> None:
    only_two = show(COMPLETE, ShowOptions(turn=2))
    assert "showing turn 2 of 5" in only_two
    assert [line[:6] for line in only_two.splitlines() if line.startswith("turn ")] == ["turn 2"]
    last_two = show(COMPLETE, ShowOptions(last=2))
    assert "showing turn 4, 5 of 5" in last_two
    assert [line[:6] for line in last_two.splitlines() if line.startswith("turn ")] == ["turn 4", "turn 5"]
    # the footer always sums the whole run
    (tokens_line,) = [line for line in only_two.splitlines() if line.startswith("tokens ")]
    assert "total=37,088" in tokens_line


def test_no_code_and_full() -> None:
    no_code = show(COMPLETE, ShowOptions(code=False))
    assert (
        "  kernels/001.py · 68 lines · error at line 23\nresult ← compile_kernel (compile_error)" in no_code
    )
    assert "❱ 23" not in no_code
    full = show(COMPLETE, ShowOptions(full=True, turn=1))
    source = (COMPLETE / "kernels/001.py").read_text().splitlines()
    assert f"    68 {source[67]}" in full.splitlines()
    assert "     1 import torch" in full.splitlines()
    assert "--full shows all" not in full
    assert "told the model\n    compile_kernel FAILED: nvcc reported 1 error" in full


def test_partial_run_shows_the_cut_off_turn() -> None:
    text = show(PARTIAL, ShowOptions(code=False))
    assert "status   killed" in text
    assert (
        "turn 3 · incomplete (no turn_end) · 30.4s LLM · 0.0s tools · tokens in=4,391 · out=2,050 · total=6,441 · $0.060\n"
        "reasoning\n"
        "  Next: 32 threads per block, so more blocks cover the channels.\n"
        "assistant\n"
        "  Trying 32 threads per block.\n"
        "call → benchmark\n"
        "  submitted kernel · 68 lines\n"
        "  no result logged\n"
        "(the run was killed during this turn)\n"
    ) in text
    assert text.endswith(
        "turns   3 · killed\nnote    events.jsonl line 9 is truncated (the writer was cut off); ignored"
    )
    assert (
        "turn 1 · 128.5s turn · 40.2s LLM · 88.2s tools · tokens in=2,800 · out=3,920 · total=6,720 · $0.115"
        in text
    )


def test_scripted_run_is_labelled_and_has_no_tokens() -> None:
    text = show(SCRIPTED)
    assert "turn 1 · 47.4s turn · 0.0s LLM · 47.4s tools · scripted playback" in text.splitlines()
    assert "model    scripted playback (problems/selective_scan_cpu/trajectory/playback.yaml)" in text
    assert "tokens  none (scripted playback)\ncost    none (scripted playback)" in text
    assert "tokens in=" not in text


LS_WIDE = """\
run                                         problem             model                        status                turns  tokens    cost    wall   best  eager
20261130T000000Z-selective_scan-bad000                                                       unreadable
20261129T120000Z-selective_scan-d4e5f6      selective_scan      anthropic/claude-sonnet-5-5  killed                    3  18,101  $0.222  3m 49s  5.10×
20261129T101500Z-selective_scan-a1b2c3      selective_scan      anthropic/claude-opus-5-5    finished (submitted)      5  37,088  $0.335  6m 07s  31.2×
20261129T090000Z-selective_scan_cpu-5c0000  selective_scan_cpu  scripted playback            finished (submitted)      3       –       –  1m 41s  3.40×
{bad}"""


def mixed_runs(root: Path) -> Path:
    for run in (SCRIPTED, COMPLETE, PARTIAL):
        shutil.copytree(run, root / run.name)
    bad = root / "20261130T000000Z-selective_scan-bad000"
    shutil.copytree(COMPLETE, bad)
    info = RunInfo.model_validate_json((bad / "run.json").read_text())
    info = info.model_copy(
        update={"format_version": 5, "run_id": bad.name, "started_at": "2026-11-30T00:00:00+00:00"}
    )
    (bad / "run.json").write_text(info.model_dump_json())
    return bad


def test_ls_mixed_folder(tmp_path: Path) -> None:
    bad = mixed_runs(tmp_path)
    text = text_of(render_ls(list_runs(tmp_path, now=NOW)), width=300)
    error = f"{bad} was written by format version 5; this agent reads 1, 2"
    assert text == LS_WIDE.format(bad=error)


LS_NARROW = """\
20261129T120000Z-selective_scan-d4e5f6
  selective_scan · anthropic/claude-sonnet-5-5 · killed · turns 3 · tokens
  18,101 · cost $0.222 · wall 3m 49s · best 5.10×
20261129T101500Z-selective_scan-a1b2c3
  selective_scan · anthropic/claude-opus-5-5 · finished (submitted) · turns 5 ·
  tokens 37,088 · cost $0.335 · wall 6m 07s · best 31.2×
20261129T090000Z-selective_scan_cpu-5c0000
  selective_scan_cpu · scripted playback · finished (submitted) · turns 3 ·
  tokens – · cost – · wall 1m 41s · best 3.40×"""


def test_ls_narrow_console_lists_each_run_under_its_id(tmp_path: Path) -> None:
    for run in (SCRIPTED, COMPLETE, PARTIAL):
        shutil.copytree(run, tmp_path / run.name)
    assert text_of(render_ls(list_runs(tmp_path, now=NOW)), width=80) == LS_NARROW


def ls_text(listing_dir: Path, width: int) -> str:
    """`agent ls` as the CLI prints it: a run id past a narrow console's edge is not cut."""
    console = Console(file=io.StringIO(), width=width, legacy_windows=False)
    console.print(render_ls(list_runs(listing_dir, now=NOW)), crop=False)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_ls_prints_whole_run_ids_at_any_width(tmp_path: Path) -> None:
    mixed_runs(tmp_path)
    ids = sorted(p.name for p in tmp_path.iterdir())
    for width in (20, 40, 60, 80, 100, 120, 140, 152, 156, 200, 300):
        lines = ls_text(tmp_path, width).splitlines()
        words = {word for line in lines for word in line.split()}
        assert set(ids) <= words, f"width {width}: a run id is broken\n" + "\n".join(lines)
        assert {"37,088", "$0.335", "31.2×"} <= words, f"width {width}: a number is cut"


def test_ls_of_an_empty_folder(tmp_path: Path) -> None:
    assert text_of(render_ls(list_runs(tmp_path))) == "no runs"


def test_a_running_run_waits_for_its_result(tmp_path: Path) -> None:
    run_dir = tmp_path / PARTIAL.name
    shutil.copytree(PARTIAL, run_dir)
    beat = Heartbeat(
        pid=os.getpid(), host=socket.gethostname(), updated_at=NOW.isoformat(), phase="benchmarking"
    )
    (run_dir / "heartbeat.json").write_text(beat.model_dump_json())
    text = show(run_dir, ShowOptions(turn=3, code=False))
    assert "status   running (benchmarking)" in text
    assert "  submitted kernel · 68 lines\n  no result yet (the run is still going)\n" in text
    assert "killed" not in text


def test_a_status_label_says_each_thing_once() -> None:
    from agent.runlog.data import RunStatus

    assert RunStatus("finished", "Finished").label == "finished"  # not "finished (Finished)"
    assert RunStatus("finished", "TargetReached").label == "finished (TargetReached)"
    assert RunStatus("finished", "TurnLimit").label == "stopped (TurnLimit)"
    assert RunStatus("finished", "Interrupted").label == "stopped (Interrupted)"
    failed = RunStatus("finished", "ModelError")
    assert (failed.label, failed.failed) == ("failed (ModelError)", True)
    assert RunStatus("running", phase="compiling").label == "running (compiling)"
    assert RunStatus("killed").label == "killed"


def test_a_speedup_is_written_with_the_times_sign_everywhere() -> None:
    """One way to write a speedup (`0.90×`, agent.views.fmt.fmt_speedup), never also `0.90x`: no f-string in
    agent/ puts an `x` right after a number it formats."""
    agent_dir = Path(__file__).resolve().parent.parent / "agent"
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(agent_dir.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"\}x\b", line)
    ]
    assert found == []
