"""`--model openai:<model>` against a stand-in OpenAI-compatible server on 127.0.0.1: the real openai SDK
over real HTTP, answered by a stdlib `http.server` that speaks the chat-completions streaming wire format
(SSE `data: {...}` chunks, then `data: [DONE]`). The kernels sent in the fast tests fail the evaluator's
syntax check, which answers without starting a child process; the one end-to-end test builds a real one.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agent.cli import main
from agent.cli.run import new_agent
from agent.conversation import MAX_TOKENS_NOTE
from agent.exits import HARNESS_ERROR as MODEL_ERROR
from agent.exits import NO_CORRECT_KERNEL, TURN_LIMIT
from agent.loop import Agent
from agent.providers.base import ProviderError
from agent.providers.openai import OpenAIProvider, PartialCall, assistant_message, public_url, tool_use_block
from agent.providers.pricing import OPENAI_PRICES, cost_at, openai_price
from agent.runlog.events import ModelCallEvent, RunConfig, RunInfo, RunSummary, ToolCallEvent, Usage
from agent.runlog.reader import read_events
from tools.problem import Problem, load_problem

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "problems" / "selective_scan_cpu.yaml"
BASELINE = ROOT / "problems" / "selective_scan_cpu" / "solutions" / "baseline.py"
MODEL = "gpt-4.1"
BROKEN_KERNEL = 'import torch\ndef broken(:\n    "quoted \\" text"\n'  # a SyntaxError, with JSON escapes
SECRET_KEY = "sk-openai-test-DO-NOT-LOG-0123456789"


# --- the stand-in server ---------------------------------------------------------------------------


@dataclass
class Answer:
    """One scripted answer: SSE chunks (a whole stream, or `cut` before its end), or an HTTP error."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    cut: bool = False  # close the connection halfway through the stream


def sse_bytes(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


class FakeServer:
    """Answers POST /v1/chat/completions with its scripted answers in order; keeps every request."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.paths: list[str] = []
        self.times: list[float] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                server.requests.append(json.loads(body))
                server.auth.append(self.headers.get("authorization"))
                server.paths.append(self.path)
                server.times.append(time.monotonic())
                answer = (
                    server.answers.pop(0) if server.answers else Answer(status=500, body=_error("none left"))
                )
                self.answer(answer)

            def answer(self, answer: Answer) -> None:
                if answer.status != 200:
                    payload = json.dumps(answer.body or {}).encode()
                    self.send_response(answer.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                payload = sse_bytes(answer.chunks)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(payload)))  # a cut stream falls short of it
                self.end_headers()
                self.wfile.write(payload[: len(payload) // 2] if answer.cut else payload)
                self.wfile.flush()
                if answer.cut:
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[FakeServer] = []

    def start(*answers: Answer) -> FakeServer:
        servers.append(FakeServer(list(answers)))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the CLI's lines, unwrapped
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def _error(message: str, kind: str = "server_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# --- chunks ----------------------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1_800_000_000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }


def usage_chunk(
    prompt: int = 1200, cached: int = 1000, completion: int = 300, reasoning: int = 100
) -> dict[str, Any]:
    """The last chunk of a stream asked for with include_usage: no choices, the call's usage."""
    return {
        **chunk(),
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        },
    }


