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
from tests.server.helpers import wait_free

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


def split_prompt(prompt: int, cached: int, block: int | None) -> dict[str, int]:
    """vLLM's usage of a prompt: the cache writes are its full blocks' tokens less the cached
    ones (PrefillStats.finalize; none without prefix caching), input_tokens the rest."""
    written = 0 if block is None else max(0, prompt // block * block - cached)
    return {"input_tokens": prompt - cached - written, "cache_creation_input_tokens": written,
            "cache_read_input_tokens": cached}


async def test_usage_splits_the_prompt_into_cache_reads_writes_and_the_rest(make_server):
    """vLLM's Messages usage with prompt token details: cache_read_input_tokens the prefix
    cache's hits, cache_creation_input_tokens what the prefill wrote to it, input_tokens the
    rest; the same in the body and the stream's message_delta (message_start: the prompt)."""
    ask = [{"role": "user", "content": "Which blocks of a paged cache are written? " * 3}]
    body = {"model": MODEL, "max_tokens": 2, "messages": ask, "temperature": 0}
    for caching, block in ((True, 16), (False, None)):
        async with make_server(enable_prefix_caching=caching) as srv, \
                aiohttp.ClientSession() as s:
            url = srv.url + "/v1/messages"
            _, count = await post(s, url + "/count_tokens", {"model": MODEL, "messages": ask})
            prompt = count["input_tokens"]
            assert prompt > 32
            for again in (False, True):
                status, out = await post(s, url, body)
                cached = out["usage"].get("cache_read_input_tokens")
                assert status == 200 and (cached > 0) == (caching and again), out
                assert out["usage"] == {"output_tokens": 2,
                                        **split_prompt(prompt, cached, block)}, out
            async with AsyncAnthropic(base_url=srv.url, api_key="unused", max_retries=0) as c:
                async with c.messages.stream(model=MODEL, max_tokens=2, messages=ask,
                                             extra_body={"temperature": 0}) as stream:
                    events = [e async for e in stream]
            start = events[0].message.usage
            assert (start.input_tokens, start.cache_creation_input_tokens) == (prompt, None)
            delta = [e for e in events if e.type == "message_delta"][0].usage
            assert delta.model_dump(exclude_none=True) == {
                "output_tokens": 2, **split_prompt(prompt, cached, block)}


PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                          "input": {}}]}


def result(*items) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                         "content": list(items)}]}


IMAGES = {  # name: (messages, the error's start); vLLM renders each as an image_url part,
    # which a text-only model refuses with a 400
    "image block": ([{"role": "user", "content": [{"type": "image", "source": PNG}]}],
                    "messages[0].content[0].type: image content is not supported"),
    "image by url": ([{"role": "user", "content": [
        {"type": "text", "text": "see"},
        {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:9/x.png"}}]}],
        "messages[0].content[1].type: image content is not supported"),
    "assistant image": ([{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": [{"type": "image", "source": PNG}]}],
                        "messages[1].content[0].type: image content is not supported"),
    "image in a tool result": ([{"role": "user", "content": "hi"}, CALL, result(
        {"type": "text", "text": "the chart:"}, {"type": "image", "source": PNG})],
        "messages[2].content[0].content[1].type: image content is not supported"),
    "sourceless image in a tool result": ([{"role": "user", "content": "hi"}, CALL,
                                           result({"type": "image"})],
                                          "messages[2].content[0].content[0].type: image"),
}


async def test_images_are_refused_as_a_text_only_model_refuses_them(srv):
    """Anthropic's 400 for every image vLLM would hand the model, tool results' included (it
    makes them a user message of image parts), beside a stream that runs to its end; an
    image block with no source is dropped, as vLLM drops it."""
    baseline = srv.free()
    url = srv.url + "/v1/messages"
    async with aiohttp.ClientSession() as s:
        stream = await s.post(url, json={"model": MODEL, "max_tokens": 30, "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]})
        assert stream.status == 200
        for name, (messages, start) in IMAGES.items():
            for path, extra in (("", {"max_tokens": 4}), ("/count_tokens", {})):
                status, out = await post(s, url + path, {"model": MODEL, "messages": messages,
                                                         **extra})
                assert status == 400 and out == {"type": "error", "error": {
                    "type": "invalid_request_error", "message": out["error"]["message"]}}, \
                    (name, path, out)
                assert out["error"]["message"].startswith(start), (name, out)
        text = (await stream.read()).decode()
        assert text.rstrip().endswith('data: {"type":"message_stop"}'), text[-200:]
        bare = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
        sourceless = [{"role": "user", "content": [{"type": "image"}, *bare[0]["content"],
                                                   {"type": "image", "source": {}}]}]
        counts = []
        for messages in (bare, sourceless):
            status, out = await post(s, url + "/count_tokens", {"model": MODEL,
                                                                "messages": messages})
            assert status == 200, out
            counts.append(out["input_tokens"])
        assert counts[0] == counts[1]
        status, out = await post(s, url, {"model": MODEL, "max_tokens": 2,
                                          "messages": sourceless})
        assert status == 200 and out["usage"]["output_tokens"] == 2
    await wait_free(srv, baseline)
    assert srv.free() == baseline


async def test_the_thinking_and_effort_values_vllm_takes_are_taken(srv):
    """vLLM's request model takes these (and refuses others: tests/server/
    test_anthropic_errors.py); with no reasoning parser they change nothing here."""
    ask = [{"role": "user", "content": "hi"}]
    async with aiohttp.ClientSession() as s:
        for display in ("summarized", "omitted", "updates", None):
            for effort in ("low", "medium", "high", "xhigh", "max"):
                body = {"model": MODEL, "max_tokens": 2, "messages": ask,
                        "thinking": {"type": "adaptive", "display": display},
                        "output_config": {"effort": effort}}
                status, out = await post(s, srv.url + "/v1/messages", body)
                assert status == 200 and out["usage"]["output_tokens"] == 2, out
