"""NOTE(clamp) (context_budget.py): a request whose prompt + max_tokens passes the context is
served with max_tokens lowered to the room its prompt leaves, as vLLM's server serves it; only
a prompt that fills the context (or passes it) is a 400. Real server, 64-token context."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.server.test_errors import assert_error, call

CTX = 64
MSGS = [{"role": "user", "content": "tell me a long story about the sea"}]


@pytest.fixture
async def ctx(make_server):
    async with make_server(max_model_len=CTX) as s:
        yield s


async def _post(srv, path: str, body: dict) -> dict:
    status, _, out = await call(srv, "POST", path, json={"ignore_eos": True, **body})
    assert status == 200, out
    return out


async def _chat_len(srv) -> int:
    status, _, out = await call(srv, "POST", "/tokenize", json={"messages": MSGS})
    assert status == 200, out
    return out["count"]


async def test_completions_past_the_context_are_clamped_and_a_full_prompt_is_a_400(ctx):
    out = await _post(ctx, "/v1/completions", {"prompt": [65] * 60, "max_tokens": 30})
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 60, "completion_tokens": 4, "total_tokens": 64,
                            **{k: v for k, v in out["usage"].items()
                               if k not in ("prompt_tokens", "completion_tokens",
                                            "total_tokens")}}
    # vLLM keeps these 400s: a prompt longer than the context, or as long (no room for one)
    for n in (CTX, CTX + 1):
        status, _, err = await call(ctx, "POST", "/v1/completions",
                                    json={"prompt": [65] * n, "max_tokens": 1})
        assert_error(status, err, 400, "prompt", "context_length_exceeded")
    # NOTE(clamp): echo with max_tokens 0 generates nothing, yet a prompt as long as the
    # context stays the 400 vLLM's engine gives it whatever max_tokens asks
    echo = {"prompt": [65] * CTX, "max_tokens": 0, "echo": True}
    status, _, err = await call(ctx, "POST", "/v1/completions", json=echo)
    assert_error(status, err, 400, "prompt", "context_length_exceeded")
    out = await _post(ctx, "/v1/completions", {**echo, "prompt": [65] * (CTX - 1)})
    assert out["usage"]["completion_tokens"] == 0


async def test_each_prompt_of_a_batch_gets_its_own_clamp(ctx):
    out = await _post(ctx, "/v1/completions", {"prompt": [[65] * 60, [66] * 10],
                                               "max_tokens": 30, "logprobs": 0})
    got = sorted((c["index"], len(c["logprobs"]["tokens"]), c["finish_reason"])
                 for c in out["choices"])
    assert got == [(0, 4, "length"), (1, 30, "length")]
    assert out["usage"]["completion_tokens"] == 34


async def test_n_2_each_sequence_gets_the_clamped_budget(ctx):
    out = await _post(ctx, "/v1/completions", {"prompt": [65] * 58, "max_tokens": 40, "n": 2,
                                               "temperature": 1.0, "logprobs": 0})
    assert [len(c["logprobs"]["tokens"]) for c in out["choices"]] == [6, 6]
    assert {c["finish_reason"] for c in out["choices"]} == {"length"}
    assert out["usage"]["completion_tokens"] == 12


async def test_chat_max_tokens_and_max_completion_tokens_are_clamped(ctx):
    room = CTX - await _chat_len(ctx)
    for field in ("max_tokens", "max_completion_tokens"):
        out = await _post(ctx, "/v1/chat/completions", {"messages": MSGS, field: room + 20})
        assert out["choices"][0]["finish_reason"] == "length"
        assert out["usage"]["completion_tokens"] == room


async def test_responses_max_output_tokens_is_clamped(ctx):
    room = CTX - await _chat_len(ctx)
    out = await _post(ctx, "/v1/responses", {"input": MSGS, "max_output_tokens": room + 20})
    assert out["status"] == "incomplete", out
    assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["usage"]["output_tokens"] == room


async def test_a_stream_past_the_context_is_clamped(ctx):
    body = {"prompt": [65] * 60, "max_tokens": 30, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    async with aiohttp.ClientSession() as s:
        async with s.post(ctx.url + "/v1/completions", json=body) as r:
            assert r.status == 200, await r.text()
            raw = await r.text()
    events = [json.loads(line[6:]) for line in raw.splitlines()
              if line.startswith("data: {")]
    finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    assert finishes == ["length"]
    assert events[-1]["usage"]["completion_tokens"] == 4
    assert raw.rstrip().endswith("data: [DONE]")


async def test_truncate_minus_one_keeps_room_for_one_token(ctx):
    """vLLM cuts to max_model_len - 1 (its max_truncation_tokens) and then generates one."""
    out = await _post(ctx, "/v1/completions", {"prompt": [65] * 100, "max_tokens": 30,
                                               "truncate_prompt_tokens": -1})
    assert out["usage"]["prompt_tokens"] == CTX - 1
    assert out["usage"]["completion_tokens"] == 1
    assert out["choices"][0]["finish_reason"] == "length"
    long = [{"role": "user", "content": "sea " * 200}]
    out = await _post(ctx, "/v1/chat/completions", {"messages": long,
                                                    "truncate_prompt_tokens": -1})
    assert out["usage"]["prompt_tokens"] == CTX - 1
    assert out["usage"]["completion_tokens"] == 1
    out = await _post(ctx, "/v1/responses", {"input": long, "truncation": "auto"})
    assert out["usage"]["input_tokens"] == CTX - 1
    assert out["usage"]["output_tokens"] == 1 and out["status"] == "incomplete"
