"""vLLM's ``return_token_ids`` on a real server (kvpool/server/returned_ids.py): the ids come
back where vLLM 0.33 puts them, and they are the tokenizer's ids of the prompt and of the text
(read back through /tokenize, and vLLM's DecodeStream after the prompt: text_reference.py)."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.runtime.text_reference import vllm_text
from tests.server.helpers import openai_client as client

PROMPT = "Tell me a story"
CHAT = [{"role": "user", "content": PROMPT}]
IDS = {"return_token_ids": True}


async def post(srv, path: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(srv.url + path, json=body) as r:
        return r.status, await r.json()


def shown(srv, prompt_ids: list[int], ids: list[int]) -> str:
    """The text vLLM 0.33 shows for these ids after the prompt (NOTE(prompt-context) in
    kvpool/runtime/model/tokenizer.py): a stray last byte is held back, not U+FFFD."""
    return "".join(vllm_text(srv.engine.tokenizer, prompt_ids, ids))


async def stream(srv, path: str, body: dict) -> list[dict]:
    """The stream's chunks as sent (raw SSE), [DONE] last."""
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + path, json={**body, "stream": True}) as r:
            assert r.status == 200, await r.text()
            raw = await r.text()
    events = [b[len("data: "):] for b in raw.split("\n\n") if b]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def test_completions_carry_the_prompt_and_output_ids(srv):
    m, tok = srv.engine.model_name, srv.engine.tokenizer
    async with client(srv) as c:
        r = await c.completions.create(model=m, prompt=[PROMPT, "hi"], max_tokens=5, n=2,
                                       temperature=1.0, seed=7, extra_body=IDS)
        plain = await c.completions.create(model=m, prompt=PROMPT, max_tokens=2)
    assert len(r.choices) == 4
    for i, ch in enumerate(r.choices):
        extra = ch.model_extra
        assert extra["prompt_token_ids"] == tok.encode([PROMPT, "hi"][i // 2])
        assert shown(srv, extra["prompt_token_ids"], extra["token_ids"]) == ch.text
    assert sum(len(ch.model_extra["token_ids"]) for ch in r.choices) == r.usage.completion_tokens
    # not asked: vLLM's choice has both keys, null
    extra = plain.choices[0].model_extra
    assert "token_ids" in extra and extra["token_ids"] is None
    assert "prompt_token_ids" in extra and extra["prompt_token_ids"] is None


async def test_echo_leaves_the_prompt_to_its_ids(srv):
    """vLLM: with return_token_ids the echoed prompt is in prompt_token_ids, not in text, and
    token_ids holds the generated tokens only."""
    m, tok = srv.engine.model_name, srv.engine.tokenizer
    async with client(srv) as c:
        r = await c.completions.create(model=m, prompt=PROMPT, max_tokens=4, echo=True,
                                       temperature=0, extra_body=IDS)
        echoed = await c.completions.create(model=m, prompt=PROMPT, max_tokens=4, echo=True,
                                            temperature=0)
        only = await c.completions.create(model=m, prompt=PROMPT, max_tokens=0, echo=True,
                                          extra_body=IDS)
    ch = r.choices[0]
    assert ch.model_extra["prompt_token_ids"] == tok.encode(PROMPT)
    assert len(ch.model_extra["token_ids"]) == r.usage.completion_tokens == 4
    assert shown(srv, tok.encode(PROMPT), ch.model_extra["token_ids"]) == ch.text
    assert echoed.choices[0].text == PROMPT + ch.text
    assert only.choices[0].text == "" and only.choices[0].model_extra["token_ids"] == []
    assert only.choices[0].model_extra["prompt_token_ids"] == tok.encode(PROMPT)


async def test_chat_carries_the_prompt_ids_on_the_body(srv):
    m = srv.engine.model_name
    async with client(srv) as c:
        r = await c.chat.completions.create(model=m, messages=CHAT, max_tokens=5, n=2,
                                            temperature=1.0, seed=3, extra_body=IDS)
        plain = await c.chat.completions.create(model=m, messages=CHAT, max_tokens=2)
    status, tk = await post(srv, "/tokenize", {"messages": CHAT})
    assert status == 200 and r.model_extra["prompt_token_ids"] == tk["tokens"]
    for ch in r.choices:
        assert "prompt_token_ids" not in ch.model_extra
        assert shown(srv, tk["tokens"], ch.model_extra["token_ids"]) == ch.message.content
    assert sum(len(ch.model_extra["token_ids"]) for ch in r.choices) == r.usage.completion_tokens
    assert plain.model_extra["prompt_token_ids"] is None
    assert plain.choices[0].model_extra["token_ids"] is None


async def test_a_completions_stream_sends_the_prompt_once_and_each_delta(srv):
    tok = srv.engine.tokenizer
    body = {"model": srv.engine.model_name, "prompt": PROMPT, "max_tokens": 6, "n": 2,
            "temperature": 1.0, "seed": 5, **IDS}
    chunks = await stream(srv, "/completions", body)
    for i in range(2):
        mine = [ch["choices"][0] for ch in chunks if ch["choices"][0]["index"] == i]
        assert mine[0]["prompt_token_ids"] == tok.encode(PROMPT)
        assert all(c["prompt_token_ids"] is None for c in mine[1:])
        ids = [t for c in mine for t in c["token_ids"]]
        assert len(ids) == 6 and shown(srv, tok.encode(PROMPT), ids) == "".join(
            c["text"] for c in mine)
    plain = await stream(srv, "/completions", {**body, "return_token_ids": False})
    assert all(ch["choices"][0]["token_ids"] is None
               and ch["choices"][0]["prompt_token_ids"] is None for ch in plain)


async def test_a_chat_stream_sends_the_prompt_in_its_role_chunks(srv):
    body = {"model": srv.engine.model_name, "messages": CHAT, "max_tokens": 6, "n": 2,
            "temperature": 1.0, "seed": 9, **IDS}
    chunks = await stream(srv, "/chat/completions", body)
    status, tk = await post(srv, "/tokenize", {"messages": CHAT})
    roles = [ch for ch in chunks if "role" in ch["choices"][0]["delta"]]
    assert sorted(ch["choices"][0]["index"] for ch in roles) == [0, 1]
    assert all(ch["prompt_token_ids"] == tk["tokens"] for ch in roles)
    for i in range(2):
        mine = [ch for ch in chunks if ch not in roles and ch["choices"][0]["index"] == i]
        assert all("prompt_token_ids" not in ch for ch in mine)
        ids = [t for ch in mine for t in ch["choices"][0]["token_ids"]]
        text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in mine)
        assert len(ids) == 6 and shown(srv, tk["tokens"], ids) == text
    plain = await stream(srv, "/chat/completions", {**body, "return_token_ids": None})
    assert all(ch["prompt_token_ids"] is None for ch in plain
               if "role" in ch["choices"][0]["delta"])


@pytest.mark.parametrize("value, on", [("yes", True), ("ON", True), (1, True), (1.0, True),
                                       ("no", False), (0, False), ("f", False)])
async def test_the_values_vllm_reads_as_booleans_are_taken(srv, value, on):
    body = {"model": srv.engine.model_name, "prompt": "hi", "max_tokens": 2,
            "return_token_ids": value}
    status, r = await post(srv, "/v1/completions", body)
    assert status == 200, r
    assert (r["choices"][0]["token_ids"] is not None) == on


@pytest.mark.parametrize("value", [5, [], {}, "maybe", "", 0.5, " true"])
async def test_other_values_are_a_400_naming_the_field(srv, value):
    for path, body in (("/v1/completions", {"prompt": "hi"}),
                       ("/v1/chat/completions", {"messages": CHAT})):
        status, r = await post(srv, path, {**body, "model": srv.engine.model_name,
                                           "max_tokens": 2, "return_token_ids": value})
        assert status == 400 and set(r) == {"error"}, r
        err = r["error"]
        assert err["param"] == "return_token_ids" and err["type"] == "invalid_request_error"
        assert set(err) == {"message", "type", "param", "code"}
    status, r = await post(srv, "/v1/completions", {"model": srv.engine.model_name,
                                                    "prompt": "hi", "max_tokens": 2, **IDS})
    assert status == 200 and r["choices"][0]["token_ids"]  # the server still answers