def pieces(text: str, n: int) -> list[str]:
    step = max(1, len(text) // n)
    return [text[i : i + step] for i in range(0, len(text), step)]


def tool_call_chunks(
    index: int, call_id: str, name: str, arguments: dict[str, Any], n: int = 4
) -> list[dict[str, Any]]:
    """A tool call as servers stream it: id and name first, then the JSON arguments in `n` fragments."""
    first = {
        "tool_calls": [
            {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        ]
    }
    rest = [
        {"tool_calls": [{"index": index, "function": {"arguments": p}}]}
        for p in pieces(json.dumps(arguments), n)
    ]
    return [chunk(first)] + [chunk(d) for d in rest]


def text_answer(text: str = "Done.", finish: str = "stop", **usage: int) -> Answer:
    deltas = [chunk({"role": "assistant", "content": ""})] + [chunk({"content": p}) for p in pieces(text, 2)]
    return Answer([*deltas, chunk(finish=finish), usage_chunk(**usage)])


def tool_answer(
    call_id: str, kernel: str, name: str = "compile_kernel", text: str = "Compiling.", **usage: int
) -> Answer:
    chunks = [chunk({"role": "assistant", "content": text})]
    chunks += tool_call_chunks(0, call_id, name, {"kernel_code": kernel})
    return Answer([*chunks, chunk(finish="tool_calls"), usage_chunk(**usage)])


def provider(server: FakeServer, max_retries: int = 0, **kwargs: Any) -> OpenAIProvider:
    return OpenAIProvider(MODEL, base_url=server.url, max_retries=max_retries, **kwargs)


def ask(prov: OpenAIProvider) -> Any:
    return prov.complete("system", [], [{"role": "user", "content": "go"}])


@pytest.fixture(scope="module")
def problem() -> Problem:
    return load_problem(PROBLEM)


def make_agent(problem: Problem, prov: OpenAIProvider, runs: Path, **limits: Any) -> Agent:
    config = RunConfig(
        problem_path=str(problem.path), provider="openai", model=prov.model, base_url=prov.base_url, **limits
    )
    console = Console(file=io.StringIO(), width=100, legacy_windows=False)
    return new_agent(problem, prov, config, runs, console)


def only_run(runs: Path) -> Path:
    (run_dir,) = runs.iterdir()
    return run_dir


# --- the provider on its own -----------------------------------------------------------------------


def test_a_tool_call_streamed_in_deltas_is_assembled_with_its_usage(serve: Any) -> None:
    second = tool_call_chunks(1, "call_B", "benchmark", {"kernel_code": "x = 2"}, n=2)
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "Think first. "}),
        chunk({"reasoning_content": "Then act."}),
        chunk({"content": "Let me "}),
        chunk({"content": "compile it."}),
        *tool_call_chunks(0, "call_A", "compile_kernel", {"kernel_code": BROKEN_KERNEL}, n=5),
        *second,
        chunk(finish="tool_calls"),
        usage_chunk(prompt=1200, cached=1000, completion=300, reasoning=100),
    ]
    server = serve(Answer(chunks))
    tools = [{"name": "compile_kernel", "description": "Compile it.", "input_schema": {"type": "object"}}]
    reply = provider(server).complete("the system prompt", tools, [{"role": "user", "content": "go"}])

    assert reply.content == [
        {"type": "thinking", "thinking": "Think first. Then act."},
        {"type": "text", "text": "Let me compile it."},
        {
            "type": "tool_use",
            "id": "call_A",
            "name": "compile_kernel",
            "input": {"kernel_code": BROKEN_KERNEL},
        },
        {"type": "tool_use", "id": "call_B", "name": "benchmark", "input": {"kernel_code": "x = 2"}},
    ]
    assert reply.stop_reason == "tool_use"
    assert reply.usage == Usage(
        input_tokens=200, cache_read_tokens=1000, output_tokens=300, thinking_tokens=100
    )
    assert reply.cost_usd == pytest.approx((200 * 2.0 + 1000 * 0.5 + 300 * 8.0) / 1e6)  # gpt-4.1's prices

    (body,) = server.requests
    assert server.paths == ["/v1/chat/completions"]
    assert server.auth == [f"Bearer {SECRET_KEY}"]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == MODEL
    assert body["messages"] == [
        {"role": "system", "content": "the system prompt"},
        {"role": "user", "content": "go"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "compile_kernel",
                "description": "Compile it.",
                "parameters": {"type": "object"},
            },
        }
    ]


def test_429_then_success_waits_what_retry_after_asks(serve: Any) -> None:
    limited = Answer(status=429, body=_error("slow down", "rate_limit_error"), headers={"retry-after": "1"})
    server = serve(limited, text_answer("after the wait"))
    started = time.monotonic()
    reply = ask(provider(server, max_retries=2))
    assert reply.text == "after the wait"
    assert len(server.requests) == 2
    assert server.requests[0] == server.requests[1]  # the same request, sent again
    assert server.times[1] - server.times[0] >= 1.0  # the SDK's own backoff would be at most 0.5 s
    assert time.monotonic() - started < 30


