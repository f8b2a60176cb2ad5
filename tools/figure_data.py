"""The figures of one evaluation as data (tools/figures.py derives them; tools/results.py's `BenchResult.figures`
holds them): per timing shape and overall, the candidate's device time, its share of the speed-of-light floor,
its speedup against the launch-free reference and against the eager one, and which of them is the headline.

One headline, named the same everywhere (`HEADLINE_LABELS`): the share of the floor where the problem has one
(a property of the kernel and the machine alone, whatever the reference does), else the speedup against the
launch-free reference. The eager speedup is a secondary column (`EAGER_LABEL`). Overall figures are geometric
means over the timing shapes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

HeadlineMetric = Literal["floor_fraction", "launch_free_speedup"]
HEADLINE_LABELS: dict[HeadlineMetric, str] = {
    "floor_fraction": "% of floor",
    "launch_free_speedup": "speedup (launch-free ref)",
}
EAGER_LABEL = "eager speedup"
FloorStatus = Literal["derived", "no_floor", "unavailable"]


class ShapeFigures(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    device_ms: float | None = Field(None, description="the candidate's median on the device's clock")
    device_interval: tuple[float, float] | None = Field(None, description="95 % interval of that median")
    floor_ms: float | None = None
    floor_fraction: float | None = Field(None, description="floor ms / device ms (1.0: at the floor)")
    faster_than_floor: bool = False
    speedup: float | None = Field(None, description="launch-free reference's median / device ms")
    speedup_interval: tuple[float, float] | None = None
    reference_mode: Literal["graph", "eager"] = "eager"
    eager_speedup: float | None = None
    eager_interval: tuple[float, float] | None = None


class Figures(BaseModel):
    """The headline (`metric`, `label`, `value`) and every figure beside it; `value` None: nothing to rank
    (not correct, or not timed)."""

    model_config = ConfigDict(extra="ignore")
    metric: HeadlineMetric
    label: str
    value: float | None = None
    floor_status: FloorStatus = "no_floor"
    floor_note: str = Field("", description="why there is no floor, or what it was derived from")
    floor_uncertainty: float | None = Field(
        None, description="the faster_than_floor allowance (share of the floor)"
    )
    floor_fraction: float | None = Field(None, description="geomean over the timing shapes")
    speedup: float | None = Field(None, description="vs the launch-free reference, geomean over the shapes")
    speedup_interval: tuple[float, float] | None = None
    eager_speedup: float | None = Field(None, description="vs the eager reference, geomean over the shapes")
    reference_mode: Literal["graph", "eager", "mixed"] = "eager"
    reference_note: str = Field("", description="why a shape's launch-free reference is the eager one")
    overall: str = Field("", description="how the overall figures combine the shapes")
    shapes: list[ShapeFigures] = Field(default_factory=list)

    def headline_text(self) -> str:
        """`% of floor 41%` / `speedup (launch-free ref) 3.10×` / `% of floor n/a`."""
        return f"{self.label} {format_metric(self.metric, self.value)}"


def format_metric(metric: HeadlineMetric, value: float | None) -> str:
    """`41%` of the floor; a speedup as the views write one: `125×`, `31.7×`, `3.10×`."""
    if value is None:
        return "n/a"
    if metric == "floor_fraction":
        return f"{value * 100:.0f}%"
    return f"{value:.0f}×" if value >= 100 else f"{value:.1f}×" if value >= 10 else f"{value:.2f}×"
