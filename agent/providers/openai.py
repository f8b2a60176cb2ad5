"""Any OpenAI-compatible model through the openai SDK (the optional extra `kernel-agent[openai]`).

Chat Completions, not the Responses API: it is what vLLM, SGLang and most gateways speak, and our
conversation maps onto it one to one (tool calls with ids, tool results as `tool` messages). Every call is
streamed (a long kernel takes minutes; the SDK's read timeout then applies between chunks, not to the
whole reply) with `stream_options.include_usage`, so the last chunk carries the token counts.

The conversation stays in the Messages shape the loop, the log and `--resume` use (agent.providers.base):
it is translated into chat messages on every call and the reply back into content blocks, so a resumed
run sends exactly what the uninterrupted one would have.

Retries: the SDK retries 408/409/429/5xx and connection errors before a stream starts, with exponential
backoff (0.5 s doubling to 8 s, jittered) or the server's Retry-After when it gives one (up to 2 minutes).
It does not retry a stream that breaks once started; the reply reaches the loop only when whole, so here
the whole call is replayed (a bounded number of times), which cannot duplicate anything.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import openai
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.completion_usage import CompletionUsage

from agent.providers.base import Block, Message, ModelReply, ProviderError
from agent.providers.pricing import cost_at, openai_price
from agent.runlog.events import Usage

KEY_VARIABLE = "OPENAI_API_KEY"
STOP_REASONS = {  # finish_reason -> the stop_reason the loop knows (the Messages API's)
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
STREAM_REPLAYS = 2  # a stream broken after it started: replayed this many times, then a ProviderError
REPLAY_DELAY_S = 0.5  # doubled for each replay
UNPARSED = "unparsed_arguments"  # a tool call's arguments that were not a JSON object, kept as sent


class BrokenStream(Exception):
    """The stream ended before the reply did (no finish_reason): replayed like a dropped connection."""


def public_url(url: str) -> str:
    """The URL without what may be a secret (user:password@, a query string): what is shown and logged."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


# --- our conversation -> chat messages -----------------------------------------------------------


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our tools (name, description, JSON-schema `input_schema`) as OpenAI function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["input_schema"],
            },
        }
        for t in tools
    ]


def chat_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        out += [assistant_message(m["content"])] if m["role"] == "assistant" else user_messages(m["content"])
    return out