def test_500_past_the_retry_budget_is_a_provider_error(serve: Any) -> None:
    failing = Answer(status=500, body=_error("engine exploded"), headers={"retry-after-ms": "10"})
    server = serve(failing, failing, failing, text_answer("never reached"))
    with pytest.raises(ProviderError) as caught:
        ask(provider(server, max_retries=2))
    assert len(server.requests) == 3  # the first try and two retries, then no more
    message = str(caught.value)
    assert f"openai:{MODEL}: {server.url} answered 500 (after 2 retries): engine exploded" in message
    assert "try again later" in message


def test_a_stream_cut_midway_is_replayed_whole(serve: Any) -> None:
    first = tool_answer("call_cut", BROKEN_KERNEL)
    server = serve(Answer(first.chunks, cut=True), text_answer("whole this time"))
    slept: list[float] = []
    reply = ask(provider(server, sleep=slept.append))
    assert reply.content == [{"type": "text", "text": "whole this time"}]  # nothing of the cut stream
    assert len(server.requests) == 2
    assert slept == [0.5]


def test_a_stream_that_keeps_breaking_is_a_provider_error(serve: Any) -> None:
    cut = Answer(text_answer("never whole").chunks, cut=True)
    server = serve(cut, cut, cut, text_answer("not asked for"))
    slept: list[float] = []
    with pytest.raises(ProviderError, match="broke off 3 times") as caught:
        ask(provider(server, sleep=slept.append))
    assert len(server.requests) == 3
    assert slept == [0.5, 1.0]
    assert "is the server stable?" in str(caught.value)


def test_a_stream_without_a_finish_reason_is_not_taken_for_a_finished_reply(serve: Any) -> None:
    unfinished = Answer([chunk({"content": "half a tho"}), usage_chunk()])
    server = serve(unfinished, unfinished, text_answer("finished"))
    assert ask(provider(server, sleep=lambda s: None)).text == "finished"
    assert len(server.requests) == 3


def test_an_unreachable_server_is_a_clear_provider_error() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prov = OpenAIProvider(MODEL, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(ProviderError) as caught:
        ask(prov)
    message = str(caught.value)
    assert f"cannot reach http://127.0.0.1:{port}/v1" in message
    assert "--base-url" in message


def test_a_rejected_key_is_named_and_never_echoed(serve: Any) -> None:
    echo = _error(f"Incorrect API key provided: {SECRET_KEY}", "invalid_request_error")
    server = serve(Answer(status=401, body=echo))
    with pytest.raises(ProviderError) as caught:
        ask(provider(server))
    message = str(caught.value)
    assert "answered 401" in message
    assert "check OPENAI_API_KEY" in message
    assert SECRET_KEY not in message
    assert "[OPENAI_API_KEY]" in message


@pytest.mark.parametrize(
    ("answer", "stop_reason", "details"),
    [
        (text_answer("cut off", finish="length"), "max_tokens", None),
        (text_answer("", finish="content_filter"), "refusal", "content filter"),
        (
            Answer([chunk({"refusal": "I can't help with that."}), chunk(finish="stop"), usage_chunk()]),
            "refusal",
            "can't help",
        ),
        (
            Answer([*tool_answer("c1", "x").chunks[:-2], chunk(finish="stop"), usage_chunk()]),
            "tool_use",
            None,
        ),
    ],
    ids=["length", "content_filter", "refusal", "tool_call_ended_by_stop"],
)
def test_finish_reasons_become_the_loops_stop_reasons(
    serve: Any, answer: Answer, stop_reason: str, details: str | None
) -> None:
    reply = ask(provider(serve(answer)))
    assert reply.stop_reason == stop_reason
    assert (reply.stop_details is None) if details is None else (details in (reply.stop_details or ""))


def test_arguments_that_are_not_json_are_kept_and_sent_back_as_written() -> None:
    block = tool_use_block(PartialCall(id="call_1", name="compile_kernel", arguments='{"kernel_code": "abc'))
    assert block["input"] == {"unparsed_arguments": '{"kernel_code": "abc'}
    message = assistant_message([block])
    assert message["tool_calls"][0]["function"]["arguments"] == '{"kernel_code": "abc'
    assert message["content"] is None


def test_a_server_that_reports_no_usage_counts_zero_tokens(serve: Any) -> None:
    answer = text_answer("no usage")
    server = serve(Answer(answer.chunks[:-1]))  # the usage chunk left out
    reply = ask(provider(server))
    assert reply.usage == Usage()
    assert reply.cost_usd == 0


def test_the_price_table_knows_dated_and_gateway_ids_and_guesses_no_other() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=2_000_000)
    p = OPENAI_PRICES["gpt-4.1"]
    expected = p.input + 0.1 * p.output + 2 * p.cache_read
    assert cost_at(p, usage) == pytest.approx(expected)
    assert openai_price("gpt-4.1-2025-04-14") == p
    assert openai_price("openai/gpt-4.1") == p
    assert openai_price("gpt-4.1-mini") == OPENAI_PRICES["gpt-4.1-mini"]
    assert openai_price("gpt-5.4-pro") is None  # not priced as gpt-5.4
    assert openai_price("Qwen/Qwen3-Coder-30B-A3B-Instruct") is None


