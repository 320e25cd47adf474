"""vLLM's ``prompt_embeds`` on a real server: vLLM 0.33 started without
--enable-prompt-embeds refuses it on /v1/completions with a 400 naming it; this server has no
prompt embeddings, so it refuses it so too, where it was an unknown field, ignored, and the
prompt answered. An empty list (vLLM skips it) or null runs as before; chat has no such
field in vLLM, so there it stays unknown (ignored and listed)."""

from __future__ import annotations

import aiohttp
import pytest

from kvpool.server.field_policy import IGNORED_FIELDS_HEADER

# a base64 float tensor as vLLM's clients send it (torch.save bytes, here only their shape)
EMBEDS = "UEsDBAAACAgAAAAAAAAAAAAAAAAAAAAAAAAQABIAYXJjaGl2ZS9kYXRhLnBrbA=="


async def post(srv, path: str, body: dict) -> tuple[int, dict, str | None]:
    async with aiohttp.ClientSession() as s, s.post(
            srv.url + path, json={"model": srv.engine.model_name, **body}) as r:
        return r.status, await r.json(), r.headers.get(IGNORED_FIELDS_HEADER)


@pytest.mark.parametrize("body", [
    {"prompt": "hi", "prompt_embeds": EMBEDS}, {"prompt": "hi", "prompt_embeds": [EMBEDS]},
    {"prompt_embeds": EMBEDS}, {"prompt": "", "prompt_embeds": [EMBEDS, EMBEDS]},
    {"prompt": "hi", "prompt_embeds": ""}, {"prompt": "hi", "prompt_embeds": 5},
    {"prompt": "hi", "prompt_embeds": EMBEDS, "stream": True}])
async def test_prompt_embeds_are_refused_as_vllm_refuses_them(srv, body):
    status, got, _ = await post(srv, "/v1/completions", {"max_tokens": 2, **body})
    assert status == 400 and set(got) == {"error"}, got
    error = got["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == "prompt_embeds" and error["type"] == "invalid_request_error"
    assert error["code"] == "unsupported_parameter"
    assert "--enable-prompt-embeds" in error["message"], error
    status, got, _ = await post(srv, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert status == 200 and got["usage"]["completion_tokens"] == 2  # the next one is served


@pytest.mark.parametrize("value", [[], None])
async def test_no_prompt_embeds_runs(srv, value):
    status, got, ignored = await post(srv, "/v1/completions", {
        "prompt": "hi", "max_tokens": 2, "prompt_embeds": value})
    assert status == 200 and got["usage"]["completion_tokens"] == 2, got
    assert ignored is None


async def test_chat_has_no_prompt_embeds_field(srv):
    status, got, ignored = await post(srv, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "prompt_embeds": EMBEDS})
    assert status == 200 and got["usage"]["completion_tokens"] == 2, got
    assert ignored == "prompt_embeds"
