"""The anthropic provider and the loop around it, offline: canned Messages API responses served by
`httpx2.MockTransport`. The evaluator is the real one; the kernels sent here fail its syntax check,
which answers without starting a child process.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from rich.console import Console

from agent.cli.run import new_agent, reopen_agent
from agent.conversation import MAX_TOKENS_NOTE, bounded_messages
from agent.execution.executor import LocalEvaluator
from agent.loop import Agent
from agent.providers.anthropic import AnthropicProvider
from agent.providers.base import ProviderError
from agent.providers.pricing import PRICES, cost_usd
from agent.runlog.events import ErrorEvent, ModelCallEvent, RunConfig, RunSummary, ToolCallEvent, Usage
from agent.runlog.reader import read_events
from tools.problem import Problem, load_problem
from tools.results import CompileResult

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"
PROBLEM = ROOT / "problems" / "selective_scan_cpu.yaml"
MODEL = "claude-opus-5-5"
BROKEN_KERNEL = "import torch\ndef broken(:\n    pass\n"  # a SyntaxError: the evaluator answers at once
SECRET_KEY = "sk-ant-test-DO-NOT-LOG-0123456789"

Handler = Callable[[httpx2.Request], httpx2.Response]


def message(content: list[dict[str, Any]], stop_reason: str, **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage.get("input", 100), "output_tokens": usage.get("output", 50)},
    }


def end_turn(text: str = "Done.") -> dict[str, Any]:
    return message([{"type": "text", "text": text}], "end_turn")


class Server:
    """Serves canned responses in order and keeps every request body it received."""

    def __init__(self, responses: list[dict[str, Any] | httpx2.Response]) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        self.api_keys: list[str | None] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        self.api_keys.append(request.headers.get("x-api-key") or request.headers.get("authorization"))
        item = self.responses.pop(0)
        return item if isinstance(item, httpx2.Response) else httpx2.Response(200, json=item)


def client(handler: Handler, max_retries: int = 0) -> anthropic.Anthropic:
    transport = httpx2.MockTransport(handler)
    return anthropic.Anthropic(
        api_key=SECRET_KEY, max_retries=max_retries, http_client=httpx2.Client(transport=transport)
    )


def provider(handler: Handler, max_tokens: int = 8000, max_retries: int = 0) -> AnthropicProvider:
    return AnthropicProvider(MODEL, client=client(handler, max_retries), max_tokens=max_tokens)


@pytest.fixture(scope="module")
def problem() -> Problem:
    return load_problem(PROBLEM)


def make_agent(problem: Problem, prov: AnthropicProvider, runs: Path, **limits: Any) -> Agent:
    config = RunConfig(problem_path=str(problem.path), provider="anthropic", model=MODEL, **limits)
    console = Console(file=io.StringIO(), width=100, legacy_windows=False)
    return new_agent(problem, prov, config, runs, console)


def tool_use_fixture() -> dict[str, Any]:
    return json.loads((FIXTURES / "tool_use_thinking.json").read_text())


# --- the loop over the provider --------------------------------------------------------------------


def test_tool_use_round_trip_echoes_thinking_and_logs_usage(problem: Problem, tmp_path: Path) -> None:
    first = tool_use_fixture()
    server = Server([first, end_turn()])
    agent = make_agent(problem, provider(server), tmp_path)
    outcome = agent.run()

    assert outcome.status == "Finished"
    assert len(server.requests) == 2
    sent = server.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == first["content"]  # thinking block and signature echoed unmodified
    (result,) = sent[2]["content"]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_01A"
    assert result["is_error"] is True
    assert result["content"].startswith("compile_kernel FAILED (import_error)")
    assert "SyntaxError" in result["content"]

    events = read_events(agent.log.dir)
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    assert calls[0].usage == Usage(
        input_tokens=1200,
        output_tokens=800,
        cache_write_tokens=3000,
        cache_read_tokens=0,
        thinking_tokens=500,
    )
    assert calls[0].content == first["content"]
    (tool,) = [e for e in events if isinstance(e, ToolCallEvent)]
    assert tool.kernel_path == "kernels/001.py"
    assert "kernel_code" not in tool.arguments
    assert (agent.log.dir / "kernels" / "001.py").read_text() == BROKEN_KERNEL
    summary = RunSummary.model_validate_json((agent.log.dir / "summary.json").read_text())
    assert summary.exit_status == "Finished"
    assert summary.turns == 2
    assert summary.usage.tokens_in == 1200 + 3000 + 100
    assert summary.cost_usd == pytest.approx(
        cost_usd(MODEL, calls[0].usage) + cost_usd(MODEL, calls[1].usage)
    )
    assert not summary.scripted


def test_request_caches_system_and_tools_and_thinks_adaptively(problem: Problem, tmp_path: Path) -> None:
    server = Server([end_turn()])
    make_agent(problem, provider(server), tmp_path).run()
    body = server.requests[0]
    assert body["model"] == MODEL
    assert body["thinking"] == {"type": "adaptive"}
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [t["name"] for t in body["tools"]] == ["compile_kernel", "benchmark", "profile_kernel"]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "temperature" not in body
    system = body["system"][0]["text"]
    for must in (
        "class Model(nn.Module)",
        "ModelNew",
        "strict=True",
        f"relative L2 error <= {problem.spec.tolerance.rel_l2:g}",
        "long_memory",
        "b8_l1024_d512",
    ):
        assert must in system


def test_pause_turn_is_sent_back_as_is(problem: Problem, tmp_path: Path) -> None:
    paused = [
        {"type": "thinking", "thinking": "Still going.", "signature": "sig-pause"},
        {"type": "text", "text": "Working on it"},
    ]
    server = Server([message(paused, "pause_turn"), end_turn()])
    outcome = make_agent(problem, provider(server), tmp_path).run()
    assert outcome.status == "Finished"
    second = server.requests[1]["messages"]
    assert second[-1] == {"role": "assistant", "content": paused}


def test_pause_turn_continuation_joins_the_same_assistant_turn(problem: Problem, tmp_path: Path) -> None:
    paused = [{"type": "text", "text": "Working on it"}]
    resumed = tool_use_fixture()
    server = Server([message(paused, "pause_turn"), resumed, end_turn()])
    assert make_agent(problem, provider(server), tmp_path).run().status == "Finished"
    third = server.requests[2]["messages"]
    assert [m["role"] for m in third] == ["user", "assistant", "user"]
    assert third[1]["content"] == paused + resumed["content"]
    assert third[2]["content"][0]["tool_use_id"] == "toolu_01A"


def test_max_tokens_drops_the_cut_tool_call_and_asks_for_less(problem: Problem, tmp_path: Path) -> None:
    cut = [
        {"type": "thinking", "thinking": "Long kernel ahead", "signature": "sig-cut"},
        {"type": "text", "text": "Here is the full kernel:"},
        {"type": "tool_use", "id": "toolu_cut", "name": "benchmark", "input": {}},
    ]
    server = Server([message(cut, "max_tokens"), end_turn()])
    agent = make_agent(problem, provider(server), tmp_path)
    assert agent.run().status == "Finished"
    second = server.requests[1]["messages"]
    assert second[-2] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Here is the full kernel:"}],
    }
    assert second[-1] == {"role": "user", "content": MAX_TOKENS_NOTE}
    assert not [e for e in read_events(agent.log.dir) if isinstance(e, ToolCallEvent)]


def test_refusal_ends_the_run_with_its_own_status(problem: Problem, tmp_path: Path) -> None:
    refusal = message([], "refusal")
    refusal["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": "not this"}
    agent = make_agent(problem, provider(Server([refusal])), tmp_path)
    outcome = agent.run()
    assert outcome.status == "Refused"
    assert "not this" in str(outcome)
    assert (
        RunSummary.model_validate_json((agent.log.dir / "summary.json").read_text()).exit_status == "Refused"
    )


def test_context_window_exceeded_ends_the_run(problem: Problem, tmp_path: Path) -> None:
    full = message([{"type": "text", "text": "..."}], "model_context_window_exceeded")
    assert make_agent(problem, provider(Server([full])), tmp_path).run().status == "ContextExhausted"


def test_api_error_is_a_clear_model_error(problem: Problem, tmp_path: Path) -> None:
    bad = httpx2.Response(
        400, json={"type": "error", "error": {"type": "invalid_request_error", "message": "bad thing"}}
    )
    agent = make_agent(problem, provider(Server([bad])), tmp_path)
    outcome = agent.run()
    assert outcome.status == "ModelError"
    assert "400" in str(outcome)
    assert "bad thing" in str(outcome)
    events = read_events(agent.log.dir)
    assert any(isinstance(e, ModelCallEvent) and e.status == "error" for e in events)


def test_network_error_is_a_clear_model_error(problem: Problem, tmp_path: Path) -> None:
    def unreachable(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    outcome = make_agent(problem, provider(unreachable), tmp_path).run()
    assert outcome.status == "ModelError"
    assert "cannot reach the Anthropic API" in str(outcome)


def test_no_key_in_any_file(problem: Problem, tmp_path: Path) -> None:
    server = Server([tool_use_fixture(), end_turn()])
    agent = make_agent(problem, provider(server), tmp_path)
    agent.run()
    assert SECRET_KEY in (server.api_keys[0] or "")  # the key was in use ...
    for path in agent.log.dir.rglob("*"):
        if path.is_file():
            assert SECRET_KEY not in path.read_text(), path  # ... and is in no file of the run


# --- the provider on its own -----------------------------------------------------------------------


def test_overloaded_529_then_success_through_sdk_retries() -> None:
    overloaded = httpx2.Response(
        529, json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    server = Server([overloaded, end_turn("after retry")])
    reply = provider(server, max_retries=1).complete("system", [], [{"role": "user", "content": "hi"}])
    assert len(server.requests) == 2
    assert reply.text == "after retry"


def test_529_without_retries_left_is_a_provider_error() -> None:
    overloaded = httpx2.Response(
        529, json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    with pytest.raises(ProviderError, match="529"):
        provider(Server([overloaded])).complete("system", [], [{"role": "user", "content": "hi"}])


def test_large_max_tokens_streams_and_assembles_blocks() -> None:
    sse = (FIXTURES / "stream_tool_use.sse").read_text()
    server = Server([httpx2.Response(200, text=sse, headers={"content-type": "text/event-stream"})])
    reply = provider(server, max_tokens=64_000).complete("system", [], [{"role": "user", "content": "go"}])
    assert server.requests[0]["stream"] is True
    assert reply.stop_reason == "tool_use"
    assert reply.content[0] == {
        "type": "thinking",
        "thinking": "Streaming: the kernel comes in pieces.",
        "signature": "EqQBStreamedSignature==",
    }
    (call,) = reply.tool_calls
    assert call.input == {"kernel_code": "import torch\nx = ("}
    assert reply.usage == Usage(
        input_tokens=900, output_tokens=640, cache_read_tokens=2500, thinking_tokens=300
    )


def test_small_max_tokens_does_not_stream() -> None:
    server = Server([end_turn()])
    provider(server, max_tokens=4000).complete("system", [], [{"role": "user", "content": "go"}])
    assert not server.requests[0].get("stream")


def test_cost_comes_from_the_one_price_table() -> None:
    usage = Usage(
        input_tokens=1_000_000, output_tokens=100_000, cache_write_tokens=200_000, cache_read_tokens=3_000_000
    )
    p = PRICES[MODEL]
    expected = p.input + 0.1 * p.output + 0.2 * p.cache_write + 3 * p.cache_read
    assert cost_usd(MODEL, usage) == pytest.approx(expected)
    assert cost_usd("claude-opus-5-5-20261101", usage) == pytest.approx(expected)  # dated id, same family
    assert cost_usd("claude-unknown-9", usage) > expected  # an unknown id errs on the dear side


def test_missing_key_with_explicit_claude_model_is_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.cli import main

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code = main(["run", str(PROBLEM), "--model", MODEL, "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "ANTHROPIC_API_KEY" in err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing started


# --- budgets ---------------------------------------------------------------------------------------


def broken_tool_use(i: int, kernel: str = BROKEN_KERNEL, **usage: int) -> dict[str, Any]:
    block = {
        "type": "tool_use",
        "id": f"toolu_{i:03d}",
        "name": "compile_kernel",
        "input": {"kernel_code": kernel},
    }
    return message([{"type": "text", "text": f"attempt {i}"}, block], "tool_use", **usage)


def test_cost_budget_stops_the_run(problem: Problem, tmp_path: Path) -> None:
    server = Server([broken_tool_use(1, input=1_000_000), broken_tool_use(2)])
    agent = make_agent(problem, provider(server), tmp_path, max_cost_usd=1.0)
    outcome = agent.run()
    assert outcome.status == "CostLimit"
    assert len(server.requests) == 1  # the second call was never made
    summary = RunSummary.model_validate_json((agent.log.dir / "summary.json").read_text())
    assert summary.exit_status == "CostLimit"
    assert summary.cost_usd >= 1.0


def test_turn_budget_stops_the_run(problem: Problem, tmp_path: Path) -> None:
    server = Server([broken_tool_use(i) for i in range(1, 5)])
    outcome = make_agent(problem, provider(server), tmp_path, max_turns=2).run()
    assert outcome.status == "TurnLimit"
    assert len(server.requests) == 2


def test_time_budget_stops_the_run(problem: Problem, tmp_path: Path) -> None:
    agent = make_agent(problem, provider(Server([])), tmp_path, max_minutes=0.0)
    assert agent.run().status == "TimeLimit"


# --- long runs -------------------------------------------------------------------------------------


def test_context_stays_bounded_over_a_long_conversation(problem: Problem, tmp_path: Path) -> None:
    turns = 50
    kernel = (
        "import torch\n" + "# padding line of a long kernel source ...............\n" * 250 + "def broken(:\n"
    )
    thinking = "thinking about the next version " * 60

    def reply(i: int) -> dict[str, Any]:
        reply = broken_tool_use(i, kernel)
        reply["content"].insert(0, {"type": "thinking", "thinking": thinking, "signature": f"sig{i}"})
        return reply

    server = Server([reply(i) for i in range(1, turns + 1)] + [end_turn()])
    agent = make_agent(problem, provider(server), tmp_path)
    assert agent.run().status == "Finished"
    sizes = [len(json.dumps(body["messages"])) for body in server.requests]
    whole = len(json.dumps(agent.state.messages))
    assert whole > 600_000  # what an unbounded history would send by the end
    assert max(sizes) < 80_000  # what was sent stays bounded
    assert sizes[-1] - sizes[turns // 2] < 600 * (turns - turns // 2)  # an old turn costs < 600 chars
    last = server.requests[-1]["messages"]
    assert last[-2]["content"][0]["signature"] == f"sig{turns}"  # latest turn whole, thinking included
    assert last[-2]["content"][-1]["input"]["kernel_code"] == kernel
    assert [m["role"] for m in last] == ["user"] + ["assistant", "user"] * turns


def test_past_the_hard_cap_the_oldest_turns_are_left_out() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for i in range(40):
        messages.append(
            {"role": "assistant", "content": [{"type": "text", "text": f"turn {i} " + "x" * 1000}]}
        )
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "r"}]}
        )
    sent = bounded_messages(messages, keep_recent=3, max_chars=20_000)
    assert len(json.dumps(sent)) <= 20_000
    assert sent[0] == messages[0]
    assert sent[-6:] == messages[-6:]  # the recent turns, whole
    assert [m["role"] for m in sent] == ["user"] + ["assistant", "user"] * (len(sent) // 2)


# --- resume after a kill ---------------------------------------------------------------------------


def _run_until_killed(problem: Problem, runs: Path, second_request: Path) -> None:
    """Child process body: turn 1 runs, then the second model call records its request and hangs."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        if handler.calls == 0:  # type: ignore[attr-defined]
            handler.calls = 1  # type: ignore[attr-defined]
            return httpx2.Response(200, json=tool_use_fixture())
        second_request.write_bytes(request.content)
        time.sleep(600)
        raise AssertionError("not killed")

    handler.calls = 0  # type: ignore[attr-defined]
    make_agent(problem, provider(handler), runs).run()


