"""The machine's peaks (fp32 FLOP/s, memory bandwidth) per host, device and torch version: measured once
by a trusted process of their own (tools/worker/peaks.py), then read from `peaks.json` in the cache.
The speed-of-light floor of every timed shape is derived from them (tools/floor.py)."""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from tools.cache import cache_root
from tools.results import EnvInfo, HostPeaks
from tools.secret_env import without_secrets

MEASURE_TIMEOUT_S = 180.0
HARNESS_ROOT = Path(__file__).resolve().parents[2]


# Bumped when what is measured changes, so that a host's older entry is measured again (v2: the fp16 rate).
PEAKS_VERSION = 2


def peaks_key(device: str, env: EnvInfo, threads: int | None = None) -> str:
    """`threads`: a CPU problem's evaluations run that many threads (tools.host.timing_threads), so do its peaks."""
    where = (env.gpu or "cpu") if device == "cuda" else "cpu" + (f", {threads} threads" if threads else "")
    return f"{platform.node()}|{where}|torch {env.torch}|peaks v{PEAKS_VERSION}"


def _cache_file() -> Path:
    return cache_root() / "peaks.json"


def cached_peaks(device: str, env: EnvInfo, threads: int | None = None) -> HostPeaks | None:
    """This host's peaks as cached, or None where they were never measured here."""
    path = _cache_file()
    data = json.loads(path.read_text()) if path.is_file() else {}
    raw = data.get(peaks_key(device, env, threads))
    return HostPeaks.model_validate({**raw, "cached": True}) if raw else None


def _store(peaks: HostPeaks) -> None:
    path = _cache_file()
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[peaks.key] = peaks.model_dump(exclude={"cached"})
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def measure_peaks(device: str, env: EnvInfo, threads: int | None = None) -> HostPeaks:
    """Measure now, in a fresh process (a few seconds: torch's import, one matmul, one copy)."""
    key = peaks_key(device, env, threads)
    cmd = [sys.executable, "-m", "tools.worker.peaks", device, *([str(threads)] if threads else [])]
    pythonpath = os.pathsep.join(p for p in (str(HARNESS_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    try:
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=MEASURE_TIMEOUT_S,
            env={**without_secrets(), "PYTHONPATH": pythonpath},  # trusted, but a key has no use there
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return HostPeaks(
            status="unavailable", device=device, key=key, message=f"peaks not measured: {exc}"[:300]
        )
    last = out.stdout.strip().splitlines()[-1:] or [""]
    try:
        data = json.loads(last[0])
    except json.JSONDecodeError:
        tail = " | ".join(out.stderr.strip().splitlines()[-2:])
        return HostPeaks(
            status="unavailable",
            device=device,
            key=key,
            message=f"peaks not measured: exit {out.returncode}; {tail}"[:300],
        )
    if "error" in data:
        return HostPeaks(
            status="unavailable", device=device, key=key, message=f"peaks not measured: {data['error']}"
        )
    return HostPeaks(status="ok", device=device, key=key, **data)


@functools.cache
def _measured_once(device: str, key: str, env_json: str, threads: int | None) -> HostPeaks:
    """One measurement per process and key: a failure is not retried in every evaluation."""
    peaks = measure_peaks(device, EnvInfo.model_validate_json(env_json), threads)
    if peaks.status == "ok":
        _store(peaks)
    return peaks


def host_peaks(device: str, env: EnvInfo, threads: int | None = None) -> HostPeaks:
    """This host's peaks: cached, else measured now and cached. Call it with the device idle (under its
    lease): the measurement is a timing like any other. `threads`: on the CPU, with that many threads."""
    key = peaks_key(device, env, threads)
    return cached_peaks(device, env, threads) or _measured_once(device, key, env.model_dump_json(), threads)
