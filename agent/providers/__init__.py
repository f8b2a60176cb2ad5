"""Model providers behind one protocol (`base.Provider`): Claude via the anthropic SDK, any
OpenAI-compatible server via the openai SDK (`--model openai:<model>`, an optional extra), or a scripted
playback of a trajectory file. `choose_model` picks the model for the command line's `--model` (or its
absence), `make_provider` makes the provider for it."""

from __future__ import annotations

import os
from pathlib import Path

from agent.providers.base import ModelReply, Provider, ProviderError, ToolCall
from agent.providers.pricing import DEFAULT_MODEL, openai_price

__all__ = [
    "DEFAULT_MODEL",
    "ModelReply",
    "Provider",
    "ProviderError",
    "ToolCall",
    "make_provider",
    "choose_model",
    "model_spec",
    "price_note",
]

SCRIPTED = "scripted"
OPENAI = "openai:"  # `--model openai:<model>`: the model named after it, through the openai SDK


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


def make_provider(model: str, trajectory: Path | None, base_url: str | None = None) -> Provider:
    """The provider of a `--model` value. An `openai:` model raises ModuleNotFoundError (name "openai")
    where the optional extra is not installed; `base_url` is for those models only."""
    if base_url is not None and not model.startswith(OPENAI):
        raise ProviderError(f"--base-url is for --model openai:<model> (the model here is {model!r})")
    if model.startswith(OPENAI):
        from agent.providers.openai import OpenAIProvider

        return OpenAIProvider(model.removeprefix(OPENAI), base_url=base_url)
    if model == SCRIPTED:
        if trajectory is None:
            raise ProviderError("this problem ships no scripted trajectory (its spec has no `trajectory:`)")
        from agent.providers.scripted import ScriptedProvider

        return ScriptedProvider(trajectory)
    from agent.providers.anthropic import AnthropicProvider

    return AnthropicProvider(model)


def model_spec(provider: str, model: str) -> str:
    """The `--model` value that makes this provider's model again (run.json keeps the two apart)."""
    return OPENAI + model if provider == "openai" else model if provider == "anthropic" else SCRIPTED


def price_note(provider: Provider) -> str | None:
    """What to tell a user whose model has no known price: its cost counts as $0."""
    if provider.name != "openai" or openai_price(provider.model) is not None:
        return None
    return (
        f"no price is known for {provider.model!r}: its cost counts as $0 (unknown); tokens are counted "
        "as the server reports them"
    )