def test_resume_after_kill_sends_the_request_the_run_would_have_sent(
    problem: Problem, tmp_path: Path
) -> None:
    second_request = tmp_path / "second_request.json"
    runs = tmp_path / "runs"
    child = multiprocessing.get_context("fork").Process(
        target=_run_until_killed, args=(problem, runs, second_request)
    )
    child.start()
    deadline = time.monotonic() + 120
    while not second_request.exists() and child.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert second_request.exists(), "the killed run never reached its second model call"
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join()

    (run_dir,) = runs.iterdir()
    assert not (run_dir / "summary.json").exists()  # killed: no summary, the heartbeat goes stale
    server = Server([end_turn()])
    console = Console(file=io.StringIO(), width=100, legacy_windows=False)
    agent = reopen_agent(run_dir, console, provider=provider(server))
    assert agent.run().status == "Finished"

    expected = json.loads(second_request.read_text())
    resumed = server.requests[0]
    assert resumed.keys() == expected.keys()
    assert resumed["system"] == expected["system"]
    assert resumed["tools"] == expected["tools"]
    assert len(resumed["messages"]) == len(expected["messages"])
    for got, want in zip(resumed["messages"], expected["messages"], strict=True):
        assert got["role"] == want["role"]
        assert got["content"] == want["content"]  # block for block, thinking signatures included
    assert resumed == expected
    summary = RunSummary.model_validate_json((run_dir / "summary.json").read_text())
    assert summary.exit_status == "Finished"
    assert summary.turns == 2


def test_a_harness_fault_is_logged_and_told_to_the_model_not_a_crash(
    problem: Problem, tmp_path: Path
) -> None:
    class BrokenCompile(LocalEvaluator):
        def compile(self, problem: Problem, code: str, on_progress: object = None) -> CompileResult:
            raise OSError("disk full while writing the job folder")

    server = Server([broken_tool_use(1), end_turn()])
    agent = make_agent(problem, provider(server), tmp_path)
    agent.setup.executor.evaluator = BrokenCompile()  # type: ignore[attr-defined]
    outcome = agent.run()
    assert outcome.status == "Finished"
    events = read_events(agent.log.dir)
    call = next(e for e in events if isinstance(e, ToolCallEvent))
    assert call.status == "harness_error"
    assert call.is_error
    assert "disk full" in call.summary
    assert any(isinstance(e, ErrorEvent) and "disk full" in e.message for e in events)
    second_request = server.requests[1]["messages"][-1]["content"][0]
    assert second_request["type"] == "tool_result"
    assert second_request["is_error"] is True
