"""One input set and its truth shared by different candidates' evaluations in flight together
(tools/judge/_share.py, KERNEL_AGENT_SHARE_TRUTH=1): who may take a set, what each evaluation gets of it,
and that verdicts on a shared set are the verdicts of a set of one's own. Real truth server, real workers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.candidates import scan_variants as v
from tools import benchmark
from tools.envinfo import collect_env
from tools.judge._plan import Prepared, prepare
from tools.judge._share import SHARE_ENV, TruthShares, share_enabled, shares_of
from tools.problem import Problem
from tools.supervise import WarmPool


@pytest.fixture(scope="module")
def reference_timed(tiny: Problem, warm: WarmPool) -> Iterator[None]:
    """The baseline built and the reference's medians cached, as after a run's first evaluation. Medians
    serve only where timed on a quiet host (tools/cache/reference_times.py `servable`; tests/test_host_load.py
    pins that rule): here they serve whatever this shared host's load, or every set would time the reference
    anew, and such a set is never shared (its own test below)."""
    with pytest.MonkeyPatch.context() as patch:
        for where in ("tools.judge._ahead", "tools.cache.reference_times"):
            patch.setattr(f"{where}.servable", lambda stats: stats is not None)
        first = benchmark(tiny, v.baseline(), pool=warm)
        assert first.status == "ok", first.message
        warm.wait_prefetch(tiny.data_hash)
        yield


def _made(tiny: Problem, warm: WarmPool, refresh_reference: bool = False) -> Prepared:
    """One evaluation's set and truth, made by the pool's truth server as a prefetch would make it."""
    item = prepare(
        tiny, collect_env(tiny), 123456789012345, refresh_reference=refresh_reference, pool=warm,
        parent=warm.jobs_dir, ahead=True,
    )  # fmt: skip
    assert item.ok
    assert item.kept is not None
    assert item.kept.reclaim()
    return item


@pytest.fixture
def made(tiny: Problem, warm: WarmPool, reference_timed: None) -> Prepared:
    return _made(tiny, warm)


def test_a_set_whose_truth_timed_the_reference_is_not_shared(
    tiny: Problem, warm: WarmPool, reference_timed: None
) -> None:
    """Its evaluation caches the reference's figures only as it ends: another one would find none yet."""
    timed = _made(tiny, warm, refresh_reference=True)
    try:
        shares = TruthShares()
        shares.offer(timed, tiny.content_hash, "kernel-a")
        assert shares.take(tiny.content_hash, "kernel-b", warm.jobs_dir) is None
    finally:
        timed.discard()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_sharing_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARE_ENV, raising=False)
    assert not share_enabled()
    monkeypatch.setenv(SHARE_ENV, "1")
    assert share_enabled()


def test_a_set_serves_other_kernels_never_the_same_one_nor_the_final_recheck(
    tiny: Problem, warm: WarmPool, made: Prepared
) -> None:
    from agent.toolbox import more_repetitions

    shares = TruthShares(uses=3)
    shares.offer(made, tiny.content_hash, "kernel-a")
    assert shares.take(tiny.content_hash, "kernel-a", warm.jobs_dir) is None  # the same source: never
    assert shares.take(more_repetitions(tiny).content_hash, "kernel-b", warm.jobs_dir) is None  # the re-check
    b = shares.take(tiny.content_hash, "kernel-b", warm.jobs_dir)
    assert b is not None
    assert shares.take(tiny.content_hash, "kernel-b", warm.jobs_dir) is None  # b's source again: never
    c = shares.take(tiny.content_hash, "kernel-c", warm.jobs_dir)
    assert c is not None
    assert shares.take(tiny.content_hash, "kernel-d", warm.jobs_dir) is None  # three uses at most
    try:
        # Each its own folder and its own copy of the same inputs; the same seed and kept truth.
        assert len({made.job.root, b.job.root, c.job.root}) == 3
        assert _files(b.job.shared) == _files(made.job.shared)
        assert all(not (b.job.shared / n).samefile(made.job.shared / n) for n in _files(b.job.shared))
        assert b.master == made.master
        assert b.kept is not None
        assert made.kept is not None
        assert b.kept.handle == made.kept.handle
        assert made.kept.users.count == 3
        # The candidate's request names only its own folder, and no seed; no truth lies in its job.
        request = b.plan.candidate_request().model_dump_json()
        assert str(made.job.root) not in request
        assert str(b.job.root) in request
        assert not any(secret in request for secret in b.plan.secrets(b.master))
        assert not list(b.job.root.rglob("*.truth.pt"))
    finally:
        c.discard()
    # The first of its evaluations done: the set takes no new one, even of a new kernel.
    assert shares.take(tiny.content_hash, "kernel-e", warm.jobs_dir) is None
    assert shares.open_sets() == 0
    assert made.kept.usable()
    made.discard()
    assert made.kept.users.count == 1  # b still judges on it: not forgotten yet
    b.discard()
    assert made.kept.users.count == 0
    assert not b.job.root.exists()


def test_an_evaluation_on_another_candidates_set_is_judged_as_on_its_own(
    tiny: Problem, warm: WarmPool, monkeypatch: pytest.MonkeyPatch, reference_timed: None
) -> None:
    """B starts while A's evaluation is in flight and takes A's set: same seed, no truth made for it; a wrong
    kernel there is still wrong. Once both are done, the next evaluation draws a new seed."""
    monkeypatch.setenv(SHARE_ENV, "1")
    results: dict[str, object] = {}
    a = threading.Thread(target=lambda: results.update(a=benchmark(tiny, v.baseline(), pool=warm)))
    a.start()
    shares = shares_of(warm)
    deadline = time.monotonic() + 60
    while shares.open_sets() == 0 and a.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    b = benchmark(tiny, v.wrong_no_skip(), pool=warm)
    a.join()
    first = results["a"]
    assert isinstance(first, type(b))
    assert first.status == "ok", first.message
    assert b.status == "incorrect", b.message
    assert first.truth_source in ("made_now", "made_ahead")
    assert b.truth_source == "shared"
    assert b.seed == first.seed
    assert "truth_start" not in b.phases
    after = benchmark(tiny, python_only_variant(), pool=warm)
    assert after.status == "ok", after.message
    assert after.truth_source != "shared"
    assert after.seed != first.seed


def python_only_variant() -> str:
    """The baseline under another kernel hash with the same build (a comment outside its C++ source)."""
    return v.baseline() + "\n# another candidate, same build\n"
