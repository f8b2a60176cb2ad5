"""The one small protocol every model provider implements, and what a call gives back."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from agent.runlog.events import Usage

# Messages API shapes, kept as plain dicts: what was received is what is logged and sent back.
Block = dict[str, Any]
Message = dict[str, Any]


class ProviderError(Exception):
    """A model or network failure the run cannot continue past; the message is shown as is."""


class ToolCall(BaseModel):
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ModelReply(BaseModel):
    """One assistant message: its raw content blocks plus what the loop needs from them."""

    content: list[Block]
    stop_reason: str | None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    stop_details: str | None = None

    @property
    def text(self) -> str:
        return "\n\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    @property
    def reasoning(self) -> str:
        return "\n\n".join(b.get("thinking", "") for b in self.content if b.get("type") == "thinking")

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(id=b["id"], name=b["name"], input=b.get("input") or {})
            for b in self.content
            if b.get("type") == "tool_use"
        ]


class Provider(Protocol):
    name: str  # "anthropic" or "scripted"
    model: str
    scripted: bool

    def complete(self, system: str, tools: list[dict[str, Any]], messages: list[Message]) -> ModelReply:
        """One model call. Raises ProviderError for failures that retries did not cure."""
        ...
