"""How many trajectories a run takes at once: `agent run --parallel auto` picks the most this machine's
resources hold; `--parallel N` runs N unless a resource holds fewer, and says which and why.

Each resource's cap, from how evaluations use it (agent/execution/leases.py, tools/supervise/pool.py):

* cores: compiles run on a pool of one slot per core, and each trajectory's build holds one;
* host (a CPU problem): its timings hold the whole host, one at a time; a second trajectory compiles and
  thinks meanwhile, a third only queues for the host;
* GPUs (a CUDA problem): one timing lease per GPU at a time; an evaluation holds it about a third of its
  time (H200, 683690c: timed loops 31 % of the wall with two in flight), so three keep it busy and a fourth
  trajectory thinks or compiles; none visible: one trajectory, whose evaluations say `no_device`;
* GPU memory: four evaluations in flight with three truth servers and five workers made ahead took up to
  60.3 GiB on the selective scan (H100, 5a89d46, 2026-12-07: 61715 MiB; 60.1 GiB on 4fc9179 with three made
  ahead, 59.7 GiB on b391d45; two took 55.6 GiB on the H200, 2026-12-05c); a GPU with less takes one
  trajectory;
* truth: each evaluation's input set and float64 truth; at two trajectories a GPU the truth servers were
  ~97 % busy (H200, 683690c), so two a GPU, unless input sets are shared between candidates' evaluations
  (`KERNEL_AGENT_SHARE_TRUTH=1`, tools/judge/_share.py): a set then serves the evaluations in flight
  together (tools/supervise/pool.py `evaluations_per_gpu`, four by default), so up to eight a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from agent.runlog.events import ParallelChoice, ParallelLimit

TRAJECTORIES_PER_GPU = 4
CPU_HOST_TRAJECTORIES = 2
TRUTH_TRAJECTORIES_PER_GPU = 2  # with a truth made for every evaluation
POOL_PEAK_GIB = 60.3


@dataclass(frozen=True)
class Machine:
    """What the choice depends on: cores, the GPUs a CUDA problem times on, the first one's memory, and
    whether input sets are shared (how many evaluations one serves at most)."""

    cores: int
    gpus: int
    gpu_memory_gib: float | None
    truth_uses: int  # 1: a truth made for every evaluation

    @classmethod
    def here(cls, device: str, gpus: list[int] | None) -> Machine:
        from agent.execution.leases import cpu_cores
        from tools.envinfo import nvidia_smi
        from tools.judge import MAX_SHARED_USES, share_enabled
        from tools.supervise import evaluations_per_gpu

        cuda = device == "cuda"
        smi = nvidia_smi() if cuda and gpus else None
        memory = _gib(smi.get("memory", "")) if smi else None
        # a set serves the evaluations in flight together: at most evaluations_per_gpu() of them on one GPU
        uses = min(MAX_SHARED_USES, evaluations_per_gpu()) if share_enabled() else 1
        return cls(
            cores=cpu_cores(), gpus=len(gpus or []) if cuda else 0, gpu_memory_gib=memory, truth_uses=uses
        )


def _gib(text: str) -> float | None:
    """nvidia-smi's "143771 MiB" in GiB."""
    match = re.match(r"\s*([\d.]+)\s*MiB", text)
    return float(match.group(1)) / 1024 if match else None


def limits(device: str, machine: Machine) -> list[ParallelLimit]:
    """Each resource's cap on the trajectories at once, and why."""
    caps = [
        ParallelLimit(
            resource="cores", most=max(1, machine.cores), why=f"{machine.cores} cores, one compile slot each"
        )
    ]
    if device != "cuda":
        why = "a CPU problem's timings hold the whole host one at a time: a second trajectory compiles meanwhile"
        return [*caps, ParallelLimit(resource="host", most=CPU_HOST_TRAJECTORIES, why=why)]
    if machine.gpus == 0:
        return [
            *caps,
            ParallelLimit(resource="gpus", most=1, why="no GPU visible: every evaluation says no_device"),
        ]
    gpus = machine.gpus
    caps.append(
        ParallelLimit(
            resource="gpus", most=TRAJECTORIES_PER_GPU * gpus,
            why=f"{gpus} GPU(s), one timed loop at a time each: ~3 evaluations keep one busy, a 4th thinks",
        )
    )  # fmt: skip
    memory = machine.gpu_memory_gib
    if memory is not None and memory < POOL_PEAK_GIB:
        why = f"{memory:.0f} GiB a GPU: four evaluations in flight took up to {POOL_PEAK_GIB} GiB (selective scan)"
        caps.append(ParallelLimit(resource="gpu_memory", most=gpus, why=why))
    most = TRUTH_TRAJECTORIES_PER_GPU * machine.truth_uses * gpus
    why = (
        f"an input set shared by up to {machine.truth_uses} evaluations (KERNEL_AGENT_SHARE_TRUTH)"
        if machine.truth_uses > 1
        else "a truth made for every evaluation: its servers were ~97 % busy at 2 a GPU "
        "(KERNEL_AGENT_SHARE_TRUTH=1 shares input sets)"
    )
    return [*caps, ParallelLimit(resource="truth", most=most, why=why)]


def choose_parallel(asked: int | Literal["auto"], device: str, machine: Machine) -> ParallelChoice:
    """`auto`: the most every resource holds; a number: that many, or fewer where a resource holds fewer."""
    caps = limits(device, machine)
    most = min(c.most for c in caps)
    chose = most if asked == "auto" else min(asked, most)
    return ParallelChoice(asked=asked, chose=chose, limits=caps)


def binding(choice: ParallelChoice) -> list[ParallelLimit]:
    """The limits that set the number: the smallest caps (only where they are below the ask)."""
    most = min((c.most for c in choice.limits), default=choice.chose)
    if choice.asked != "auto" and choice.asked <= most:
        return []
    return [c for c in choice.limits if c.most == most]


def choice_lines(choice: ParallelChoice) -> list[str]:
    """What the run's first lines say of it: nothing for an ask that runs as asked."""
    held = binding(choice)
    why = "; ".join(f"{c.resource}: at most {c.most} ({c.why})" for c in held)
    if choice.asked == "auto":
        return [f"--parallel auto: {choice.chose} trajectories at once ({why})"]
    if choice.chose < choice.asked:
        return [f"--parallel {choice.asked}: running {choice.chose}, fewer than asked ({why})"]
    return []
