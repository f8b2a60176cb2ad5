"""Secrets stay out of candidate code on every path (issue 52): with canary values in ANTHROPIC_API_KEY,
OPENAI_API_KEY and other key-, token- and secret-named variables of the `agent` command's environment, a
candidate that reads its os.environ and every /proc/<pid>/environ and /proc/<pid>/cmdline it can see, at
import and inside forward, and surfaces what it found (stdout, stderr, an exception's message, files in its
working dir), leaves no canary in any tool result, log or run file: `agent bench`, `agent run` (scripted
playback), `agent suite`, `agent run --executor ray`, and `agent bench` with containment forced off.

The tests can fail: the candidate's report is seen in the logs each time (its marker), and a canary in an
allowlisted variable (TERM), which does reach the candidate, is found and surfaced by it (the control).
`agent redteam` too: its loop is `agent run`'s, and its re-judge evaluates the candidate again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.adversarial.candidates import with_module_code
from tests.helpers import REPO, TESTS
from tools.secret_env import looks_secret, secret_values, withheld, without_secrets

TAG = uuid.uuid4().hex[:10]
CANARIES = {
    "ANTHROPIC_API_KEY": f"sk-ant-CANARY-{TAG}-anthropic",
    "ANTHROPIC_AUTH_TOKEN": f"CANARY-{TAG}-auth",
    "OPENAI_API_KEY": f"sk-CANARY-{TAG}-openai",
    "GITHUB_TOKEN": f"ghp_CANARY-{TAG}-github",
    "AWS_SECRET_ACCESS_KEY": f"CANARY-{TAG}-aws",
    "MY_SERVICE_PASSWORD": f"CANARY-{TAG}-password",
}
CONTROL = f"xterm-CANARY-{TAG}-control"  # TERM is allowlisted: this one reaches the candidate

SNOOP = r"""
import os, re, sys
_PATTERN = re.compile(rb"[A-Za-z0-9_.-]*CANARY[A-Za-z0-9_.-]*")
def _snoop(where):
    hits, files = set(), 0
    hits.update(_PATTERN.findall("\0".join(f"{k}={v}" for k, v in os.environ.items()).encode()))
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as fh:
                    hits.update(_PATTERN.findall(fh.read()))
                files += 1
            except OSError:
                pass
    line = f"SNOOP-{where} files={files} hits=[{' '.join(sorted(h.decode() for h in hits))}]"
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)
    with open(f"snoop-{where}.txt", "w") as fh:
        fh.write(line)
    return line
_snoop("import")
"""


def snoop_candidate() -> str:
    """The baseline, snooping at import and in forward, and raising what forward found as its error."""
    src = with_module_code(*SNOOP.strip("\n").splitlines())
    head = "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
    assert head in src, "baseline.py changed: update tests/test_secrets.py"
    return src.replace(head, head + '        raise RuntimeError(_snoop("forward"))\n', 1)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not looks_secret(k)}
    env.update(CANARIES, TERM=CONTROL, COLUMNS="200", NO_COLOR="1", KERNEL_AGENT_RUNS=str(tmp_path / "runs"))
    env.update(extra)
    return env


def agent(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=REPO,
        env=_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=900,
    )


def _files_with_canary(root: Path) -> list[str]:
    """Every file under `root` holding a canary. The build cache is shared with the rest of the run: another
    test's build may remove its private folder while this walks it (a file it then publishes is read there)."""
    found = []
    for folder, _, names in os.walk(root):  # a folder gone meanwhile is skipped, not an error
        for name in names:
            path = Path(folder) / name
            try:
                if path.is_symlink() or not path.is_file():
                    continue
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            found += [f"{path}: {key}" for key, v in CANARIES.items() if v.encode() in data]
    return found


def assert_no_canary(done: subprocess.CompletedProcess[str], *folders: Path) -> None:
    text = done.stdout + done.stderr
    assert [name for name, v in CANARIES.items() if v in text] == []
    cache = Path(os.environ["KERNEL_AGENT_CACHE"])
    assert [f for folder in (*folders, cache) for f in _files_with_canary(folder)] == []


