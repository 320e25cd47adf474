"""NOTE(batch-chat) in route_bodies.py: vLLM's POST /v1/chat/completions/batch. Each
conversation is answered as /v1/chat/completions answers it alone (greedy: the same message),
choice i for conversation i, usage summed, one JSON body even when ``stream`` is sent; vLLM's
refusals are 400s naming the field. Real server (every block back after each test)."""

from __future__ import annotations

import aiohttp

URL = "/v1/chat/completions/batch"
CONVS = [[{"role": "user", "content": "hi"}],
         [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a story"}],
         [{"role": "user", "content": "count to three"}]]
SHARED = {"max_tokens": 5, "temperature": 0}


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict]:
    async with s.post(url, json=body) as r:
        assert r.content_type == "application/json"
        return r.status, await r.json()


async def test_each_conversation_is_answered_as_chat_answers_it_alone(srv):
    async with aiohttp.ClientSession() as s:
        status, out = await post(s, srv.url + URL, {"messages": CONVS, "stream": True, **SHARED})
        assert status == 200 and out["object"] == "chat.completion", out
        assert [c["index"] for c in out["choices"]] == [0, 1, 2]
        prompt = completion = 0
        for conv, choice in zip(CONVS, out["choices"]):
            status, alone = await post(s, srv.url + "/v1/chat/completions",
                                       {"messages": conv, **SHARED})
            assert status == 200
            assert choice["message"] == alone["choices"][0]["message"]
            assert choice["finish_reason"] == alone["choices"][0]["finish_reason"]
            prompt += alone["usage"]["prompt_tokens"]
            completion += alone["usage"]["completion_tokens"]
        assert (out["usage"]["prompt_tokens"], out["usage"]["completion_tokens"]) == (
            prompt, completion)


async def test_what_vllm_refuses_in_a_batch_is_a_400_naming_the_field(srv):
    cases = [({"messages": CONVS, "n": 2}, "n"),
             ({"messages": CONVS, "use_beam_search": True}, "use_beam_search"),
             ({"messages": CONVS, "tool_choice": "auto"}, "tool_choice"),
             ({"messages": [{"role": "user", "content": "hi"}]}, "messages"),
             ({"messages": [[]]}, "messages"),
             ({"messages": [CONVS[0], [{"role": "user", "content": "x" * 5000}]]}, "messages")]
    async with aiohttp.ClientSession() as s:
        for body, field in cases:
            status, out = await post(s, srv.url + URL, {**SHARED, **body})
            assert status == 400, (body, out)
            assert out["error"]["type"] == "invalid_request_error"
            assert out["error"]["message"].startswith(field), out
        status, _ = await post(s, srv.url + URL, {"messages": CONVS[:1], **SHARED})
        assert status == 200  # the refusals left the server serving


async def test_with_echo_each_choice_opens_with_its_own_conversations_last_message(srv):
    """As vLLM's batch_serving echoes: conversation i's final assistant message in front of
    choice i's content (one echo for the whole request was a 400 before)."""
    ends = ["Sure, ", "No way: "]
    convs = [CONVS[0] + [{"role": "assistant", "content": e}] for e in ends]
    body = {"messages": convs, "echo": True, "add_generation_prompt": False,
            "continue_final_message": True, **SHARED}
    async with aiohttp.ClientSession() as s:
        status, out = await post(s, srv.url + URL, body)
        assert status == 200, out
        for end, conv, choice in zip(ends, convs, out["choices"]):
            status, alone = await post(s, srv.url + "/v1/chat/completions",
                                       {**body, "messages": conv})
            assert choice["message"]["content"].startswith(end)
            assert choice["message"] == alone["choices"][0]["message"]
