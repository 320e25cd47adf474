"""Every bool field of /v1/completions and /v1/chat/completions read as vLLM 0.33's request
models read a bool (pydantic's lax bool, NOTE(lax-bool) in kvpool/server/json_body.py), on a
real server: "yes", "true", "on", "t", "1", 1 and 1.0 are true, their opposites false, and the
answer is the one the JSON bool gets; anything else is a 400 OpenAI error naming the field."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from kvpool.server.field_policy import IGNORED_FIELDS_HEADER

P = "Once upon a time"
COMPLETION = {"prompt": P, "max_tokens": 3, "temperature": 0}
CHAT = {"messages": [{"role": "user", "content": P}], "max_tokens": 3, "temperature": 0}
CONTINUED = {**CHAT, "add_generation_prompt": False,
             "messages": [*CHAT["messages"], {"role": "assistant", "content": "The end"}]}
# (path, body, field): every bool field of vLLM's CompletionRequest / ChatCompletionRequest
# this server reads (use_beam_search: test_beam_search_field.py; return_token_ids:
# test_return_token_ids.py)
FIELDS = [("/v1/completions", {**COMPLETION, "logprobs": 1}, f) for f in (
    "echo", "ignore_eos", "include_stop_str_in_output", "skip_special_tokens",
    "spaces_between_special_tokens", "add_special_tokens", "return_tokens_as_token_ids")] + [
    ("/v1/chat/completions", {**CHAT, "logprobs": True}, f) for f in (
        "ignore_eos", "include_stop_str_in_output", "skip_special_tokens",
        "spaces_between_special_tokens", "add_special_tokens", "return_tokens_as_token_ids",
        "add_generation_prompt")] + [
    ("/v1/chat/completions", CHAT, "logprobs"),
    ("/v1/chat/completions", CONTINUED, "echo"),
    ("/v1/chat/completions", CONTINUED, "continue_final_message")]
SPELLINGS = {True: ["yes", "true", "On", "t", "1", "Y"], False: ["no", "FALSE", "off", "f",
                                                                "0", "n"]}
SHOWN = {"/v1/completions": {"echo", "return_tokens_as_token_ids"},
         "/v1/chat/completions": {"logprobs", "echo", "return_tokens_as_token_ids"}}


async def post(s: aiohttp.ClientSession, srv, path: str, body: dict) -> tuple[int, dict]:
    async with s.post(srv.url + path, json={"model": srv.engine.model_name, **body}) as r:
        assert r.headers.get(IGNORED_FIELDS_HEADER) is None
        return r.status, await r.json()


def same(answer: Any) -> Any:
    """The answer less what differs between two runs of one request: ids, times, the prefix
    cache's hits and the last bits of a logprob computed over a cached prefix."""
    if isinstance(answer, list):
        return [same(v) for v in answer]
    if isinstance(answer, float):
        return round(answer, 3)
    if not isinstance(answer, dict):
        return answer
    return {k: same(v) for k, v in answer.items()
            if k not in ("id", "created", "prompt_tokens_details")}


@pytest.mark.parametrize("path, body, field", FIELDS, ids=[f"{p[4:8]}-{f}" for p, _, f in FIELDS])
async def test_a_bool_field_takes_what_vllm_reads_as_a_bool(srv, path, body, field):
    i = [f for _, _, f in FIELDS].index(field)
    async with aiohttp.ClientSession() as s:
        answers = {}
        for value in (True, False):
            status, answers[value] = await post(s, srv, path, {**body, field: value})
            assert status == 200, answers[value]
            for other in (SPELLINGS[value][i % 6], int(value), float(value)):
                status, got = await post(s, srv, path, {**body, field: other})
                assert status == 200 and same(got) == same(answers[value]), (other, got)
    if field in SHOWN[path]:  # the field changes the answer: the spellings are not ignored
        assert same(answers[True]) != same(answers[False])


