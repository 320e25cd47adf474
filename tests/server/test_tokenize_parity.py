"""/tokenize with chat ``messages`` counts what /v1/chat/completions' ``usage.prompt_tokens``
counts for the same body, with every field chat hands the template (the request's own
``chat_template``, ``chat_template_kwargs``, ``add_generation_prompt``, ``tools``,
``reasoning_effort``), on a server that ignores unknown fields and on one that refuses them;
chat-only fields /tokenize does not take (vLLM's TokenizeChatRequest lacks them) are ignored
unread there."""

from __future__ import annotations

import aiohttp
import pytest

CHAT = [{"role": "user", "content": "Tell me a story"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
# every variable the server sets or passes through changes the rendered text
TEMPLATE = ("{% if tools %}Tools:{% for t in tools %}{{ t.function.name }} {% endfor %}"
            "{% endif %}{% if reasoning_effort is defined %}effort {{ reasoning_effort }} "
            "{% endif %}{% if enable_thinking is defined and not enable_thinking %}no thinking "
            "{% endif %}{% if greeting is defined %}{{ greeting }} {% endif %}"
            "{% for m in messages %}{{ m.role }}: {{ m.content }}|{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
CASES = [{}, {"reasoning_effort": "high"}, {"reasoning_effort": "none"},
         {"chat_template_kwargs": {"greeting": "Dear"}, "reasoning_effort": "low"},
         {"add_generation_prompt": False}, {"tools": TOOLS},
         {"tools": TOOLS, "reasoning_effort": "medium", "add_generation_prompt": False,
          "chat_template_kwargs": {"greeting": "Hi", "enable_thinking": True}}]


async def _post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict, str]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json(), r.headers.get("X-Kvpool-Ignored-Fields", "")


@pytest.mark.parametrize("reject", [False, True])
async def test_tokenize_counts_what_chat_counts(make_server, reject):
    options = {"trust_request_chat_template": True, "reject_unknown_fields": reject,
               "tool_call_parser": "hermes"}  # tools without tool_choice: auto
    async with make_server(app_options=options) as srv, aiohttp.ClientSession() as s:
        counts = set()
        for extra in CASES:
            body = {"messages": CHAT, "chat_template": TEMPLATE, **extra}
            status, chat, _ = await _post(s, srv.v1 + "/chat/completions",
                                          {**body, "max_tokens": 1})
            assert status == 200, (extra, chat)
            status, tok, ignored = await _post(s, srv.url + "/tokenize", body)
            assert status == 200, (extra, tok)
            assert tok["count"] == len(tok["tokens"]) == chat["usage"]["prompt_tokens"], extra
            assert ignored == "", extra  # every field was read, none reported ignored
            counts.add(tok["count"])
        assert len(counts) == len(CASES)  # each field reached the template


async def test_tokenize_ignores_chat_only_fields_unread(srv):
    """vLLM's /tokenize (its TokenizeChatRequest and TokenizeCompletionRequest) has no echo /
    truncate_prompt_tokens / return_tokens_as_token_ids: ignored (listed in the header, as
    /detokenize lists its own), not validated, not applied, for messages and prompt alike."""
    async with aiohttp.ClientSession() as s:
        status, plain, _ = await _post(s, srv.url + "/tokenize", {"messages": CHAT})
        assert status == 200
        for extra in ({"echo": "yes"}, {"return_tokens_as_token_ids": 1},
                      {"truncate_prompt_tokens": 2}, {"truncation_side": "middle"}):
            status, body, ignored = await _post(s, srv.url + "/tokenize",
                                                {"messages": CHAT, **extra})
            assert status == 200 and body["tokens"] == plain["tokens"], (extra, body)
            assert ignored == next(iter(extra)), extra
        text = {"prompt": "a prompt of more than two tokens"}
        status, plain, _ = await _post(s, srv.url + "/tokenize", text)
        status, body, ignored = await _post(s, srv.url + "/tokenize",
                                            {**text, "truncate_prompt_tokens": 2})
        assert status == 200 and body["tokens"] == plain["tokens"] and len(plain["tokens"]) > 2
        assert ignored == "truncate_prompt_tokens"
        status, body, ignored = await _post(s, srv.url + "/detokenize",
                                            {"tokens": plain["tokens"], "echo": True})
        assert status == 200 and body["prompt"] and ignored == "echo"
