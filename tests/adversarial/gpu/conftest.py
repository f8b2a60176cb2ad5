"""Keep this folder's CPU tests running where there is no GPU.

tests/conftest.py skips every item whose *keywords* include "gpu" when no CUDA device is visible, and
every node under this folder has that keyword (it is the package's name). Only items carrying the `gpu`
marker need a device: drop that skip again from the others here. A no-op once tests/conftest.py asks for
the marker (`item.get_closest_marker("gpu")`) instead of the keyword.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _is_gpu_skip(mark: pytest.Mark) -> bool:
    return mark.name == "skip" and "needs a CUDA GPU" in str(mark.kwargs.get("reason", ""))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("gpu") is None and item.path.is_relative_to(HERE):
            item.own_markers[:] = [m for m in item.own_markers if not _is_gpu_skip(m)]
