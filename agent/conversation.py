"""The conversation and the running totals of one trajectory (`State`): built live by the loop, rebuilt
from the log by `agent.resume` with the same functions, and bounded before it is sent.

The history is kept whole (and logged whole); what is *sent* is `bounded_messages` of it. Messages older
than the last few turns lose their bulk: tool results keep their headline, kernels sent in tool calls are
replaced by a one-line note (a later kernel supersedes them), thinking blocks are dropped (the API only
needs those of the latest assistant turn) and long texts keep head and tail. A pure function of the
history, so a resumed run sends exactly what the uninterrupted one would have.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from agent.providers.base import Message, ModelReply, ToolCall
from agent.runlog.events import Usage
from tools.compile_kernel import head_tail

MAX_TOKENS_NOTE = (
    "Your previous reply hit the max_tokens limit and was cut off; any tool call in it was not run. "
    "Reply again, shorter: one tool call with the whole module, little prose."
)
KEEP_RECENT_TURNS = 3
OLD_TEXT_CHARS = 1200
MAX_SENT_CHARS = 240_000  # ~60k tokens: past this, the oldest turns are left out altogether


class State(BaseModel):
    """One trajectory so far: its whole conversation and what it has cost."""

    messages: list[Message]
    turn: int = 0
    usage: Usage = Usage()
    cost_usd: float = 0.0
    llm_seconds: float = 0.0
    tool_seconds: float = 0.0
    earlier_wall_s: float = 0.0  # wall time of the sessions before a resume
    partial_results: list[dict[str, Any]] = []  # a resumed turn's results logged before the kill


def summed(states: list[State]) -> State:
    """The totals of several trajectories (no conversation): what a parallel run reports."""
    return State(
        messages=[],
        turn=sum(s.turn for s in states),
        usage=sum((s.usage for s in states), Usage()),
        cost_usd=sum(s.cost_usd for s in states),
        llm_seconds=sum(s.llm_seconds for s in states),
        tool_seconds=sum(s.tool_seconds for s in states),
    )


def add_reply(messages: list[Message], content: list[dict[str, Any]], stop_reason: str | None) -> None:
    """Add a reply to the history (live, and again when a resume rebuilds it from the log)."""
    if stop_reason == "max_tokens":
        # a cut-off reply may hold a half-written tool call or unsigned thinking: keep its text only
        text = [b for b in content if b.get("type") == "text"] or [{"type": "text", "text": "[cut off]"}]
        content = text
    if messages and messages[-1]["role"] == "assistant":  # the continuation of a pause_turn
        messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *content]}
    else:
        messages.append({"role": "assistant", "content": content})
    if stop_reason == "max_tokens":
        messages.append({"role": "user", "content": MAX_TOKENS_NOTE})


def tool_result_block(tool_use_id: str, text: str, is_error: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": is_error}


def pending_tool_calls(messages: list[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet."""
    if not messages or messages[-1]["role"] != "assistant":
        return []
    return ModelReply(content=messages[-1]["content"], stop_reason="tool_use").tool_calls


# --- keeping what is sent bounded ------------------------------------------------------------------
def _short_tool_result(block: dict[str, Any]) -> dict[str, Any]:
    content = block.get("content")
    text = content if isinstance(content, str) else "\n".join(c.get("text", "") for c in content or [])
    headline = text.strip().splitlines()[0] if text.strip() else ""
    return {**block, "content": f"{headline} [older result: details omitted]"}


def _short_tool_use(block: dict[str, Any]) -> dict[str, Any]:
    code = (block.get("input") or {}).get("kernel_code")
    if not isinstance(code, str):
        return block
    note = f"[earlier kernel, {code.count(chr(10)) + 1} lines: omitted, superseded by later versions]"
    return {**block, "input": {**block["input"], "kernel_code": note}}


def _short_block(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind in ("thinking", "redacted_thinking"):
        return None
    if kind == "tool_use":
        return _short_tool_use(block)
    if kind == "tool_result":
        return _short_tool_result(block)
    if kind == "text" and len(block.get("text", "")) > OLD_TEXT_CHARS:
        return {**block, "text": head_tail(block["text"], OLD_TEXT_CHARS // 2, OLD_TEXT_CHARS // 2)}
    return block


def _short_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        return message
    blocks = [b for b in (_short_block(b) for b in content) if b is not None]
    return {**message, "content": blocks or [{"type": "text", "text": "[omitted]"}]}


def bounded_messages(
    messages: list[dict[str, Any]], keep_recent: int = KEEP_RECENT_TURNS, max_chars: int = MAX_SENT_CHARS
) -> list[dict[str, Any]]:
    """The conversation to send: whole for the last `keep_recent` assistant turns, shortened before;
    if still over `max_chars`, the oldest (assistant, user) pairs after the task are left out."""
    assistant_at = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if len(assistant_at) <= keep_recent:
        return messages
    cutoff = assistant_at[-keep_recent]
    # the first user message (the task) stays whole; it is short and part of the cached prefix
    sent = [m if i == 0 or i >= cutoff else _short_message(m) for i, m in enumerate(messages)]
    while len(json.dumps(sent)) > max_chars and cutoff > 3 and sent[1]["role"] == "assistant":
        del sent[1:3]
        cutoff -= 2
    return sent
