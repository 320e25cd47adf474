"""Responses API requests vLLM's server answers 200 to, through the openai client on a real
in-process kvpool server: each is a 200 here too and does what vLLM does with it."""

from __future__ import annotations

import json
import logging

import aiohttp
import openai
import pytest
from pydantic import BaseModel

from tests.server.helpers import openai_client as client


async def prompt_tokens(srv, content: str) -> int:
    async with aiohttp.ClientSession() as s:
        body = {"messages": [{"role": "user", "content": content}]}
        async with s.post(srv.url + "/tokenize", json=body) as r:
            assert r.status == 200
            return (await r.json())["count"]


async def test_input_text_parts_join_with_newlines_as_chat_does(srv):
    parts = [{"type": "input_text", "text": "one"}, {"type": "input_text", "text": "two"}]
    joined, glued = await prompt_tokens(srv, "one\ntwo"), await prompt_tokens(srv, "onetwo")
    assert joined != glued  # the test tells the two apart
    async with client(srv) as c:
        r = await c.responses.create(model=srv.engine.model_name, max_output_tokens=1,
                                     input=[{"role": "user", "content": parts}])
    assert r.usage.input_tokens == joined


FLAG = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
        "additionalProperties": False}


class Flag(BaseModel):
    ok: bool


async def test_text_format_json_schema_constrains_the_output(srv):
    fmt = {"type": "json_schema", "name": "flag", "schema": FLAG, "strict": True}
    async with client(srv) as c:
        r = await c.responses.create(model=srv.engine.model_name, input="Is it on?",
                                     max_output_tokens=30, text={"format": fmt})
        assert isinstance(json.loads(r.output_text)["ok"], bool)
        assert r.text.format.type == "json_schema" and r.text.format.name == "flag"
        assert (await c.responses.retrieve(r.id)).text.format.schema_ == FLAG
        parsed = await c.responses.parse(model=srv.engine.model_name, input="Is it on?",
                                         max_output_tokens=30, text_format=Flag)
        assert isinstance(parsed.output_parsed, Flag)
        events = [e async for e in await c.responses.create(
            model=srv.engine.model_name, input="Is it on?", max_output_tokens=30,
            text={"format": fmt}, stream=True)]
    done = events[-1].response
    assert done.status == "completed" and done.text.format.type == "json_schema"
    assert isinstance(json.loads(done.output_text)["ok"], bool)


async def test_text_format_json_object_starts_an_object(srv):
    async with client(srv) as c:
        r = await c.responses.create(model=srv.engine.model_name, input="Give JSON",
                                     max_output_tokens=3, text={"format": {"type": "json_object"}})
    assert r.output_text.startswith("{") and r.text.format.type == "json_object"


@pytest.mark.parametrize("fmt", [{"type": "xml"}, {"type": "json_schema", "schema": FLAG},
                                 {"type": "json_schema", "name": "f", "schema": 3}, "json"])
async def test_a_bad_text_format_is_a_400_naming_it(srv, fmt):
    async with client(srv) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.responses.create(model=srv.engine.model_name, input="x",
                                     max_output_tokens=2, text={"format": fmt})
    assert info.value.body["param"] == "text.format", info.value.body
    assert "response_format" not in info.value.body["message"]


@pytest.mark.parametrize("fmt", [{"type": "json_schema", "name": "a b", "schema": FLAG},
                                 {"type": "json_schema", "name": "f", "schema": FLAG, "x": 1}])
async def test_a_text_format_vllm_takes_is_taken(srv, fmt):
    """vLLM reads text.format with the openai package's models: any name, extra keys kept
    (sampling_fields.py's rule for response_format, the same here)."""
    async with client(srv) as c:
        r = await c.responses.create(model=srv.engine.model_name, input="x",
                                     max_output_tokens=2, text={"format": fmt})
    assert r.status in ("completed", "incomplete") and r.text.format.name == fmt["name"]


async def test_cancel_answers_as_vllm_does_for_a_finished_or_unknown_response(srv):
    async with client(srv) as c:
        r = await c.responses.create(model=srv.engine.model_name, input="x",
                                     max_output_tokens=1)
        with pytest.raises(openai.BadRequestError) as info:
            await c.responses.cancel(r.id)
        assert info.value.body["message"].startswith("Cannot cancel a synchronous response")
        with pytest.raises(openai.NotFoundError) as info:
            await c.responses.cancel("resp_unknown")
        assert info.value.body["code"] == "response_not_found"
        assert info.value.body["param"] == "response_id"  # vLLM's _make_not_found_error
        with pytest.raises(openai.NotFoundError) as info:
            await c.responses.retrieve("resp_unknown")
        assert info.value.body["param"] == "response_id"
        assert (await c.responses.retrieve(r.id)).status == "incomplete"  # still there


