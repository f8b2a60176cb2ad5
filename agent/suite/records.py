"""`agent suite`'s records and its arithmetic, as pure functions of them.

A suite folder holds `suite.json` (`SuiteConfig`: what was asked, so `--resume` asks it again), one
`results/<problem>.json` per problem that ended (`ProblemResult`), the model runs under `runs/` (normal
run folders) and `suite.html`. The summary (`SuiteSummary`) is made from the results alone:

- correct: the problem's best kernel is correct (it has a speedup);
- fast_p: the fraction of the suite's problems whose best kernel is correct AND more than p times as fast
  as the launch-free reference (KernelBench's metric; docs/ranking.md); fast_0 is the correct rate. A
  problem with no result yet counts as not correct;
- geomean speedup (launch-free) over the correct problems, each ratio clipped to [1/CLIP, CLIP] first, so
  that one absurd ratio (a near-zero time) cannot carry or sink the mean (docs/exploits.md, row 28); the
  eager speedup's geomean beside it;
- mean % of floor over the correct problems that have a floor.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from agent.runlog.events import Usage, utc_now

SUITE_VERSION = 1
FAST_P = (0.0, 1.0, 1.5, 2.0)
SPEEDUP_CLIP = 100.0

Mode = Literal["model", "kernels"]
Outcome = Literal["ended", "interrupted", "harness_error"]


class SuiteConfig(BaseModel):
    """`suite.json`: the suite as asked, in the order its problems run."""

    version: int = SUITE_VERSION
    kind: Literal["suite"] = "suite"
    mode: Mode
    problems: list[str] = Field(description="problem files, absolute")
    model: str | None = Field(None, description="--model as given (model mode; None: the default)")
    base_url: str | None = None
    kernels_dir: str | None = Field(None, description="--kernels DIR (kernels mode)")
    max_turns: int | None = None
    max_cost_usd: float | None = Field(None, description="per problem")
    max_minutes: float | None = Field(None, description="per problem")
    jobs: int = 1
    gpus: list[int] | None = None
    started_at: str = Field(default_factory=utc_now)


class KernelVerdict(BaseModel):
    """One kernel file of `--kernels DIR`, as `tools.benchmark` judged it."""

    kind: Literal["kernel"] = "kernel"
    path: str
    status: str
    correct: bool
    speedup: float | None = Field(description="vs the launch-free reference")
    eager_speedup: float | None = None
    floor_fraction: float | None = None
    message: str


class ProblemResult(BaseModel):
    """`results/<problem>.json`: how one problem of the suite ended."""

    version: int = SUITE_VERSION
    kind: Literal["problem"] = "problem"
    problem: str
    problem_path: str
    device: str
    outcome: Outcome = Field(
        description="ended: the run or the evaluation reached an end of its own; interrupted: Ctrl-C (rerun "
        "on --resume); harness_error: the harness broke or the model's API failed for good"
    )
    exit_code: int = Field(description="`agent run`'s code (model mode) or `agent bench`'s (kernels mode)")
    exit_status: str = Field(description="summary.json's exit status, or the best kernel's bench status")
    message: str = ""
    best_speedup: float | None = Field(
        None, description="the best correct kernel's, vs the launch-free reference; None: none correct"
    )
    best_eager_speedup: float | None = Field(None, description="the same kernel's vs the eager reference")
    best_floor_fraction: float | None = Field(None, description="its % of floor (None: no floor)")
    best_kernel: str | None = Field(None, description="its path, relative to the suite folder")
    run_dir: str | None = Field(None, description="the run folder, relative to the suite folder")
    kernels: list[KernelVerdict] = Field(default_factory=list, description="kernels mode: every file judged")
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    wall_seconds: float = 0.0
    ended_at: str = Field(default_factory=utc_now)

    @property
    def correct(self) -> bool:
        return self.best_speedup is not None

    @property
    def finished(self) -> bool:
        """What `--resume` skips: every outcome but an interrupted one."""
        return self.outcome != "interrupted"


class FastP(BaseModel):
    p: float
    fraction: float
    count: int


class SuiteSummary(BaseModel):
    problems: int = Field(description="in the suite")
    ended: int = Field(description="with a result (the rest were not run or did not end)")
    correct: int
    correct_rate: float
    fast_p: list[FastP]
    geomean_speedup: float | None = Field(
        description="launch-free, over the correct problems, ratios clipped"
    )
    geomean_eager_speedup: float | None = Field(None, description="the same of the eager speedups")
    mean_floor_fraction: float | None = Field(None, description="over the correct problems with a floor")
    harness_errors: int
    usage: Usage
    tokens: int
    cost_usd: float
    wall_seconds: float


def fast_p(results: list[ProblemResult], total: int, p: float) -> FastP:
    """Of `total` problems, those whose best kernel is correct and more than p× the reference's speed."""
    count = sum(1 for r in results if r.best_speedup is not None and r.best_speedup > p)
    return FastP(p=p, fraction=count / total if total else 0.0, count=count)


def clipped(speedup: float) -> float:
    return min(max(speedup, 1 / SPEEDUP_CLIP), SPEEDUP_CLIP)


def geomean_speedup(results: list[ProblemResult], eager: bool = False) -> float | None:
    picked = [r.best_eager_speedup if eager else r.best_speedup for r in results if r.correct]
    speedups = [clipped(s) for s in picked if s is not None]
    if not speedups:
        return None
    return math.exp(sum(math.log(s) for s in speedups) / len(speedups))


def mean_floor_fraction(results: list[ProblemResult]) -> float | None:
    fractions = [r.best_floor_fraction for r in results if r.correct and r.best_floor_fraction is not None]
    return sum(fractions) / len(fractions) if fractions else None


def summed_usage(results: list[ProblemResult]) -> Usage:
    fields = Usage.model_fields
    return Usage(**{name: sum(getattr(r.usage, name) for r in results) for name in fields})


def summarize(results: list[ProblemResult], total: int) -> SuiteSummary:
    """The suite's numbers from its results (`total`: problems in the suite, run or not)."""
    correct = sum(1 for r in results if r.correct)
    usage = summed_usage(results)
    return SuiteSummary(
        problems=total,
        ended=sum(1 for r in results if r.finished),
        correct=correct,
        correct_rate=correct / total if total else 0.0,
        fast_p=[fast_p(results, total, p) for p in FAST_P],
        geomean_speedup=geomean_speedup(results),
        geomean_eager_speedup=geomean_speedup(results, eager=True),
        mean_floor_fraction=mean_floor_fraction(results),
        harness_errors=sum(1 for r in results if r.outcome == "harness_error"),
        usage=usage,
        tokens=usage.total,
        cost_usd=sum(r.cost_usd for r in results),
        wall_seconds=sum(r.wall_seconds for r in results),
    )


class SuiteData(BaseModel):
    """A suite folder read back: what the views, `--json` and the HTML page draw."""

    suite_dir: str
    config: SuiteConfig
    results: list[ProblemResult] = Field(description="in the suite's order; problems not ended are absent")
    pending: list[str] = Field(default_factory=list, description="problems with no result (or interrupted)")
    summary: SuiteSummary