def _text(content: str | list[Block] | None) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def user_messages(content: str | list[Block]) -> list[dict[str, Any]]:
    """A user turn: each tool result as a `tool` message (they must follow the assistant's calls at
    once), then any text of its own. A result's is_error needs no field: its text starts with FAILED."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results = [
        {"role": "tool", "tool_call_id": b["tool_use_id"], "content": _text(b.get("content"))}
        for b in content
        if b.get("type") == "tool_result"
    ]
    text = _text(content)
    return results + ([{"role": "user", "content": text}] if text else [])


def _arguments(block: Block) -> str:
    arguments = block.get("input") or {}
    if set(arguments) == {UNPARSED}:
        return str(arguments[UNPARSED])  # sent back as the model wrote it
    return json.dumps(arguments)


def assistant_message(content: str | list[Block]) -> dict[str, Any]:
    """An assistant turn: its text and tool calls (reasoning is not sent back: chat completions takes none)."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    calls = [
        {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": _arguments(b)}}
        for b in content
        if b.get("type") == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": _text(content) or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


# --- the stream -> one reply ---------------------------------------------------------------------


@dataclass
class PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class Assembly:
    """One reply as its chunks arrive: text, reasoning and tool calls grow delta by delta."""

    text: str = ""
    reasoning: str = ""
    refusal: str = ""
    calls: dict[int, PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: CompletionUsage | None = None

    def add(self, chunk: ChatCompletionChunk) -> None:
        if chunk.usage is not None:  # the last chunk (choices empty), or on every chunk for some servers
            self.usage = chunk.usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            self.add_delta(choice.delta)
            self.finish_reason = choice.finish_reason or self.finish_reason

    def add_delta(self, delta: ChoiceDelta) -> None:
        self.text += delta.content or ""
        self.refusal += delta.refusal or ""
        extra = delta.model_extra or {}  # vLLM, SGLang, DeepSeek stream a reasoning model's thinking here
        self.reasoning += str(extra.get("reasoning_content") or extra.get("reasoning") or "")
        for part in delta.tool_calls or []:
            call = self.calls.setdefault(part.index, PartialCall())
            call.id = call.id or (part.id or "")
            if part.function is not None:
                call.name += part.function.name or ""
                call.arguments += part.function.arguments or ""


def tool_use_block(call: PartialCall) -> Block:
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError:
        arguments = None
    return {
        "type": "tool_use",
        "id": call.id or f"call_{uuid.uuid4().hex[:24]}",  # a server that sends none: one the log keeps
        "name": call.name,
        "input": arguments if isinstance(arguments, dict) else {UNPARSED: call.arguments},
    }


def content_of(assembly: Assembly) -> list[Block]:
    content: list[Block] = []
    if assembly.reasoning.strip():
        content.append({"type": "thinking", "thinking": assembly.reasoning})
    if assembly.text:
        content.append({"type": "text", "text": assembly.text})
    return content + [tool_use_block(c) for _, c in sorted(assembly.calls.items())]


def stop_of(assembly: Assembly) -> tuple[str, str | None]:
    """(stop_reason, stop_details) in the loop's terms."""
    if assembly.refusal:
        return "refusal", assembly.refusal
    stop = STOP_REASONS.get(assembly.finish_reason or "stop", "end_turn")
    if stop == "end_turn" and assembly.calls:
        stop = "tool_use"  # some servers end a tool call with "stop"
    if assembly.finish_reason == "content_filter":
        return stop, "the server's content filter stopped the reply (finish_reason content_filter)"
    return stop, None


def usage_from_api(u: CompletionUsage | None) -> Usage:
    """OpenAI counts cached tokens inside prompt_tokens and reasoning inside completion_tokens."""
    if u is None:  # a server that ignores include_usage
        return Usage()
    prompt = u.prompt_tokens_details
    cached = (prompt.cached_tokens or 0) if prompt else 0
    details = u.completion_tokens_details
    return Usage(
        input_tokens=max(u.prompt_tokens - cached, 0),
        output_tokens=u.completion_tokens,
        cache_read_tokens=cached,
        thinking_tokens=(details.reasoning_tokens or 0) if details else 0,
    )


# --- the provider --------------------------------------------------------------------------------


class OpenAIProvider:
    name = "openai"
    scripted = False

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        client: openai.OpenAI | None = None,
        max_tokens: int | None = None,
        max_retries: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not model:
            raise ProviderError("--model openai:<model>: name the model after 'openai:', e.g. openai:gpt-4.1")
        key = os.environ.get(KEY_VARIABLE)
        if client is None and not key:
            raise ProviderError(
                f"model openai:{model} needs {KEY_VARIABLE} in the environment (a local server that checks "
                f"no key takes any value, e.g. {KEY_VARIABLE}=none)"
            )
        self.model = model
        self.max_tokens = max_tokens  # None: the server's own limit for the model
        self.sleep = sleep
        self.client = client or openai.OpenAI(api_key=key, base_url=base_url, max_retries=max_retries)
        self.max_retries = self.client.max_retries
        self.base_url = public_url(str(self.client.base_url))  # --base-url, else OPENAI_BASE_URL, else OpenAI
        api_key = self.client.api_key
        self.secret = key or (api_key if isinstance(api_key, str) else None)  # kept out of every message

    def request(self, system: str, tools: list[dict[str, Any]], messages: list[Message]) -> dict[str, Any]:
        """The keyword arguments of one chat completions call (also what the tests compare)."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(system, messages),
            "tools": chat_tools(tools),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.max_tokens is not None:
            kwargs["max_completion_tokens"] = self.max_tokens
        return kwargs

    def complete(self, system: str, tools: list[dict[str, Any]], messages: list[Message]) -> ModelReply:
        kwargs = self.request(system, tools, messages)
        try:
            assembly = self._send(kwargs)
            stop, details = stop_of(assembly)
        except openai.APIStatusError as exc:
            raise ProviderError(self._scrub(self._status_text(exc))) from None
        except openai.APIConnectionError as exc:
            raise ProviderError(self._scrub(self._connection_text(exc))) from None
        except BrokenStream as exc:
            raise ProviderError(
                self._scrub(
                    f"openai:{self.model}: the reply from {self.base_url} broke off {STREAM_REPLAYS + 1} "
                    f"times ({exc}): is the server stable?"
                )
            ) from None
        except openai.OpenAIError as exc:  # an error event inside the stream, or a bad client setup
            raise ProviderError(self._scrub(f"openai:{self.model} at {self.base_url}: {exc}")) from None
        usage = usage_from_api(assembly.usage)
        price = openai_price(self.model)
        return ModelReply(
            content=content_of(assembly),
            stop_reason=stop,
            usage=usage,
            cost_usd=cost_at(price, usage) if price else 0.0,
            stop_details=details,
        )

    def _send(self, kwargs: dict[str, Any]) -> Assembly:
        """One streamed call, replayed when the stream breaks after it started."""
        broken: Exception | None = None
        for replay in range(STREAM_REPLAYS + 1):
            if replay:
                self.sleep(REPLAY_DELAY_S * 2 ** (replay - 1))
            stream = self.client.chat.completions.create(**kwargs)  # the SDK's retries happen in here
            try:
                return _assemble(cast(Iterable[ChatCompletionChunk], stream))
            except (openai.APIConnectionError, BrokenStream) as exc:
                broken = exc
        raise BrokenStream(_cause_text(broken)) from broken

    def _status_text(self, exc: openai.APIStatusError) -> str:
        status = exc.status_code
        where = f"openai:{self.model}: {self.base_url} answered {status}"
        retried = f" (after {self.max_retries} retries)" if status in (408, 409, 429) or status >= 500 else ""
        return f"{where}{retried}: {_error_message(exc)}{_HINTS.get(status, '')}"

    def _connection_text(self, exc: openai.APIConnectionError) -> str:
        what = "timed out" if isinstance(exc, openai.APITimeoutError) else _cause_text(exc)
        return (
            f"openai:{self.model}: cannot reach {self.base_url} ({what}; after {self.max_retries} retries): "
            "is the server up, and is --base-url (or OPENAI_BASE_URL) right?"
        )

    def _scrub(self, text: str) -> str:
        """A server may echo the key in an error; the message goes to the log, the key must not."""
        return text.replace(self.secret, f"[{KEY_VARIABLE}]") if self.secret else text


def _assemble(chunks: Iterable[ChatCompletionChunk]) -> Assembly:
    assembly = Assembly()
    for chunk in chunks:
        assembly.add(chunk)
    if assembly.finish_reason is None and not assembly.refusal:
        raise BrokenStream("the stream ended without a finish_reason")
    return assembly


def _cause_text(exc: Exception | None) -> str:
    cause = (exc.__cause__ or exc) if exc is not None else None
    return f"{type(cause).__name__}: {cause}" if cause is not None else "no reason given"


_HINTS = {
    400: " (the server refused the request: is the model name right, and does it support tool calls?)",
    401: f" (check {KEY_VARIABLE})",
    403: f" (the key in {KEY_VARIABLE} may not have access to this model)",
    404: " (is the model name right, and does --base-url end in /v1?)",
    429: " (rate limited or out of quota: wait, or lower --parallel)",
    500: " (the server failed: try again later, or read its logs)",
    502: " (a gateway in between failed: try again later)",
    503: " (the server is overloaded or starting: try again later)",
}


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str) and err:
            return err
    return exc.message