# --- the loop over the provider --------------------------------------------------------------------


def test_tool_call_round_trip_through_the_loop(problem: Problem, tmp_path: Path, serve: Any) -> None:
    server = serve(tool_answer("call_7", BROKEN_KERNEL, prompt=3000, cached=0), text_answer("Done."))
    agent = make_agent(problem, provider(server), tmp_path)
    assert agent.run().status == "Finished"

    first, second = server.requests
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][:2] == first["messages"]  # the system prompt and the task, unchanged
    assert [t["function"]["name"] for t in second["tools"]] == [
        "compile_kernel",
        "benchmark",
        "profile_kernel",
    ]
    assert second["tools"][0]["function"]["parameters"]["required"] == ["kernel_code"]
    assistant, tool = second["messages"][2:]
    assert assistant["content"] == "Compiling."
    (call,) = assistant["tool_calls"]
    assert call["id"] == "call_7"
    assert call["function"]["name"] == "compile_kernel"
    assert json.loads(call["function"]["arguments"]) == {"kernel_code": BROKEN_KERNEL}
    assert tool["tool_call_id"] == "call_7"
    assert tool["content"].startswith("compile_kernel FAILED (import_error)")

    events = read_events(agent.log.dir)
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    assert [c.provider for c in calls] == ["openai", "openai"]
    assert calls[0].usage == Usage(input_tokens=3000, output_tokens=300, thinking_tokens=100)
    assert calls[0].cost_usd == pytest.approx((3000 * 2.0 + 300 * 8.0) / 1e6)
    (tool_event,) = [e for e in events if isinstance(e, ToolCallEvent)]
    assert tool_event.tool_use_id == "call_7"
    assert (agent.log.dir / "kernels" / "001.py").read_text() == BROKEN_KERNEL
    summary = RunSummary.model_validate_json((agent.log.dir / "summary.json").read_text())
    assert summary.turns == 2
    assert summary.usage.tokens_in == 3000 + 1200
    assert summary.cost_usd == pytest.approx(calls[0].cost_usd + calls[1].cost_usd)
    info = RunInfo.model_validate_json((agent.log.dir / "run.json").read_text())
    assert (info.provider, info.model, info.config.base_url) == ("openai", MODEL, server.url)


def test_a_cut_off_reply_is_sent_back_as_text_with_the_note(
    problem: Problem, tmp_path: Path, serve: Any
) -> None:
    cut = Answer([*tool_answer("call_cut", BROKEN_KERNEL).chunks[:-2], chunk(finish="length"), usage_chunk()])
    server = serve(cut, text_answer())
    assert make_agent(problem, provider(server), tmp_path).run().status == "Finished"
    sent = server.requests[1]["messages"]
    assert sent[-2:] == [
        {"role": "assistant", "content": "Compiling."},
        {"role": "user", "content": MAX_TOKENS_NOTE},
    ]


