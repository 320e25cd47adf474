"""vLLM 0.33's rules for /v1/messages that its pydantic models and renderer carry, on a real
server on 127.0.0.1: the body's lax types (NOTE(lax-anthropic)), a forced call cut short
(NOTE(cut-call)), count_tokens and /tokenize rendering with the chat template kwargs the
message renders with, and the reasoning effort of disabled thinking (NOTE(disabled-effort))."""

from __future__ import annotations

import aiohttp

from kvpool.server.anthropic_effort import DisabledThinkingEffort

MODEL = "kvpool-tiny"
ASK = [{"role": "user", "content": "hi"}]
OK = {"model": MODEL, "max_tokens": 4, "messages": ASK, "temperature": 0}
# GLM-5.3's way: an effort it does not know ("none" too) is its most, which thinks at length
GLM = ("{%- set eff = reasoning_effort if reasoning_effort in ['low', 'medium', 'high'] "
       "else 'max' -%}{% if eff == 'max' %}THINK VERY HARD ABOUT IT {% endif %}"
       "{% if extra %}EXTRA EXTRA {% endif %}{% if dflt %}DEFAULT {% endif %}"
       "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
       "{% if add_generation_prompt %}assistant: {% endif %}")
CUT = {**OK, "max_tokens": 40, "tools": [{"name": "f", "input_schema": {
    "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}],
       "tool_choice": {"type": "tool", "name": "f"}, "stop_sequences": ['":']}


async def post(s: aiohttp.ClientSession, url: str, body) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


async def test_lax_types_and_a_cut_call_as_vllm_reads_them(make_server):
    """pydantic's lax int and bool read these as vLLM does; a forced call a stop sequence
    cuts short is vLLM's 400 (its json.loads of the arguments), never a tool_use block with
    made-up input, and its stream says stop_sequence. (The built-in template's tool prompt
    needs more than the default 256-token context.)"""
    async with make_server(max_model_len=512) as srv, aiohttp.ClientSession() as s:
        url = srv.url + "/v1/messages"
        for field, value, tokens in (("max_tokens", 4.0, 4), ("max_tokens", "4", 4),
                                     ("max_tokens", True, 1), ("stream", 0, 4),
                                     ("stream", "false", 4)):
            status, out = await post(s, url, {**OK, field: value})
            assert status == 200 and out["usage"]["output_tokens"] == tokens, (field, out)
        count = {"model": MODEL, "messages": ASK,
                 "thinking": {"type": "enabled", "budget_tokens": "2000"},
                 "tools": [{"name": "f", "input_schema": {}}],
                 "tool_choice": {"type": "none", "disable_parallel_tool_use": "yes"}}
        status, out = await post(s, url + "/count_tokens", count)
        assert status == 200 and out["input_tokens"] > 0, out
        status, out = await post(s, url, CUT)
        assert status == 400 and out["error"]["type"] == "invalid_request_error", out
        assert "'f'" in out["error"]["message"] and "cut short" in out["error"]["message"]
        async with s.post(url, json={**CUT, "stream": "yes"}) as r:
            text = (await r.read()).decode()
        assert '"stop_reason":"stop_sequence","stop_sequence":"\\":"' in text, text[-300:]


async def counts(s: aiohttp.ClientSession, url: str, **extra) -> tuple[int, int]:
    """(count_tokens, the message's own prompt length) of one body."""
    body = {"model": MODEL, "messages": ASK, **extra}
    status, counted = await post(s, url + "/v1/messages/count_tokens", body)
    assert status == 200, counted
    status, out = await post(s, url + "/v1/messages", {**body, "max_tokens": 1})
    assert status == 200, out
    u = out["usage"]
    return counted["input_tokens"], (u["input_tokens"] + u["cache_read_input_tokens"]
                                     + u["cache_creation_input_tokens"])


async def test_counts_render_the_kwargs_and_the_effort_the_message_renders(make_server,
                                                                          tmp_path):
    """count_tokens renders the request's chat_template_kwargs over the server's defaults,
    as the message does; /tokenize takes the defaults as chat does; disabled thinking is low
    under a template that reads "none" as its most, unless the flag says otherwise."""
    path = tmp_path / "glm.jinja"
    path.write_text(GLM)
    app = {"chat_template": str(path), "default_chat_template_kwargs": {"dflt": True}}
    async with make_server(app_options=app) as srv, aiohttp.ClientSession() as s:
        plain, extra = await counts(s, srv.url), await counts(
            s, srv.url, chat_template_kwargs={"extra": True})
        assert plain[0] == plain[1] and extra[0] == extra[1] and extra[0] > plain[0]
        assert (await counts(s, srv.url, chat_template_kwargs={"dflt": False}))[0] < plain[0]
        status, out = await post(s, srv.url + "/v1/messages/count_tokens",
                                 {"model": MODEL, "messages": ASK, "chat_template_kwargs": 5})
        assert status == 400 and "chat_template_kwargs" in out["error"]["message"]
        _, tokenized = await post(s, srv.url + "/tokenize", {"model": MODEL, "messages": ASK})
        _, chat = await post(s, srv.url + "/v1/chat/completions",
                             {"model": MODEL, "messages": ASK, "max_tokens": 1})
        assert tokenized["count"] == chat["usage"]["prompt_tokens"]
        low = await counts(s, srv.url, output_config={"effort": "low"})
        top = await counts(s, srv.url, output_config={"effort": "max"})
        assert await counts(s, srv.url, thinking={"type": "disabled"}) == low != top
    async with make_server(app_options={**app, "anthropic_disabled_thinking_effort": "none"}
                           ) as srv, aiohttp.ClientSession() as s:
        assert await counts(s, srv.url, thinking={"type": "disabled"}) == top


def test_the_probe_picks_low_only_where_none_is_refused_or_an_effort():
    def render(effort: str) -> list[int]:
        if effort == "xhigh":
            raise ValueError("a template error: not an effort this template knows")
        return list(effort.encode())
    disabled = {"thinking": {"type": "disabled"}}
    assert DisabledThinkingEffort(render).resolve_for(disabled) == "none"  # each one differs
    assert DisabledThinkingEffort(lambda e: [1]).resolve_for(disabled) == "low"  # all alike
    refuses = DisabledThinkingEffort(lambda e: render("xhigh") if e == "none" else [1])
    assert refuses.resolve_for(disabled) == "low"
    assert refuses.resolve_for({"thinking": {"type": "adaptive"}}) == "none"  # not asked
    assert DisabledThinkingEffort(render, "max").resolve_for(disabled) == "max"