def playback_problem(tmp_path: Path) -> Path:
    """scan_tiny_playback with a trajectory of one step: a benchmark of the snooping candidate."""
    spec = (TESTS / "problems" / "scan_tiny_playback.yaml").read_text()
    reference = (REPO / "problems" / "selective_scan" / "reference.py").resolve()
    spec = spec.replace("../../problems/selective_scan/reference.py", str(reference))
    spec = spec.replace("name: scan_tiny_playback", "name: snoop")
    spec = spec.replace("trajectory: scan_tiny_playback/", "trajectory: snoop/")
    assert "trajectory: snoop/trajectory.yaml" in spec, "scan_tiny_playback.yaml changed: update this test"
    problem = tmp_path / "problems" / "snoop.yaml"
    (problem.parent / "snoop").mkdir(parents=True)
    problem.write_text(spec)
    (problem.parent / "snoop" / "candidate.py").write_text(snoop_candidate())
    (problem.parent / "snoop" / "trajectory.yaml").write_text(
        "description: a candidate that looks for keys\nsteps:\n  - text: Benchmark it.\n    tool_calls:\n"
        "      - name: benchmark\n        kernel_file: candidate.py\n  - text: Done.\n"
    )
    return problem


def test_agent_bench_leaks_no_secret_and_the_snoop_is_heard(tmp_path: Path) -> None:
    kernel = tmp_path / "snoop.py"
    kernel.write_text(snoop_candidate())
    done = agent(tmp_path, "bench", str(TESTS / "problems" / "scan_tiny.yaml"), str(kernel), "--json")
    text = done.stdout + done.stderr
    assert "SNOOP-import files=" in text, text[-3000:]
    assert "SNOOP-forward files=" in text  # the exception's message reached the result
    assert CONTROL in text  # the control: what does reach the candidate is found and surfaced
    assert_no_canary(done, tmp_path)


def test_agent_bench_with_containment_off_leaks_no_secret_of_the_harness(tmp_path: Path) -> None:
    """No PID namespace: the candidate sees every process, the `agent` command's included. The command has
    blanked its keys in its own /proc/<pid>/environ and is non-dumpable; its children got none."""
    kernel = tmp_path / "snoop.py"
    kernel.write_text(snoop_candidate())
    problem = str(TESTS / "problems" / "scan_tiny.yaml")
    done = agent(tmp_path, "bench", problem, str(kernel), "--json", KERNEL_AGENT_ISOLATION="process_group")
    text = done.stdout + done.stderr
    files = [int(w.split("=")[1]) for w in text.split() if w.startswith("files=")]
    assert files, text[-3000:]
    assert max(files) > 2  # it did read other processes' environ and cmdline
    assert CONTROL in text
    assert_no_canary(done, tmp_path)


def test_agent_run_leaks_no_secret(tmp_path: Path) -> None:
    problem = playback_problem(tmp_path)
    done = agent(tmp_path, "run", str(problem), "--model", "scripted", "--max-turns", "3")
    runs = tmp_path / "runs"
    events = "".join(p.read_text() for p in runs.rglob("events.jsonl"))
    assert "SNOOP-forward files=" in events, done.stdout[-2000:] + done.stderr[-2000:]
    assert_no_canary(done, tmp_path)


def test_agent_suite_leaks_no_secret(tmp_path: Path) -> None:
    problem = playback_problem(tmp_path)
    runs = tmp_path / "runs"
    done = agent(
        tmp_path, "suite", str(problem), "--model", "scripted", "--max-turns", "3", "--runs-dir", str(runs)
    )
    events = "".join(p.read_text() for p in runs.rglob("events.jsonl"))
    assert "SNOOP-forward files=" in events, done.stdout[-2000:] + done.stderr[-2000:]
    assert_no_canary(done, tmp_path)


