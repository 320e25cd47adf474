"""response_format through a real server on 127.0.0.1 with the official openai client (real
engine, built-in tiny model with random weights, temperature 1.0): every json_schema output
validates, chat and completions alike; bad response_format values are 400s naming the field."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from kvpool.errors import RequestError
from tests.server.helpers import openai_client as client, wait_free
from tests.server.parsers import P

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
TAGS = {"type": "object", "properties": {
    "tags": {"type": "array", "items": {"enum": ["x", "yy", "zzz"]}, "maxItems": 3},
    "score": {"type": "number"}}, "required": ["tags", "score"], "additionalProperties": False}


def fmt(schema, name="out"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                   "strict": True}}


async def test_chat_and_completions_outputs_validate(srv):
    async with client(srv) as c:
        model = (await c.models.list()).data[0].id
        for schema in (PERSON, TAGS):
            chat = await c.chat.completions.create(
                model=model, temperature=1.0, seed=11, n=3, max_completion_tokens=120,
                messages=[{"role": "user", "content": "reply in JSON"}],
                response_format=fmt(schema))
            assert len(chat.choices) == 3
            for ch in chat.choices:
                assert ch.finish_reason == "stop"
                jsonschema.validate(json.loads(ch.message.content), schema)
            # completions take the same field (vLLM's extension), through extra_body
            r = await c.completions.create(model=model, prompt="JSON:", temperature=1.0,
                                           seed=5, max_tokens=120,
                                           extra_body={"response_format": fmt(schema)})
            assert r.choices[0].finish_reason == "stop"
            jsonschema.validate(json.loads(r.choices[0].text), schema)


async def test_streamed_deltas_join_to_valid_json(srv):
    async with client(srv) as c:
        model = (await c.models.list()).data[0].id
        stream = await c.chat.completions.create(
            model=model, temperature=1.0, seed=3, max_completion_tokens=120, stream=True,
            messages=[{"role": "user", "content": "a person"}], response_format=fmt(PERSON))
        text, reason = "", None
        async for chunk in stream:
            for ch in chunk.choices:
                text += ch.delta.content or ""
                reason = ch.finish_reason or reason
        assert reason == "stop"
        jsonschema.validate(json.loads(text), PERSON)


async def test_bad_response_format_is_a_400_naming_it(srv):
    free = srv.free()
    async with client(srv) as c:
        model = (await c.models.list()).data[0].id
        for bad in ({"type": "json_schema", "json_schema": {"name": "x",
                                                            "schema": {"type": "nope"}}},
                    {"type": "json_schema", "json_schema": {"schema": PERSON}},
                    {"type": "yaml"}, {"type": ["structural_tag"]}, {"type": {}}):
            with pytest.raises(openai.BadRequestError) as e:
                await c.chat.completions.create(
                    model=model, max_completion_tokens=8, response_format=bad,
                    messages=[{"role": "user", "content": "hi"}])
            err = e.value.body
            assert err["param"] == "response_format" and err["type"] == "invalid_request_error"
        # the server keeps serving, nothing leaked
        r = await c.completions.create(model=model, prompt="hi", max_tokens=4, temperature=0)
        assert r.choices[0].text is not None
    await wait_free(srv, free)
    assert srv.free() == free


@pytest.mark.parametrize("value", [
    "json", [], {"type": "json_schema"},
    {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}},  # vLLM's name: a str
    {"type": "json_schema", "json_schema": {"name": "a", "schema": [1]}},
    {"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "strict": "maybe"}},
    {"type": "text", "json_schema": {"schema": {}}},  # read by vLLM (no name), then unheeded
    {"type": "json_object", "json_schema": {"name": "a", "schema": [1]}},
    {"type": "structural_tag", "structures": [], "triggers": [], "extra": 1},
    {"type": "json_schema", "json_schema": {"name": "a"}},  # no schema: vLLM's 400 too
    {"type": "json_schema", "json_schema": {"name": "a", "schema": None}},
    {"type": "json_schema", "json_schema": {"name": "a",
                                            "schema": {"type": "string", "pattern": "("}}},
])
def test_parser_rejects(value):
    for parse, body in ((P.parse_completion, {"prompt": "hi"}),
                        (P.parse_chat, {"messages": [{"role": "user", "content": "hi"}]})):
        with pytest.raises(RequestError) as e:
            parse({**body, "response_format": value})
        assert e.value.param == "response_format"


def test_parser_shapes():
    m = {"messages": [{"role": "user", "content": "hi"}]}
    assert P.parse_chat({**m, "response_format": {"type": "text"}}).params.response_format is None
    spec = P.parse_chat({**m, "response_format": {"type": "json_object"}}).params.response_format
    assert spec.kind == "json_object"
    spec = P.parse_completion({"prompt": "x", "response_format": fmt(PERSON, "p")}
                              ).params.response_format
    assert spec.kind == "json_schema" and spec.name == "p" and json.loads(spec.schema) == PERSON