# --- the command line ------------------------------------------------------------------------------


def run_cli(*args: str) -> int:
    return main(["run", str(PROBLEM), *args])


def test_resume_sends_what_the_uninterrupted_run_sent(
    tmp_path: Path, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = [tool_answer("call_1", BROKEN_KERNEL), text_answer("Done.")]
    model = ["--model", f"openai:{MODEL}"]
    whole = serve(*answers)
    whole_args = [*model, "--base-url", whole.url, "--max-turns", "2", "--runs-dir", str(tmp_path / "whole")]
    assert run_cli(*whole_args) == NO_CORRECT_KERNEL  # it finished; the broken kernel is no kernel

    stopped = serve(*answers)
    runs = tmp_path / "stopped"
    assert (
        run_cli(*model, "--base-url", stopped.url, "--max-turns", "1", "--runs-dir", str(runs)) == TURN_LIMIT
    )
    assert len(stopped.requests) == 1
    run_dir = only_run(runs)
    # the server is found again from run.json; --model may name the provider as it was given
    assert main(["run", "--resume", str(run_dir), "--max-turns", "2", *model]) == NO_CORRECT_KERNEL
    assert f"resuming {run_dir} at turn 2 · openai · {MODEL} at {stopped.url}" in capsys.readouterr().err

    assert len(stopped.requests) == 2
    assert stopped.requests[1] == whole.requests[1]  # system, task, the call and its result: all the same
    assert [m["role"] for m in stopped.requests[1]["messages"]] == ["system", "user", "assistant", "tool"]
    summary = RunSummary.model_validate_json((run_dir / "summary.json").read_text())
    assert (summary.exit_status, summary.turns) == ("Finished", 2)


def test_the_key_is_in_no_file_of_the_run(tmp_path: Path, serve: Any) -> None:
    echo = Answer(status=401, body=_error(f"bad key {SECRET_KEY}", "invalid_request_error"))
    server = serve(tool_answer("call_1", BROKEN_KERNEL), echo)
    code = run_cli("--model", f"openai:{MODEL}", "--base-url", server.url, "--runs-dir", str(tmp_path))
    assert code == MODEL_ERROR
    assert server.auth == [f"Bearer {SECRET_KEY}"] * 2  # the key was in use ...
    run_dir = only_run(tmp_path)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"run.json", "events.jsonl", "summary.json", "001.py"}
    for path in files:
        assert SECRET_KEY not in path.read_text(), path  # ... and is in no file of the run
    errors = [e for e in read_events(run_dir) if isinstance(e, ModelCallEvent) and e.status == "error"]
    assert "bad key [OPENAI_API_KEY]" in (errors[0].error or "")  # the server's echo, scrubbed


def test_credentials_and_queries_in_a_base_url_are_not_kept() -> None:
    assert public_url("http://user:hunter2@127.0.0.1:8000/v1/?api-key=abc") == "http://127.0.0.1:8000/v1"
    assert public_url("https://api.openai.com/v1/") == "https://api.openai.com/v1"


