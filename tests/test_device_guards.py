"""The device state a candidate could carry across calls, on the CPU (issue 52). Persisting L2 against the timing
loop's flush (GUIDE §2 row 30): the loop's record of
each reset and of the L2 set aside (tools/worker/l2.py, driven through real ctypes function pointers that
stand in for the CUDA runtime's), and what the judge makes of it (tools/judge/_device_guards.py): a
set-aside with every reset done is said, a set-aside the loop could not reset is a disagreement of the clocks
(re-measured, then `suspect`). The same on a GPU, with a candidate that sets L2 aside and marks its weights
persisting: tests/adversarial/gpu/test_gpu_guards.py. Shared memory poisoned with NaN before every call
(GUIDE §2 row 27, tools/worker/smem.py): its PTX assembles, its pattern is NaN at every width, and without a
GPU it does nothing and says why."""

from __future__ import annotations

import ctypes
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY
from tools.judge._device_guards import l2_disagreement, l2_notes
from tools.judge._verdicts import Verdicts, timing_guards
from tools.problem import load_problem
from tools.results import ShapeTiming, TimingStats
from tools.supervise._toolchain import cuda_home
from tools.worker import candidate, l2, smem, timing
from tools.worker.l2 import L2Watch, set_aside_bytes

GET_LIMIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_size_t), ctypes.c_int)
RESET = ctypes.CFUNCTYPE(ctypes.c_int)


@dataclass
class FakeRuntime:
    """cudaCtxResetPersistingL2Cache and cudaDeviceGetLimit as C function pointers over Python state."""

    set_aside: int = 0
    reset_rc: int = 0
    asked: list[int] = field(default_factory=list)

    def functions(self) -> tuple[object, object]:
        def get_limit(ptr: ctypes._Pointer[ctypes.c_size_t], limit: int) -> int:
            self.asked.append(limit)
            ptr[0] = self.set_aside
            return 0

        self._keep = (RESET(lambda: self.reset_rc), GET_LIMIT(get_limit))  # alive as long as the runtime
        return self._keep


def stats(set_aside: int | None, reset: str | None, clock: str = "cuda_event") -> TimingStats:
    return TimingStats(
        median_ms=1.0, rse=0.01, n=10, min_ms=1.0, max_ms=1.0, mean_ms=1.0, clock=clock,
        batch_ms=20.0, parent_batch_ms=20.0, l2_reset=reset, l2_set_aside_bytes=set_aside,
    )  # fmt: skip


def test_the_watch_reads_the_set_aside_through_the_runtimes_own_call() -> None:
    rt = FakeRuntime(set_aside=30 << 20)
    reset, get_limit = rt.functions()
    assert set_aside_bytes(get_limit) == 30 << 20  # type: ignore[arg-type]
    assert rt.asked == [0x06]  # cudaLimitPersistingL2CacheSize
    watch = L2Watch(reset, get_limit)  # type: ignore[arg-type]
    watch.observe()
    rt.set_aside = 0  # put back by the candidate before the loop ends: the largest seen stays
    watch.observe()
    watch.reset()
    assert (watch.set_aside, watch.resets, watch.status()) == (30 << 20, 1, "ok")


def test_only_what_is_set_aside_beyond_the_devices_own_counts() -> None:
    """An H100 host read 9.4 MiB set aside with no candidate run (2026-12-06): every honest evaluation there was
    told a candidate had set it aside. The worker reads the device's own before the candidate's import."""
    rt = FakeRuntime(set_aside=9830400)
    reset, get_limit = rt.functions()
    l2.record_default(get_limit)  # type: ignore[arg-type]
    try:
        watch = L2Watch(reset, get_limit)  # type: ignore[arg-type]
        watch.observe()
        assert watch.set_aside == 0
        rt.set_aside = 9830400 + (30 << 20)  # then a candidate sets more aside
        watch.observe()
        assert watch.set_aside == 30 << 20
    finally:
        l2.DEFAULT_SET_ASIDE.clear()


def test_a_failing_or_missing_reset_is_said() -> None:
    rt = FakeRuntime(reset_rc=801)
    reset, get_limit = rt.functions()
    watch = L2Watch(reset, get_limit)  # type: ignore[arg-type]
    watch.reset()
    watch.reset()
    assert watch.status() == "failed: 2 of 2 resets returned cudaError 801"
    assert L2Watch(None, None).status().startswith("unavailable:")
    assert set_aside_bytes(None) is None


