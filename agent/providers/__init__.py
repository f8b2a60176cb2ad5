"""Model providers behind one protocol (`base.Provider`): Claude via the anthropic SDK, or a scripted
playback of a trajectory file. `choose_model` picks the model for the command line's `--model` (or its
absence), `make_provider` makes the provider for it."""

from __future__ import annotations

import os
from pathlib import Path

from agent.providers.base import ModelReply, Provider, ProviderError, ToolCall
from agent.providers.pricing import DEFAULT_MODEL

__all__ = [
    "DEFAULT_MODEL",
    "ModelReply",
    "Provider",
    "ProviderError",
    "ToolCall",
    "make_provider",
    "choose_model",
]

SCRIPTED = "scripted"


def choose_model(requested: str | None) -> tuple[str, str | None]:
    """(model, notice): the explicit `--model`, else Claude when a key is set, else the playback."""
    if requested:
        return requested, None
    if os.environ.get("ANTHROPIC_API_KEY"):
        return DEFAULT_MODEL, None
    return (
        SCRIPTED,
        "ANTHROPIC_API_KEY is not set: playing back the problem's bundled trajectory (scripted playback).",
    )


def make_provider(model: str, trajectory: Path | None) -> Provider:
    if model == SCRIPTED:
        if trajectory is None:
            raise ProviderError("this problem ships no scripted trajectory (its spec has no `trajectory:`)")
        from agent.providers.scripted import ScriptedProvider

        return ScriptedProvider(trajectory)
    from agent.providers.anthropic import AnthropicProvider

    return AnthropicProvider(model)
