"""The one price table (USD per million tokens), from platform.claude.com/docs/en/about-claude/pricing.

Cache writes are the 5-minute kind (what `{"type": "ephemeral"}` makes); thinking tokens are billed
as output and are already inside `output_tokens`.
"""

from __future__ import annotations

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
    p = price_for(model)
    return (
        usage.input_tokens * p.input
        + usage.output_tokens * p.output
        + usage.cache_write_tokens * p.cache_write
        + usage.cache_read_tokens * p.cache_read
    ) / 1e6