def test_agent_redteam_leaks_no_secret(tmp_path: Path) -> None:
    """The red-team loop, and its stricter re-judge, which benchmarks the snooping candidate again."""
    problem = playback_problem(tmp_path)
    trajectory = problem.parent / "snoop" / "trajectory.yaml"
    done = agent(
        tmp_path,
        "redteam",
        str(problem),
        "--model",
        "scripted",
        "--trajectory",
        str(trajectory),
        "--max-turns",
        "3",
    )
    events = "".join(p.read_text() for p in (tmp_path / "runs").rglob("events.jsonl"))
    assert "SNOOP-forward files=" in events, done.stdout[-2000:] + done.stderr[-2000:]
    assert_no_canary(done, tmp_path)


@pytest.mark.slow  # starts Ray: 18-24 s
def test_agent_run_on_ray_leaks_no_secret(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    problem = playback_problem(tmp_path)
    done = agent(
        tmp_path, "run", str(problem), "--model", "scripted", "--max-turns", "3", "--executor", "ray"
    )
    events = "".join(p.read_text() for p in (tmp_path / "runs").rglob("events.jsonl"))
    assert "SNOOP-forward files=" in events, done.stdout[-2000:] + done.stderr[-2000:]
    assert_no_canary(done, tmp_path)
    ray_logs = Path(os.environ.get("TMPDIR", "/tmp")) / "ray"
    if ray_logs.is_dir():  # the local instance's own logs (session_latest)
        assert _files_with_canary(ray_logs / "session_latest") == []


# --- the pieces ------------------------------------------------------------------------------------------


def test_secret_names_are_told_from_settings() -> None:
    assert all(looks_secret(n) for n in CANARIES)
    assert all(looks_secret(n) for n in ("HF_TOKEN", "PGPASSWORD", "SSH_AUTH_SOCK", "NPM_APIKEY"))
    assert not any(looks_secret(n) for n in ("PATH", "KERNEL_AGENT_JOB", "TORCH_CUDA_ARCH_LIST", "KEYBOARD"))


def test_without_secrets_drops_names_and_values_that_carry_one() -> None:
    env = {"OPENAI_API_KEY": "sk-abcdef", "PATH": "/bin", "CC": "gcc --key=sk-abcdef", "LANG": "C"}
    assert without_secrets(env) == {"PATH": "/bin", "LANG": "C"}
    assert secret_values(env) == ["sk-abcdef"]


def test_hide_own_environ_blanks_the_block_keeps_os_environ_and_children_inherit_none(tmp_path: Path) -> None:
    """In a fresh interpreter started with a key: afterwards its /proc/self/environ holds no key, os.environ
    still does, a child started without `env` gets none, and one without CAP_SYS_PTRACE cannot read it."""
    script = (
        "import os, subprocess\n"
        "from tools.secret_env import hide_own_environ\n"
        "assert hide_own_environ() == []\n"
        "raw = open('/proc/self/environ', 'rb').read()\n"
        f"print('block', {CANARIES['OPENAI_API_KEY']!r}.encode() in raw)\n"
        "print('os.environ', os.environ.get('OPENAI_API_KEY'))\n"
        "child = subprocess.run(['sh', '-c', 'echo child=$OPENAI_API_KEY'], capture_output=True, text=True)\n"
        "print(child.stdout.strip())\n"
        "peek = ['setpriv', '--bounding-set=-all', '--inh-caps=-all', 'cat', f'/proc/{os.getpid()}/environ']\n"
        "print('peek', subprocess.run(peek, capture_output=True).returncode)\n"
    )
    env = {**without_secrets(), "OPENAI_API_KEY": CANARIES["OPENAI_API_KEY"], "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == ["block False", f"os.environ {CANARIES['OPENAI_API_KEY']}", "child="]
    if shutil.which("setpriv"):
        assert lines[3] != "peek 0"  # non-dumpable: unreadable without CAP_SYS_PTRACE


def test_withheld_takes_keys_out_for_a_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-abcdef")
    with withheld():
        assert "OPENAI_API_KEY" not in os.environ
    assert os.environ["OPENAI_API_KEY"] == "sk-abcdef"
