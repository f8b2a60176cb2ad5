"""One input set and its truth serving the evaluations of different candidates that start while it is in use:
truth made once for up to `MAX_USES` evaluations instead of once each (issue 51: at two trajectories the truth
servers were ~97 % busy).

Off unless `KERNEL_AGENT_SHARE_TRUTH=1`. Sharing is sound only where two candidates evaluated at once cannot
talk: a candidate that learns which of its calls another candidate's judge checked, or their outputs, can be
correct only while checked (docs/exploits.md rows 23, 24). The namespaces and the seal close the network,
the process table, every write outside a candidate's own job folder, other jobs' folders, System V IPC and
the keyrings (tests/test_channels.py); covert channels (locks and inotify on shared read-only files, load)
and the process-group fallback, where none of that holds, stay open (docs/evaluation.md "Shared truth"). The rules hold either way:

* only evaluations that draw their own secret seed share (never one given `--seed`, never one that re-times
  the reference), and only of the same problem content (`Problem.content_hash`: the final re-check's doubled
  repetitions are another content, so it never takes a trajectory's set, nor gives one);
* never two evaluations of the same kernel source (a second look at the same contents is no new evidence);
* a set takes new evaluations only until the first of its evaluations ends: no model has read a result
  (its seed, a case's expected values) of a set while a candidate can still be started on it;
* a set whose truth timed the reference for its own evaluation (a new host's first) is not shared: the
  reference's figures reach the cache only as that evaluation ends;
* each evaluation gets its own job folder with its own copy of the inputs (a candidate unsealed by the
  process-group fallback could write the files it reads), its own claim on the truth server that keeps
  the timing shapes' truth, and its own outputs; the last one done makes the server forget the truth.
* seeds and truth stay in this process and the truth server, as for any evaluation.
"""

from __future__ import annotations

import os
import shutil
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from tools.judge._plan import Prepared
from tools.supervise import Job, WarmPool

SHARE_ENV = "KERNEL_AGENT_SHARE_TRUTH"
MAX_USES = 4  # evaluations one input set serves at most: N=4 trajectories' evaluations in flight together


def share_enabled() -> bool:
    return os.environ.get(SHARE_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


@dataclass
class SharedSet:
    """One prepared evaluation's input set offered to other candidates' evaluations: the kernels it serves."""

    origin: Prepared
    content: str
    kernels: set[str] = field(default_factory=set)
    open: bool = True


class TruthShares:
    """The sets of one warm pool open to more evaluations."""

    def __init__(self, uses: int = MAX_USES) -> None:
        self.uses = uses
        self._lock = threading.Lock()
        self._open: list[SharedSet] = []

    def offer(self, prepared: Prepared, content: str, kernel: str) -> None:
        """`prepared`, taken by an evaluation of `kernel`, serves others until one of them ends."""
        if not prepared.ok or self.uses < 2 or times_the_reference(prepared):
            return
        entry = SharedSet(prepared, content, {kernel})
        with self._lock:
            self._open.append(entry)
        prepared.on_discard.append(lambda: self._close(entry))

    def take(self, content: str, kernel: str, parent: Path) -> Prepared | None:
        """An open set of `content` for an evaluation of `kernel`, as an evaluation of its own under `parent`;
        None where no set may serve it."""
        with self._lock:  # the origin's discard waits for the copy: its files exist until then
            for entry in self._open:
                if entry.open and entry.content == content and self.admits(entry, kernel):
                    view = _view(entry.origin, parent)
                    if view is None:
                        continue
                    entry.kernels.add(kernel)
                    view.on_discard.append(lambda: self._close(entry))  # noqa: B023 (returned at once)
                    return view
        return None

    def admits(self, entry: SharedSet, kernel: str) -> bool:
        return kernel not in entry.kernels and len(entry.kernels) < self.uses

    def open_sets(self) -> int:
        with self._lock:
            return len(self._open)

    def _close(self, entry: SharedSet) -> None:
        with self._lock:
            entry.open = False
            if entry in self._open:
                self._open.remove(entry)


def times_the_reference(prepared: Prepared) -> bool:
    """Whether its truth timed the reference (eager or launch-free) for its own evaluation, which caches it only
    as it ends: another evaluation on the set would find no reference figures yet (a new host's first ones)."""
    timed = any(t.truth.time_reference or t.truth.time_launch_free for t in prepared.plan.timing)
    return timed and not prepared.references_cached


def _view(origin: Prepared, parent: Path) -> Prepared | None:
    """The origin's data and truth for one more evaluation: a job of its own with a copy of the inputs, the
    plan's paths moved there, its own claim on the truth server (None where that server is gone)."""
    kept = origin.kept.shared() if origin.kept is not None else None
    if origin.kept is not None and kept is None:
        return None
    job = Job.create(None, parent)
    try:
        for path in origin.job.shared.iterdir():
            target = job.shared / path.name
            shutil.copytree(path, target) if path.is_dir() else shutil.copyfile(path, target)
    except BaseException:
        job.cleanup()
        if kept is not None:
            kept.forget()
            kept.unclaim()
        raise
    plan = origin.plan.relocated(origin.job.root, job.root)
    return Prepared(job, plan, origin.master, origin.truth, dict(origin.truths), {}, kept, True)


_SHARES: weakref.WeakKeyDictionary[WarmPool, TruthShares] = weakref.WeakKeyDictionary()
_SHARES_LOCK = threading.Lock()


def shares_of(pool: WarmPool) -> TruthShares:
    with _SHARES_LOCK:
        shares = _SHARES.get(pool)
        if shares is None:
            shares = _SHARES[pool] = TruthShares()
        return shares