def test_a_missing_key_is_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    assert run_cli("--model", "openai:gpt-x", "--runs-dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing started


def test_without_the_sdk_the_message_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` now fails as if not installed
    monkeypatch.delitem(sys.modules, "agent.providers.openai", raising=False)
    assert run_cli("--model", "openai:gpt-x", "--runs-dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "pip install 'kernel-agent[openai]'" in err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_the_core_imports_and_plays_back_without_the_sdk(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['openai'] = None\n"
        "import agent.cli.run, agent.loop, agent.resume, agent.providers\n"
        "from agent.providers import choose_model, make_provider\n"
        "p = make_provider('scripted', __import__('pathlib').Path(sys.argv[1]))\n"
        "assert p.name == 'scripted' and 'openai' not in [m for m in sys.modules if sys.modules[m]]\n"
        "print('ok')\n"
    )
    trajectory = ROOT / "problems" / "selective_scan_cpu" / "trajectory.yaml"
    done = subprocess.run(
        [sys.executable, "-c", code, str(trajectory)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_an_unknown_model_costs_zero_with_a_note_and_refuses_a_cost_budget(
    tmp_path: Path, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve(text_answer("Nothing to do."))
    code = run_cli("--model", "openai:gpt-x", "--base-url", server.url, "--runs-dir", str(tmp_path / "a"))
    assert code == NO_CORRECT_KERNEL  # it finished, with no kernel
    err = capsys.readouterr().err
    assert "no price is known for 'gpt-x'" in err
    assert f"openai · gpt-x at {server.url}" in err
    summary = RunSummary.model_validate_json((only_run(tmp_path / "a") / "summary.json").read_text())
    assert summary.cost_usd == 0
    assert summary.usage.tokens_in == 1200  # tokens are still counted

    code = run_cli(
        "--model",
        "openai:gpt-x",
        "--base-url",
        server.url,
        "--max-cost",
        "5",
        "--runs-dir",
        str(tmp_path / "b"),
    )
    assert code == 2
    assert "--max-cost cannot limit this run" in capsys.readouterr().err
    assert not (tmp_path / "b").exists() or not list((tmp_path / "b").iterdir())


def test_base_url_is_for_openai_models_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run_cli("--model", "scripted", "--base-url", "http://localhost:1/v1", "--runs-dir", str(tmp_path))
        == 2
    )
    assert "--base-url is for --model openai:<model>" in capsys.readouterr().err


def test_openai_base_url_from_the_environment_is_used_and_recorded(
    problem: Problem, tmp_path: Path, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(text_answer())
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    prov = OpenAIProvider(MODEL, max_retries=0)
    assert prov.base_url == server.url
    ask(prov)
    assert len(server.requests) == 1


# --- end to end ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_agent_run_against_a_compatible_server_end_to_end(tmp_path: Path, serve: Any) -> None:
    """`agent run` in its own process, over HTTP to the stand-in: a real C++ build of the baseline."""
    server = serve(
        tool_answer(
            "call_e2e", BASELINE.read_text(), text="Compiling the baseline.", prompt=5000, cached=4000
        ),
        text_answer("It compiles; done.", prompt=6000, cached=5000, completion=40, reasoning=0),
    )
    runs = tmp_path / "runs"
    env = {**os.environ, "COLUMNS": "400", "OPENAI_API_KEY": SECRET_KEY}  # 400: no line wrapped
    env.pop("ANTHROPIC_API_KEY", None)
    cmd = [
        sys.executable,
        "-m",
        "agent.cli",
        "run",
        "problems/selective_scan_cpu.yaml",
        "--model",
        f"openai:{MODEL}",
        "--base-url",
        server.url,
        "--max-turns",
        "2",
        "--runs-dir",
        str(runs),
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == NO_CORRECT_KERNEL, done.stderr[-3000:]  # finished; a compile is not a kernel
    assert f"openai · {MODEL} at {server.url}" in done.stderr
    assert "2 turns · tokens in=11,000 out=340 (thinking 100), $0.01" in done.stderr
    run_dir = only_run(runs)

    (tool,) = [e for e in read_events(run_dir) if isinstance(e, ToolCallEvent)]
    assert (tool.name, tool.status, tool.is_error) == ("compile_kernel", "ok", False), tool.summary
    assert server.requests[1]["messages"][-1]["role"] == "tool"
    assert server.requests[1]["messages"][-1]["content"].startswith("compile_kernel PASSED")
    summary = RunSummary.model_validate_json((run_dir / "summary.json").read_text())
    usage = Usage(
        input_tokens=1000 + 1000, cache_read_tokens=4000 + 5000, output_tokens=340, thinking_tokens=100
    )
    assert summary.usage == usage
    assert summary.cost_usd == pytest.approx(cost_at(OPENAI_PRICES[MODEL], usage))

    shown = subprocess.run(
        [sys.executable, "-m", "agent.cli", "show", str(run_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "turn 1 · " in out
    assert "turn 2 · " in out
    assert "tokens in=5,000 · out=300 · total=5,300 · $0.006" in out  # turn 1's header, priced
    assert "call → compile_kernel" in out
    assert f"${summary.cost_usd:.3f}" in out
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET_KEY not in path.read_text(errors="replace"), path
