"""Pools a killed harness left on tmpfs are removed by the next pool; a live pool's folder never is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tools.supervise.orphans import PREFIX, hold_alive, sweep_orphans

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tools.supervise.orphans import hold_alive
    hold_alive(Path(sys.argv[1]))
    print("held", flush=True)
    time.sleep(600)
    """
)


def _holder(folder: Path) -> subprocess.Popen[str]:
    """A process that holds `folder`'s lock as a pool's harness does, until it is killed."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_killed_harness_pool_is_swept_and_a_live_one_kept(tmp_path: Path) -> None:
    dead, live = tmp_path / f"{PREFIX}1-dead", tmp_path / f"{PREFIX}2-live"
    for folder in (dead, live):
        (folder / "jobs").mkdir(parents=True)
        (folder / "jobs" / "x.bin").write_bytes(b"0" * 1024)
    killed, running = _holder(dead), _holder(live)
    try:
        killed.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops its lock
        killed.wait()
        assert sweep_orphans(tmp_path) == [dead]
        assert not dead.exists()
        assert (live / "jobs" / "x.bin").exists()
    finally:
        for proc in (killed, running):
            proc.kill()
            proc.wait()
    assert sweep_orphans(tmp_path) == [live]  # once its holder is gone too


def test_a_pool_of_this_process_is_held_against_its_own_sweep(tmp_path: Path) -> None:
    """Two pools of one harness (one per device): the second's sweep must not remove the first."""
    first = tmp_path / f"{PREFIX}{os.getpid()}-first"
    first.mkdir()
    fd = hold_alive(first)
    try:
        assert sweep_orphans(tmp_path) == []
        assert first.exists()
    finally:
        os.close(fd)


def test_a_folder_from_before_the_lock_goes_by_its_makers_pid(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    old_dead = (
        tmp_path / f"{PREFIX}{gone.stdout.strip()}-old"
    )  # that pid has exited (reuse this soon is unlikely)
    old_live = tmp_path / f"{PREFIX}{os.getpid()}-old"
    other = tmp_path / "kagent-test-cache-x"
    for folder in (old_dead, old_live, other):
        folder.mkdir()
    assert sweep_orphans(tmp_path) == [old_dead]
    assert old_live.exists()
    assert other.exists()


def test_a_new_pool_removes_what_a_killed_one_left(tmp_path: Path, monkeypatch) -> None:
    from tools.supervise import pool as pool_module

    left = tmp_path / f"{PREFIX}1-left"
    (left / "jobs").mkdir(parents=True)
    (left / ".alive").touch()  # its holder is gone: nothing holds the lock
    monkeypatch.setattr(pool_module, "scratch_root", lambda: tmp_path)
    fresh = pool_module.WarmPool()
    try:
        assert not left.exists()
        assert fresh.root.parent == tmp_path
        assert (fresh.root / ".alive").exists()
        assert sweep_orphans(tmp_path) == []  # the new pool holds its own
    finally:
        fresh.shutdown()
    assert not fresh.root.exists()