def test_a_set_aside_the_loop_could_not_reset_is_a_disagreement_and_one_it_reset_is_said() -> None:
    unreset = stats(32 << 20, "failed: 3 of 3 resets returned cudaError 801")
    why = l2_disagreement("b16", unreset)
    assert why is not None
    assert why.startswith("b16: 32.0 MiB of L2 was set aside for persisting accesses")
    assert "cudaError 801" in why
    assert l2_disagreement("b16", stats(32 << 20, "ok")) is None
    assert l2_disagreement("b16", stats(0, "unavailable: no runtime")) is None  # nothing set aside: no harm
    assert l2_disagreement("b16", stats(None, None, clock="host")) is None
    timed = ShapeTiming(name="b16", primary=True, sizes={}, candidate=stats(8 << 20, "ok"))
    assert l2_notes([timed]) == [
        "b16: the candidate set aside 8.0 MiB of L2 for persisting accesses; persisting lines were reset "
        "before every flush, so each call still started cold"
    ]


def test_the_judge_counts_an_unreset_set_aside_as_a_disagreement_of_the_clocks() -> None:
    problem = load_problem(TINY)
    verdicts = Verdicts(problem=problem, plan=None)  # type: ignore[arg-type]
    shape = problem.spec.timing[0]
    unreset = stats(
        32 << 20, "unavailable: no CUDA runtime with cudaCtxResetPersistingL2Cache in this process"
    )
    timing_guards(verdicts, shape, ShapeTiming(name=shape.name, primary=True, sizes={}, candidate=unreset))
    assert list(verdicts.disagreements) == [shape.name]
    assert "set aside for persisting accesses" in verdicts.disagreements[shape.name]


def test_the_loops_runtime_references_are_checked_for_tampering(monkeypatch: pytest.MonkeyPatch) -> None:
    assert candidate.tampered_timers() == []
    monkeypatch.setattr(timing, "_RESET_L2", lambda: 0)
    assert candidate.tampered_timers() == ["tools.worker.timing._RESET_L2"]


def test_a_cpu_loop_records_no_l2_state() -> None:
    samples = timing.measure(
        lambda i: None, lambda i: None, device="cpu", warmup=0, min_iters=2, max_iters=3,
        target_rse=0.5, max_seconds=1.0,
    )  # fmt: skip
    assert (samples.l2_reset, samples.l2_set_aside_bytes) == (None, None)
    assert TimingStats.model_validate(samples.stats()).l2_reset is None


# --- shared memory poisoned before every call (tools/worker/smem.py) ------------------------------------------


@pytest.mark.nvcc
def test_the_shared_memory_poison_is_valid_ptx_for_hopper_and_older(tmp_path: Path) -> None:
    """The driver JIT-compiles this PTX on the GPU; ptxas here proves it assembles for the H100/H200 (sm_90)
    and the oldest architecture CUDA 13 builds for (sm_75)."""
    ptxas = Path(cuda_home() or "/usr/local/cuda") / "bin" / "ptxas"
    ptx = tmp_path / "poison.ptx"
    ptx.write_bytes(smem.PTX)
    for arch in ("sm_90", "sm_75"):
        out = subprocess.run(
            [str(ptxas), f"-arch={arch}", str(ptx), "-o", str(tmp_path / f"{arch}.cubin")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
    assert f".visible .entry {smem.KERNEL}(" in smem.PTX.decode()
    assert b"st.volatile.shared.u32" in smem.PTX  # kept: a plain store to memory nobody reads may be dropped


def test_the_pattern_is_nan_as_float32_and_as_each_half() -> None:
    word = torch.tensor([smem.PATTERN], dtype=torch.int64).to(torch.int32)
    assert torch.isnan(word.view(torch.float32)).all()
    assert torch.isnan(word.view(torch.float16)).all()
    assert torch.isnan(word.view(torch.bfloat16)).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a GPU only")
def test_without_a_gpu_the_poison_does_nothing_and_says_why() -> None:
    smem.poison_shared()
    assert smem.status().startswith("unavailable: "), smem.status()


def test_the_shared_memory_poison_is_checked_for_tampering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smem, "poison_shared", lambda: None)
    assert candidate.tampered_timers() == ["tools.worker.smem.poison_shared"]