async def test_a_client_named_request_id_is_the_response_id(srv):
    """vLLM's ResponsesRequest.request_id: the response is that id, fetched and cancelled by
    it (it was ignored: a random id, so the client's own gave 404s)."""
    m = srv.engine.model_name
    async with client(srv) as c:
        r = await c.responses.create(model=m, input="x", max_output_tokens=1,
                                     extra_body={"request_id": "my-job-42"})
        assert r.id == "my-job-42"
        assert (await c.responses.retrieve("my-job-42")).id == "my-job-42"
        bg = await c.responses.create(model=m, input="x", max_output_tokens=200,
                                      background=True, extra_body={"request_id": "my-bg-43"})
        assert bg.id == "my-bg-43"
        try:  # found by its name either way, never a 404
            assert (await c.responses.cancel("my-bg-43")).id == "my-bg-43"
        except openai.BadRequestError:  # it finished first: not cancellable any more
            assert (await c.responses.retrieve("my-bg-43")).id == "my-bg-43"
        for rid in ("", "x" * 300):  # vLLM's request_id: any str, no bound but the body's
            r = await c.responses.create(model=m, input="x", max_output_tokens=1,
                                         extra_body={"request_id": rid})
            assert r.id == rid
        with pytest.raises(openai.BadRequestError) as info:
            await c.responses.create(model=m, input="x", max_output_tokens=1,
                                     extra_body={"request_id": 5})
        assert info.value.body["param"] == "request_id"


async def test_include_output_text_logprobs_as_chat_gives_them(srv):
    m = srv.engine.model_name
    kw = {"model": m, "input": "Tell me", "max_output_tokens": 3, "temperature": 0}
    async with client(srv) as c:
        chat = await c.chat.completions.create(
            model=m, messages=[{"role": "user", "content": "Tell me"}], max_tokens=3,
            temperature=0, logprobs=True, top_logprobs=2)
        want = [(t.token, t.logprob, [x.token for x in t.top_logprobs])
                for t in chat.choices[0].logprobs.content]
        r = await c.responses.create(include=["message.output_text.logprobs"], top_logprobs=2,
                                     **kw)
        events = [e async for e in await c.responses.create(
            include=["message.output_text.logprobs"], top_logprobs=2, stream=True, **kw)]
        plain = await c.responses.create(top_logprobs=2, **kw)  # not included: none
    got = [(t.token, t.logprob, [x.token for x in t.top_logprobs])
           for t in r.output[0].content[0].logprobs]
    assert [(t, top) for t, _, top in got] == [(t, top) for t, _, top in want]
    assert [lp for _, lp, _ in got] == pytest.approx([lp for _, lp, _ in want], abs=1e-4)
    assert len(want) == 3
    streamed = [lp.token for e in events if e.type == "response.output_text.delta"
                for lp in e.logprobs]
    assert streamed == [w[0] for w in want]
    assert events[-1].response.output[0].content[0].logprobs[0].token == want[0][0]
    assert plain.output[0].content[0].logprobs is None  # vLLM's: none asked, null


async def test_conversation_is_ignored_and_listed_as_vllm_ignores_it(srv):
    """vLLM 0.33's ResponsesRequest has no ``conversation`` field (an extra: ignored, a 200):
    the answer is the one without it, with the field in X-Kvpool-Ignored-Fields."""
    body = {"model": srv.engine.model_name, "input": "x", "max_output_tokens": 4,
            "temperature": 0}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json=body) as r:
            want = (await r.json())["output"]
        for conversation in ("conv_123", {"id": "conv_123"}, 7):
            async with s.post(srv.v1 + "/responses",
                              json={**body, "conversation": conversation}) as r:
                out = await r.json()
                assert r.status == 200, out
                assert r.headers["X-Kvpool-Ignored-Fields"] == "conversation"
            assert out["output"][0]["content"] == want[0]["content"] and \
                "conversation" not in out, out


async def test_unheeded_text_format_keys_are_named_as_sent(make_server, caplog):
    """NOTE(format-names): instructor's json_object with a schema, and a json_schema format's
    extra key, are listed (X-Kvpool-Ignored-Fields) and logged as ``text.format.<key>``, the
    field the client sent, not as the chat ``response_format.<key>`` it became; with
    --reject-unknown-fields the 400 names it so."""
    base = {"input": "x", "max_output_tokens": 2}
    cases = [({"type": "json_object", "schema": FLAG}, "text.format.schema"),
             ({"type": "json_schema", "name": "f", "schema": FLAG, "x": 1}, "text.format.x")]
    async with make_server() as srv, aiohttp.ClientSession() as s:
        with caplog.at_level(logging.WARNING, logger="kvpool.server"):
            for fmt, name in cases:
                async with s.post(srv.v1 + "/responses",
                                  json={**base, "text": {"format": fmt}}) as r:
                    assert r.status == 200, await r.text()
                    assert r.headers["X-Kvpool-Ignored-Fields"] == name
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "'text.format.schema'" in logged and "'text.format.x'" in logged
    assert "response_format" not in logged
    async with make_server(app_options={"reject_unknown_fields": True}) as srv:
        async with aiohttp.ClientSession() as s:
            async with s.post(srv.v1 + "/responses",
                              json={**base, "text": {"format": cases[0][0]}}) as r:
                assert r.status == 400 and (await r.json())["error"]["param"] == cases[0][1]
