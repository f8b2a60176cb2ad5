"""A run's folder: `run.json`, `events.jsonl`, `kernels/NNN.py`, `best.py`/`best.json`, `summary.json`,
`heartbeat.json`.

Events are appended and flushed one line at a time, so a killed process loses at most the event in
flight; every other file is replaced atomically (write a temp file, then rename). Reading a run back is
agent.runlog.reader's (`read_events`, `EventTail`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from agent.runlog.events import (
    BestRecord,
    Event,
    Heartbeat,
    RunEndEvent,
    RunEnvironment,
    RunInfo,
    RunSummary,
)
from tools.problem import Problem

HEARTBEAT_SECONDS = 2.0


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_model(path: Path, record: BaseModel) -> None:
    write_atomic(path, record.model_dump_json(indent=2) + "\n")


def new_run_dir(runs_dir: Path, problem_name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = runs_dir / f"{stamp}-{problem_name}-{secrets.token_hex(3)}"
    path.mkdir(parents=True)
    return path


def collect_environment(problem: Problem) -> RunEnvironment:
    from tools.envinfo import collect_env, nvidia_smi  # heavy (torch): only when a run starts

    env = collect_env(problem)
    smi = nvidia_smi() if env.gpu else None
    return RunEnvironment(
        host=env.host,
        gpu=env.gpu,
        driver=smi["driver"] if smi else None,
        torch=env.torch,
        cuda=env.cuda,
        python=env.python,
        harness_sha=env.harness_sha,
    )


class RunLog:
    def __init__(self, run_dir: Path, info: RunInfo) -> None:
        self.dir = run_dir
        self.info = info
        (run_dir / "kernels").mkdir(exist_ok=True)
        self._events = (run_dir / "events.jsonl").open("a")
        self._lock = threading.Lock()
        self._beat_lock = threading.Lock()
        self._phase = "starting"
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @classmethod
    def create(cls, run_dir: Path, info: RunInfo) -> RunLog:
        write_model(run_dir / "run.json", info)
        return cls(run_dir, info)

    @classmethod
    def reopen(cls, run_dir: Path) -> RunLog:
        info = RunInfo.model_validate_json((run_dir / "run.json").read_text())
        log = cls(run_dir, info)
        log._drop_torn_tail()
        return log

    def _drop_torn_tail(self) -> None:
        """A line cut by a kill has no newline; appending after it would glue two events together."""
        path = self.dir / "events.jsonl"
        text = path.read_text()
        if text and not text.endswith("\n"):
            write_atomic(path, text[: text.rfind("\n") + 1])
            self._events.close()
            self._events = path.open("a")

    def append(self, event: Event) -> None:
        with self._lock:
            self._events.write(event.model_dump_json() + "\n")
            self._events.flush()

    def save_kernel(self, code: str) -> str:
        with self._lock:  # trajectories of a parallel run save concurrently: one number each
            kernels = self.dir / "kernels"
            number = len(list(kernels.glob("*.py"))) + 1
            rel = f"kernels/{number:03d}.py"
            write_atomic(self.dir / rel, code)
            return rel

    def write_best(self, record: BestRecord) -> None:
        shutil.copyfile(self.dir / record.kernel_path, self.dir / ".best.py.tmp")
        (self.dir / ".best.py.tmp").replace(self.dir / "best.py")
        write_model(self.dir / "best.json", record)

    def remove_best(self) -> None:
        for name in ("best.py", "best.json"):
            (self.dir / name).unlink(missing_ok=True)

    def end(self, summary: RunSummary) -> None:
        """The run's last event, its summary, and the heartbeat's last word."""
        self.append(RunEndEvent(exit_status=summary.exit_status, message=summary.message))
        write_model(self.dir / "summary.json", summary)
        self.close()

    # heartbeat: a viewer tells a live run from a killed one by its age
    def set_phase(self, phase: str) -> None:
        self._phase = phase
        self._beat()

    def _beat(self) -> None:
        with self._beat_lock:  # one temp file name: writers (threads of a parallel run) take turns
            write_model(
                self.dir / "heartbeat.json",
                Heartbeat(pid=os.getpid(), host=socket.gethostname(), phase=self._phase),
            )

    def start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_SECONDS):
                self._beat()

        self._beat()
        self._heartbeat = threading.Thread(target=beat, name="heartbeat", daemon=True)
        self._heartbeat.start()

    def close(self, phase: str = "ended") -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        self._phase = phase
        self._beat()
        self._events.close()
