"""Claude through the anthropic SDK 2.x.

Adaptive thinking; prompt caching on the stable prefix (system and tools carry explicit breakpoints,
the top-level `cache_control` moves a third one along the growing conversation); the SDK's own retries
for 408/409/429/5xx/529 and connection errors; streaming whenever `max_tokens` is past what the SDK
allows without it. Content blocks are kept exactly as received (thinking signatures included) so they
can be sent back unmodified and logged for a resume.
"""

from __future__ import annotations

import os
from typing import Any, cast

import anthropic
from anthropic.types import Message as ApiMessage

from agent.providers.base import Message, ModelReply, ProviderError
from agent.providers.pricing import DEFAULT_MODEL, cost_usd
from agent.runlog.events import Usage

DEFAULT_MAX_TOKENS = 64_000
# The SDK refuses a non-streaming request whose max_tokens implies > 10 minutes (~21k tokens).
STREAMING_THRESHOLD = 21_000
CACHE = {"type": "ephemeral"}


def usage_from_api(u: Any) -> Usage:
    details = getattr(u, "output_tokens_details", None)
    return Usage(
        input_tokens=u.input_tokens or 0,
        output_tokens=u.output_tokens or 0,
        cache_read_tokens=getattr(u, "cache_read_input_tokens", None) or 0,
        cache_write_tokens=getattr(u, "cache_creation_input_tokens", None) or 0,
        thinking_tokens=(getattr(details, "thinking_tokens", None) or 0) if details else 0,
    )


def cached_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tools with a cache breakpoint on the last one (caches every tool definition)."""
    if not tools:
        return []
    return [*tools[:-1], {**tools[-1], "cache_control": CACHE}]


class AnthropicProvider:
    name = "anthropic"
    scripted = False

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        client: anthropic.Anthropic | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        effort: str | None = None,
        max_retries: int = 4,
    ) -> None:
        if client is None and not os.environ.get("ANTHROPIC_API_KEY"):
            raise ProviderError(
                f"model {model!r} needs ANTHROPIC_API_KEY in the environment "
                "(or run with --model scripted to play back the problem's bundled trajectory)"
            )
        self.model = model
        self.max_tokens = max_tokens
        self.effort = effort
        self.client = client or anthropic.Anthropic(max_retries=max_retries)

    def request(self, system: str, tools: list[dict[str, Any]], messages: list[Message]) -> dict[str, Any]:
        """The keyword arguments of one Messages API call (also what the tests compare)."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": [{"type": "text", "text": system, "cache_control": CACHE}],
            "tools": cached_tools(tools),
            "messages": messages,
            "thinking": {"type": "adaptive"},
            "cache_control": CACHE,
        }
        if self.effort:
            kwargs["output_config"] = {"effort": self.effort}
        return kwargs

    def complete(self, system: str, tools: list[dict[str, Any]], messages: list[Message]) -> ModelReply:
        kwargs = self.request(system, tools, messages)
        try:
            message = self._send(kwargs)
        except anthropic.APIStatusError as exc:
            raise ProviderError(f"{self.model}: API error {exc.status_code}: {_api_error_text(exc)}") from exc
        except anthropic.APIConnectionError as exc:
            raise ProviderError(f"{self.model}: cannot reach the Anthropic API: {exc}") from exc
        except anthropic.AnthropicError as exc:
            raise ProviderError(f"{self.model}: {exc}") from exc
        return self._reply(message)

    def _send(self, kwargs: dict[str, Any]) -> ApiMessage:
        if self.max_tokens > STREAMING_THRESHOLD:
            with self.client.messages.stream(**kwargs) as stream:
                return stream.get_final_message()
        return cast(ApiMessage, self.client.messages.create(**kwargs))  # not streamed: one Message

    def _reply(self, message: ApiMessage) -> ModelReply:
        usage = usage_from_api(message.usage)
        details = message.stop_details
        return ModelReply(
            # exclude_none: the API rejects echoed blocks carrying response-only null fields.
            content=[block.model_dump(mode="json", exclude_none=True) for block in message.content],
            stop_reason=message.stop_reason,
            usage=usage,
            cost_usd=cost_usd(self.model, usage),
            stop_details=(details.explanation or details.category) if details else None,
        )


def _api_error_text(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return exc.message
