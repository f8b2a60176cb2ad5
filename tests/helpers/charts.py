"""Reading a report's chart back from its inline SVG: the axes by gid, pixel → data through the ticks."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest

SVG = "{http://www.w3.org/2000/svg}"


def charts(page: str) -> dict[str, ET.Element]:
    """Each inline <svg>, keyed by the gid of its axes (speedup-chart, time-chart, tokens-chart)."""
    found: dict[str, ET.Element] = {}
    for text in re.findall(r"<svg.*?</svg>", page, flags=re.S):
        root = ET.fromstring(text)
        axes = next(el for el in root.iter(f"{SVG}g") if el.get("id", "").endswith("-chart"))
        found[axes.get("id", "")] = axes
    return found


def element(axes: ET.Element, gid: str) -> ET.Element:
    matches = [el for el in axes.iter() if el.get("id") == gid]
    assert len(matches) == 1, f"{gid}: {len(matches)} elements"
    return matches[0]


def has(axes: ET.Element, gid: str) -> bool:
    return any(el.get("id") == gid for el in axes.iter())


def tick_value(label: str) -> float:
    return float(label.replace(",", "").replace("\u2212", "-"))


def axis_map(axes: ET.Element, axis: str) -> Callable[[float], float]:
    """Pixel → data for one axis, fitted through its tick marks and their printed labels."""
    ticks: list[tuple[float, float]] = []
    for group in axes.iter(f"{SVG}g"):
        if re.fullmatch(f"{axis}tick_\\d+", group.get("id", "")):
            mark = next(group.iter(f"{SVG}use"))
            label = next(group.iter(f"{SVG}text"))
            ticks.append((float(mark.get(axis, "nan")), tick_value(label.text or "")))
    assert len(ticks) >= 2, f"{axis} axis has {len(ticks)} ticks"
    (p0, v0), (p1, v1) = ticks[0], ticks[-1]
    scale = (v1 - v0) / (p1 - p0)
    for pixel, value in ticks:  # every tick on one straight line: the axis is linear
        assert v0 + (pixel - p0) * scale == pytest.approx(value, abs=1e-6 * max(abs(v0), abs(v1)))
    return lambda pixel: v0 + (pixel - p0) * scale


def marker_points(axes: ET.Element, gid: str) -> list[tuple[float, float]]:
    x_of, y_of = axis_map(axes, "x"), axis_map(axes, "y")
    uses = element(axes, gid).iter(f"{SVG}use")
    return [(round(x_of(float(u.get("x", "nan"))), 6), y_of(float(u.get("y", "nan")))) for u in uses]


def path_points(axes: ET.Element, gid: str) -> list[tuple[float, float]]:
    x_of, y_of = axis_map(axes, "x"), axis_map(axes, "y")
    d = next(element(axes, gid).iter(f"{SVG}path")).get("d", "")
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", d)]
    return [(round(x_of(x), 6), y_of(y)) for x, y in zip(numbers[::2], numbers[1::2], strict=True)]
