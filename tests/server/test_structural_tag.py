"""vLLM's structural tags (kvpool/server/structural_tag.py): the compiled grammar lets text
run free and holds every call the output opens to its schema (token by token, with the
built-in byte tokenizer), and a real server on 127.0.0.1 takes the tag as response_format and
as structured_outputs.structural_tag, with 400s naming the field for malformed ones."""

from __future__ import annotations

import json

import aiohttp
import pytest

from kvpool.runtime.model import build_byte_tokenizer
from kvpool.runtime.model.grammar_matchers import GrammarMatchers
from kvpool.server.structural_tag import parse_structural_tag
from tests.server.helpers import wait_free
from tests.server.test_grammar_budget import REJECTED

TOK = build_byte_tokenizer()
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
           "required": ["city"], "additionalProperties": False}
TAG = {"type": "structural_tag", "triggers": ["<function="],
       "structures": [{"begin": "<function=get_weather>", "schema": WEATHER,
                       "end": "</function>"},
                      {"begin": "<function=now>", "end": "</function>"}]}


def accepts(text: str) -> bool:
    """Whether the tag's grammar takes every token of ``text``."""
    spec = GrammarMatchers(TOK, 520).compiler.compile(parse_structural_tag(TAG, "p"))
    m = GrammarMatchers.new_matcher(spec)
    ids = TOK.encode(text, add_special_tokens=False)
    return m.validate_tokens(ids) == len(ids)


@pytest.mark.parametrize("text,ok", [
    ("just some text, no call at all", True),
    ('Checking. <function=get_weather>{"city": "Oslo"}</function> It is cold.', True),
    ('<function=now>{"any": [1, 2]}</function>', True),
    ('<function=get_weather>{"town": "Oslo"}</function>', False),  # not the schema
    ('<function=get_weather>{"city": "Oslo"}</fun>', False),  # not the end
    ("<function=delete_all>{}</function>", False),  # a trigger that opens no structure
])
def test_text_is_free_and_every_call_it_opens_keeps_its_schema(text, ok):
    assert accepts(text) is ok


BAD = [({**TAG, "format": {"type": "x"}}, "'format' form"),
       ({**TAG, "triggers": []}, "triggers must be"),
       ({**TAG, "structures": [{"begin": "<tool>", "end": ""}]}, "starts with none"),
       ({**TAG, "structures": [{"begin": "<function=a>", "schema": 5, "end": ""}]},
        "schema must be"),
       ({**TAG, "structures": [{"begin": "<function=a>", "end": "", "x": 1}]}, "begin, schema"),
       ({**TAG, "structures": [{"begin": "<function=a>", "schema": {"type": "nope"},
                                "end": ""}]}, "invalid")]


async def post(srv, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(srv.v1 + "/chat/completions", json={
            "messages": [{"role": "user", "content": "weather?"}], "max_tokens": 24,
            **body}) as r:
        return r.status, await r.json()


async def test_the_server_takes_the_tag_and_names_the_field_of_a_bad_one(srv):
    for body in ({"response_format": TAG},
                 {"structured_outputs": {"structural_tag": json.dumps(TAG)}}):
        status, out = await post(srv, body)
        assert status == 200, out
        assert out["choices"][0]["finish_reason"] in ("stop", "length")
    for tag, says in BAD:
        status, out = await post(srv, {"response_format": tag})
        assert status == 400 and out["error"]["param"] == "response_format", (tag, out)
        assert says in out["error"]["message"], (says, out)
    status, out = await post(srv, {"structured_outputs": {"structural_tag": "{not json"}})
    assert status == 400 and out["error"]["param"] == "structured_outputs.structural_tag"


def opens_at_once(schema: dict) -> dict:
    """A tag whose call opens with "<": with "<" favoured by logit_bias the output enters the
    structure's schema on its first token."""
    return {"type": "structural_tag", "triggers": ["<"],
            "structures": [{"begin": "<", "schema": schema, "end": ">"}]}


LT = TOK.encode("<", add_special_tokens=False)[0]


async def test_schemas_over_the_grammar_budget_are_400s_before_the_request_runs(srv):
    """NOTE(tag-probes): what response_format json_schema refuses (test_grammar_budget.py
    REJECTED) is refused inside a structure too, streamed or not, for any n; it used to be
    accepted and fail the generation (a 500, or an error event after a 200) once a call
    opened."""
    free = srv.free()
    for name, schema in REJECTED.items():
        for where in ("response_format", "structured_outputs"):
            tag = opens_at_once(schema)
            field = {"response_format": tag} if where == "response_format" else \
                {"structured_outputs": {"structural_tag": tag}}
            for extra in ({"n": 1}, {"n": 3}, {"stream": True}):
                status, out = await post(srv, {**field, **extra, "temperature": 1.0,
                                               "logit_bias": {str(LT): 100}})
                assert status == 400, (name, where, extra, out)
                assert out["error"]["type"] == "invalid_request_error", out
                param = where if where == "response_format" else \
                    "structured_outputs.structural_tag"  # the field sent, at compile too
                assert out["error"]["param"] == param, (name, out)
    bad_regex = opens_at_once({"type": "string", "pattern": "(("})
    status, out = await post(srv, {"structured_outputs": {"structural_tag": bad_regex}})
    assert status == 400 and out["error"]["param"] == "structured_outputs.structural_tag"
    assert out["error"]["message"].startswith(
        "structured_outputs.structural_tag: structures[0].schema: invalid JSON schema"), out
    ok = opens_at_once({"type": "string", "maxLength": 4})
    status, out = await post(srv, {"response_format": ok, "logit_bias": {str(LT): 100},
                                   "temperature": 0})
    assert status == 200 and out["choices"][0]["message"]["content"].startswith('<"'), out
    await wait_free(srv, free)
    assert srv.free() == free