async def sse(s: aiohttp.ClientSession, srv, path: str, body: dict) -> tuple[str, list[dict]]:
    async with s.post(srv.url + path, json={"model": srv.engine.model_name, **body}) as r:
        assert r.status == 200, await r.text()
        kind, raw = r.headers["Content-Type"], await r.text()
    if not kind.startswith("text/event-stream"):
        return kind, [json.loads(raw)]
    events = [b.removeprefix("data: ") for b in raw.split("\n\n") if b]
    assert events[-1] == "[DONE]"
    return kind, [json.loads(e) for e in events[:-1]]


@pytest.mark.parametrize("path, body", [("/v1/completions", COMPLETION),
                                        ("/v1/chat/completions", CHAT)])
async def test_stream_and_its_options_take_what_vllm_reads_as_a_bool(srv, path, body):
    options = {"include_usage": True, "continuous_usage_stats": True}
    async with aiohttp.ClientSession() as s:
        _, want = await sse(s, srv, path, {**body, "stream": True, "stream_options": options})
        for stream, include, every in (("true", "yes", "1"), (1, "on", 1.0), ("T", 1, "y")):
            kind, got = await sse(s, srv, path, {**body, "stream": stream, "stream_options": {
                "include_usage": include, "continuous_usage_stats": every}})
            assert kind.startswith("text/event-stream")
            assert [same(c) for c in got] == [same(c) for c in want]
            assert all(c["usage"] for c in got) and not got[-1]["choices"]
        _, plain = await sse(s, srv, path, {**body, "stream": False})
        for stream in ("false", 0, "off"):
            kind, got = await sse(s, srv, path, {**body, "stream": stream})
            assert kind.startswith("application/json") and same(got[0]) == same(plain[0])
        _, quiet = await sse(s, srv, path, {**body, "stream": True})
        kind, got = await sse(s, srv, path, {**body, "stream": "yes", "stream_options": {
            "include_usage": "no", "continuous_usage_stats": 0}})
        assert [same(c) for c in got] == [same(c) for c in quiet]
        assert all(c.get("usage") is None for c in got)


BAD_VALUES = ["maybe", 2, -1, 0.5, [], {}, " true", "truee", ""]


async def test_anything_else_is_a_400_naming_the_field(srv):
    fields = [(p, b, f) for p, b, f in FIELDS] + [
        ("/v1/completions", COMPLETION, "stream"), ("/v1/chat/completions", CHAT, "stream")]
    async with aiohttp.ClientSession() as s:
        for n, (path, body, field) in enumerate(fields):
            bad = BAD_VALUES[n % len(BAD_VALUES)]
            status, got = await post(s, srv, path, {**body, field: bad})
            assert status == 400 and set(got) == {"error"}, (field, bad, got)
            error = got["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["param"] == field and error["type"] == "invalid_request_error"
            assert json.dumps(bad) in error["message"], error
        for key in ("include_usage", "continuous_usage_stats"):
            status, got = await post(s, srv, "/v1/completions", {
                **COMPLETION, "stream": "true", "stream_options": {key: "sure"}})
            assert status == 400 and got["error"]["param"] == f"stream_options.{key}", got
        status, got = await post(s, srv, "/v1/completions", COMPLETION)
        assert status == 200 and got["usage"]["completion_tokens"] == 3  # still serving


async def test_tokenize_reads_return_token_strs_and_add_special_tokens_alike(srv):
    async with aiohttp.ClientSession() as s:
        _, want = await post(s, srv, "/tokenize", {"prompt": P, "return_token_strs": True,
                                                   "add_special_tokens": False})
        for strs, special in (("yes", "no"), (1, 0), ("on", "off")):
            status, got = await post(s, srv, "/tokenize", {
                "prompt": P, "return_token_strs": strs, "add_special_tokens": special})
            assert status == 200 and got == want, got
        assert want["token_strs"]
        status, got = await post(s, srv, "/tokenize", {"prompt": P, "return_token_strs": 3})
        assert status == 400 and got["error"]["param"] == "return_token_strs", got
