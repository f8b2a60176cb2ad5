"""Scripted playback: a trajectory file stands in for the model while the tools run for real.

A trajectory is YAML: `steps`, each with optional `reasoning`, `text` and `tool_calls`
(`name` plus `kernel_file`, relative to the trajectory's folder). Step i answers the i-th model call,
so a resumed run picks up where the log ends. Nothing is generated: zero tokens, zero cost.

In a parallel run every sample plays the whole trajectory (the same kernels, each measured for real), and
a branch from the best kernel plays the steps after the one that wrote that kernel (`branch_from`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent import toolbox
from agent.providers.base import Block, Message, ModelReply, ProviderError

SCRIPTED_MODEL = "scripted"
PLAYBACK = "scripted playback"  # every display and record of such a run says so
SIGNATURE = "scripted-playback"


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    kernel_file: str

    @field_validator("name")
    @classmethod
    def offered(cls, name: str) -> str:
        offered = [t.name for t in toolbox.OFFERED]
        if name not in offered:
            raise ValueError(f"{name!r} is not a tool the model is offered ({', '.join(offered)})")
        return name


class ScriptedStep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reasoning: str = ""
    text: str = ""
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)


class Trajectory(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = ""
    steps: list[ScriptedStep]


def load_trajectory(path: Path) -> tuple[Trajectory, dict[str, str]]:
    """The trajectory and the text of every kernel file it names (read now, so a bad path fails early)."""
    if not path.is_file():
        raise ProviderError(f"no scripted trajectory at {path}")
    try:
        trajectory = Trajectory.model_validate(yaml.safe_load(path.read_text()))
    except (yaml.YAMLError, ValidationError) as exc:
        raise ProviderError(f"{path}: not a valid trajectory: {exc}") from exc
    kernels: dict[str, str] = {}
    for step in trajectory.steps:
        for call in step.tool_calls:
            kernel_path = path.parent / call.kernel_file
            if not kernel_path.is_file():
                raise ProviderError(f"{path}: kernel_file {call.kernel_file!r} not found at {kernel_path}")
            kernels[call.kernel_file] = kernel_path.read_text()
    return trajectory, kernels


class ScriptedProvider:
    name = "scripted"
    model = SCRIPTED_MODEL
    scripted = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.trajectory, self.kernels = load_trajectory(path)
        self.start = 0  # the step that answers the first model call

    def branch_from(self, kernel_code: str) -> ScriptedProvider:
        """A playback for a branch starting at `kernel_code`: the steps after the last one that wrote it
        (the whole trajectory when none did; nothing but the closing message when it was the last)."""
        steps = self.trajectory.steps
        wrote = [
            i
            for i, step in enumerate(steps)
            if any(self.kernels[c.kernel_file] == kernel_code for c in step.tool_calls)
        ]
        branch = copy.copy(self)
        branch.start = wrote[-1] + 1 if wrote else 0
        return branch

    def complete(self, system: str, tools: list[dict[str, Any]], messages: list[Message]) -> ModelReply:
        index = self.start + sum(1 for m in messages if m["role"] == "assistant")
        if index >= len(self.trajectory.steps):
            return ModelReply(
                content=[{"type": "text", "text": f"End of {PLAYBACK}."}], stop_reason="end_turn"
            )
        return self._reply(index, self.trajectory.steps[index])

    def _reply(self, index: int, step: ScriptedStep) -> ModelReply:
        content: list[Block] = []
        if step.reasoning:
            content.append({"type": "thinking", "thinking": step.reasoning.strip(), "signature": SIGNATURE})
        if step.text:
            content.append({"type": "text", "text": step.text.strip()})
        for j, call in enumerate(step.tool_calls):
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_scripted_{index + 1:03d}_{j}",
                    "name": call.name,
                    "input": {"kernel_code": self.kernels[call.kernel_file]},
                }
            )
        return ModelReply(content=content, stop_reason="tool_use" if step.tool_calls else "end_turn")
