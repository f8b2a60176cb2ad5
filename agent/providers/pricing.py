"""The price tables (USD per million tokens): Claude's from platform.claude.com/docs/en/about-claude/pricing,
OpenAI's from its published list (June 2026; check openai.com/api/pricing before relying on a figure).

Cache writes are the 5-minute kind (what `{"type": "ephemeral"}` makes); thinking tokens are billed
as output and are already inside `output_tokens`. OpenAI bills no cache writes; its cached prompt tokens
are `cache_read_tokens`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from agent.runlog.events import Usage

DEFAULT_MODEL = "claude-opus-5-5"
"""The Claude model of a run without --model when ANTHROPIC_API_KEY is set (agent.providers.choose_model)."""


class Price(NamedTuple):
    input: float
    output: float
    cache_write: float
    cache_read: float


PRICES: dict[str, Price] = {
    "claude-fable-5-2": Price(10.0, 50.0, 12.5, 0.25),
    "claude-mythos-5-2": Price(10.0, 50.0, 12.5, 0.25),
    "claude-fable-5-1": Price(10.0, 50.0, 12.5, 0.25),
    "claude-mythos-5-1": Price(10.0, 50.0, 12.5, 0.25),
    "claude-fable-5": Price(10.0, 50.0, 12.5, 1.0),
    "claude-mythos-5": Price(10.0, 50.0, 12.5, 1.0),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.20),
    "claude-opus-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-8": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-7": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-6": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.5, 0.10),
    "claude-sonnet-5": Price(2.0, 10.0, 2.5, 0.20),
    "claude-sonnet-4-6": Price(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4-5": Price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-5-5": Price(0.5, 2.5, 0.625, 0.05),  # the >100k-prompt tier, the dearer one
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
}
# An unknown id is priced like the dearest family, so a --max-cost budget errs on the safe side.
FALLBACK = Price(10.0, 50.0, 12.5, 1.0)


def price_for(model: str) -> Price:
    if model in PRICES:
        return PRICES[model]
    dated = next((k for k in sorted(PRICES, key=len, reverse=True) if model.startswith(k + "-")), None)
    return PRICES[dated] if dated else FALLBACK


def cost_usd(model: str, usage: Usage) -> float:
    return cost_at(price_for(model), usage)


def cost_at(p: Price, usage: Usage) -> float:
    return (
        usage.input_tokens * p.input
        + usage.output_tokens * p.output
        + usage.cache_write_tokens * p.cache_write
        + usage.cache_read_tokens * p.cache_read
    ) / 1e6


# OpenAI models by their API ids. Unlike Claude's, an unknown id here is usually a model served elsewhere
# (vLLM, SGLang, a gateway's own name) whose price nobody knows: it is not guessed (openai_price is None).
OPENAI_PRICES: dict[str, Price] = {
    "gpt-5.5": Price(5.0, 30.0, 5.0, 0.50),
    "gpt-5.4": Price(2.5, 15.0, 2.5, 0.25),
    "gpt-5.4-mini": Price(0.75, 4.5, 0.75, 0.075),
    "gpt-5.4-nano": Price(0.20, 1.25, 0.20, 0.02),
    "gpt-5": Price(1.25, 10.0, 1.25, 0.125),
    "gpt-5-mini": Price(0.25, 2.0, 0.25, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.05, 0.005),
    "gpt-4.1": Price(2.0, 8.0, 2.0, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.40, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.10, 0.025),
    "gpt-4o": Price(2.5, 10.0, 2.5, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.15, 0.075),
    "o3": Price(2.0, 8.0, 2.0, 0.50),
    "o4-mini": Price(1.10, 4.40, 1.10, 0.275),
}
# Only a date suffix names the same model: "gpt-5.4-pro" must not be priced as "gpt-5.4".
_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def openai_price(model: str) -> Price | None:
    """The price of an OpenAI model id, dated (`gpt-4.1-2025-04-14`) or a gateway's `openai/gpt-4.1`;
    None when the table does not know it."""
    name = model.removeprefix("openai/")
    return OPENAI_PRICES.get(name) or OPENAI_PRICES.get(_DATED.sub("", name))
