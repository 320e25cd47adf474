"""Where vLLM 0.33's Messages API (vllm/entrypoints/anthropic) answers a request in a way the
plain conversion would not, on a real server on 127.0.0.1: inline system messages under a
template that wants its system message first, usage's cache fields, and image blocks (the
built-in model reads text only). Each refused body leaves no block behind (the fixture checks
the pool at teardown) and the next request is served."""

from __future__ import annotations

import aiohttp
from anthropic import AsyncAnthropic

from kvpool.server.anthropic_api import merges_inline_system
from kvpool.server.chat_template import ModelChatTemplate

MODEL = "kvpool-tiny"
TURN = ("{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHATML = "{% for m in messages %}" + TURN
# ChatML that refuses a system message anywhere but first, as Qwen's newer templates do
SYSTEM_FIRST = ("{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
                "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
                + TURN)
INLINE = [{"role": "user", "content": "hi"},
          {"role": "system", "content": [{"type": "text", "text": "x-anthropic-billing-header: a"},
                                         {"type": "text", "text": "Be "}]},
          {"role": "assistant", "content": "hello"},
          {"role": "system", "content": "brief."},
          {"role": "user", "content": "again"}]


async def post(s: aiohttp.ClientSession, url: str, body) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


def test_the_probe_is_vllms_render_of_an_inline_system_message():
    assert merges_inline_system(ModelChatTemplate(SYSTEM_FIRST))
    undefined = SYSTEM_FIRST.replace("raise_exception", "no_such_function")  # an error too
    assert merges_inline_system(ModelChatTemplate(undefined))
    assert not merges_inline_system(ModelChatTemplate(CHATML))
    assert not merges_inline_system(object())  # the built-in template takes them anywhere


async def test_inline_system_messages_join_the_first_under_a_system_first_template(
        make_server, tmp_path):
    """vLLM probes the template with [system, user, system, user]; one that refuses it gets
    every inline system message's text appended to the top-level system prompt (no separator,
    the billing line dropped) instead of a 400. Chat itself still renders what it is sent."""
    path = tmp_path / "system_first.jinja"
    path.write_text(SYSTEM_FIRST)
    merged = [{"role": "system", "content": "You are Be brief."},
              {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
              {"role": "user", "content": "again"}]
    body = {"model": MODEL, "system": "You are ", "messages": INLINE}
    async with make_server(app_options={"chat_template": str(path)}) as srv:
        url = srv.url + "/v1/messages"
        async with aiohttp.ClientSession() as s:
            status, counted = await post(s, url + "/count_tokens", body)
            assert status == 200, counted
            _, want = await post(s, srv.url + "/tokenize", {"model": MODEL, "messages": merged})
            assert counted["input_tokens"] == want["count"]
            status, out = await post(s, url, {**body, "max_tokens": 3, "temperature": 0})
            assert status == 200 and out["usage"]["output_tokens"] == 3, out
            chat = {"model": MODEL, "messages": merged[:1] + [
                {"role": "system", "content": "x"}] + merged[1:], "max_tokens": 2}
            status, out = await post(s, srv.v1 + "/chat/completions", chat)
            assert status == 400 and "System message must be" in out["error"]["message"]


async def test_inline_system_messages_stay_in_place_where_the_template_takes_them(srv):
    body = {"model": MODEL, "system": "You are ", "messages": INLINE}
    in_place = [{"role": "system", "content": "You are "}, INLINE[0],
                {"role": "system", "content": "Be "}, INLINE[2],
                {"role": "system", "content": "brief."}, INLINE[4]]
    async with aiohttp.ClientSession() as s:
        status, counted = await post(s, srv.url + "/v1/messages/count_tokens", body)
        _, want = await post(s, srv.url + "/tokenize", {"model": MODEL, "messages": in_place})
    assert status == 200 and counted["input_tokens"] == want["count"]
