"""JSON-schema keywords llguidance refuses and vLLM 0.33 serves, because its default backend
(xgrammar) takes the schema and ignores them or reads them as another keyword
(kvpool/server/xgrammar_reach.py NOTE(xgrammar-ignores)): each was a 400 here (or, beside an
``enum``, narrower) and is served, every field and forced calls alike, taking what xgrammar
takes (measured with xgrammar 0.2.8 through vLLM's own validation). Where vLLM gives the
schema to guidance, which refuses them too, or xgrammar refuses it, they stay a 400; for
tool_choice required that is decided over the union of every tool (tools/request.py
NOTE(union-reach)). Grammars are read with the built-in byte tokenizer; one
request of each kind goes through a real server on 127.0.0.1 (the built-in tiny model).
An untyped node is typed as xgrammar infers it (NOTE(xgrammar-infers)), a typed object / array
with no member keyword past annotations is {} / [] only, and a schema xgrammar refuses is
guidance's, whole."""

from __future__ import annotations

import json
import re

import aiohttp
import jsonschema
import pytest

from kvpool.errors import RequestError
from kvpool.server.guided_fields import parse_guided
from kvpool.server.sampling_fields import parse_response_format
from kvpool.server.tools.request import parse_tool_request
from tests.server.test_tool_schema_parity import accepts, as_format, forced

AB = {"a": {"type": "integer"}, "b": {"type": "string"}}
OBJ = {"type": "object", "properties": AB}
EVEN = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}
INT = {"type": "integer"}


def at(schema: dict) -> dict:
    """``schema`` as the property ``t`` of an object (a tool's parameters are one)."""
    return {"type": "object", "properties": {"t": schema}}


# (sent, values xgrammar takes, values it refuses): the ignored keyword never refuses a value
KINDS = {
    "unevaluatedProperties": ({**OBJ, "unevaluatedProperties": False},
                              [{"a": 1}, {}], [{"a": 1, "x": 2}, {"a": "s"}]),
    "unevaluatedProperties-schema": ({**OBJ, "unevaluatedProperties": {"type": "integer"}},
                                     [{"a": 1, "x": 2}], [{"a": 1, "x": "s"}]),
    "unevaluatedProperties-beside-additional": (
        {**OBJ, "additionalProperties": True, "unevaluatedProperties": False},
        [{"a": 1, "x": "s"}], [{"a": "s"}]),
    "dependentRequired": ({**OBJ, "dependentRequired": {"a": ["b"]},
                           "dependentSchemas": {"b": {"required": ["a"]}}},
                          [{"a": 1}, {"b": "s"}], [{"a": 1, "x": 2}]),
    "if-then-else": ({**OBJ, "if": {"properties": {"a": {"const": 1}}, "required": ["a"]},
                      "then": {"required": ["b"]}, "else": {"properties": {"b": {
                          "maxLength": 1}}}}, [{"a": 1}, {"a": 2, "b": "long"}],
                     [{"a": 1, "x": 2}, {"a": "s"}]),
    "uniqueItems-untyped": ({"type": "object", "properties": {"t": {
        "items": {"type": "string"}, "uniqueItems": True}}},
        [{"t": ["a", "a"]}], [{"t": [1]}, {"t": [], "x": 1}]),
    "not": ({**OBJ, "not": {"required": ["a"]}}, [{"a": 1}, {}], [{"a": 1, "x": 2}]),
    "contains-untyped": (at({"items": INT, "contains": {"const": 1}, "maxContains": 1}),
                         [{"t": [2]}, {"t": [1, 1]}], [{"t": ["s"]}, {"t": [], "x": 1}]),
    "minContains-untyped": (at({"items": INT, "minContains": 2}), [{"t": [2, 3]}],
                            [{"t": [2]}]),
    "unevaluatedItems": (at({"prefixItems": [INT], "unevaluatedItems": {"type": "string"}}),
                         [{"t": [1, "s"]}, {"t": [1]}], [{"t": [1, 2]}]),
    "allOf-one-branch-drops-siblings": ({**OBJ, "allOf": [{**OBJ, "required": ["a"]}],
                                         "properties": {"n": INT}, "required": ["n"]},
                                        [{"a": 1}, {"a": 1, "b": "s"}], [{"a": 1, "n": 2}, {}]),
    "enum-beside-type": (at({"type": "string", "enum": ["a", 1]}), [{"t": 1}, {"t": "a"}],
                         [{"t": "b"}]),
    "typed-object-array-left-bare": ({"type": "object", "properties": {
        "o": {"type": "object", "dependentRequired": {"a": ["b"]}},
        "l": {"type": "array", "not": {"maxItems": 0}}}},
        [{"o": {}, "l": []}], [{"o": {"a": 1}}, {"l": [1]}]),
    # NOTE(xgrammar-infers): untyped, an object / array keyword makes the type, else any value
    "untyped-properties-is-an-object": ({"properties": AB, "required": ["a"]},
                                        [{"a": 1}], [5, "s", [1], None, {"a": 1, "x": 2}]),
    "untyped-items-is-an-array": (at({"items": INT, "minLength": 2}), [{"t": [1]}, {"t": []}],
                                  [{"t": 5}, {"t": "s"}, {"t": {}}]),
    "untyped-else-is-any-value": (at({"required": ["a"], "minLength": 3, "pattern": "^a$",
                                      "minimum": 5, "maxItems": 1, "propertyNames": {
                                          "maxLength": 1}, "patternProperties": {"^x": INT}}),
                                  [{"t": {}}, {"t": "b"}, {"t": 1}, {"t": [1, 2]},
                                   {"t": {"xy": "s"}}], [{"t": 1, "x": 1}]),
    # NOTE(whole-pattern): xgrammar matches a pattern against the whole string
    "pattern-is-the-whole-string": ({"type": "object", "properties": {
        "s": {"type": "string", "pattern": "abc"}, "w": {"type": "string", "pattern": "^[a-z]+"},
        "o": {"type": "object", "patternProperties": {"^x-": INT}}}},
        [{"s": "abc"}, {"w": "ab"}, {"o": {"x-": 1}}, {"o": {}}],
        [{"s": "xabcx"}, {"w": "ab1"}, {"o": {"x-a": 1}}]),
    # NOTE(property-names): each key as propertyNames says (pydantic's dict[Literal, int],
    # dict[Enum, int], dict[constr(max_length=2), ...]), each value additionalProperties' or any
    "propertyNames": ({"type": "object", "$defs": {"C": {"type": "string", "enum": ["r", "b"]}},
                       "properties": {
                           "p": {"type": "object", "propertyNames": {"pattern": "[a-z]+"}},
                           "e": {"type": "object", "propertyNames": {"enum": ["x", "y.z"]},
                                 "additionalProperties": INT},
                           "r": {"type": "object", "propertyNames": {"$ref": "#/$defs/C"}},
                           "m": {"type": "object", "propertyNames": {"maxLength": 2},
                                 "required": ["a"]}}},
                      [{"p": {"ab": [1]}, "e": {"y.z": 1}, "r": {"b": 2}, "m": {"ab": "s"}},
                       {"e": {}, "m": {}}],
                      [{"p": {"A": 1}}, {"p": {"a1": 1}}, {"e": {"yaz": 1}}, {"e": {"x": "s"}},
                       {"r": {"g": 1}}, {"m": {"abc": 1}}]),
    # strict: a typed node with any keyword past xgrammar's annotations has no member left
    "typed-with-an-ordinary-keyword": ({"type": "object", "properties": {
        "o": {"type": "object", "maxProperties": 2}, "l": {"type": "array", "maxItems": 2},
        "n": {"type": ["object", "null"], "x-kind": "k"}, "b": {"type": "object", "title": "t"},
        "r": {"type": "object", "required": ["a"]}}},  # required: NOTE(strict-schemas)
        [{"o": {}, "l": [], "n": None}, {"n": {}, "b": {"a": 1}, "r": {"a": 1, "z": 2}}],
        [{"o": {"a": 1}}, {"l": [1]}, {"n": {"a": 1}}, {"r": {}}]),
}


def every_field(schema) -> list:
    """response_format, structured_outputs.json, guided_json, a named and a required call
    (each value read as that call's arguments)."""
    call = [{"name": "t", "parameters": None}]
    return [(parse_response_format(as_format(schema)), None),
            (parse_guided({"structured_outputs": {"json": schema}}), None),
            (parse_guided({"guided_json": schema}), None),
            (forced(schema), None), (forced(schema, "required", parallel=False), call)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_what_xgrammar_ignores_is_served_as_xgrammar_reads_it(kind):
    """Each was llguidance's 400 ("Unimplemented keys") in every field."""
    schema, good, bad = KINDS[kind]
    for spec, call in every_field(schema):
        def wrap(value):
            return value if call is None else [{**call[0], "parameters": value}]
        for value in good:
            assert accepts(spec, wrap(value)), (kind, spec.param, value)
        for value in bad:
            assert not accepts(spec, wrap(value)), (kind, spec.param, value)


def test_a_property_named_like_a_dropped_keyword_stays():
    """Only schema positions are read (NOTE(closed-values)): a property named ``if`` stays."""
    spec = parse_guided({"structured_outputs": {"json": {
        "type": "object", "properties": {"if": {"type": "boolean"}}, "required": ["if"],
        "dependentRequired": {"if": ["then"]}}}})
    assert accepts(spec, {"if": True})
    assert not accepts(spec, {}) and not accepts(spec, {"if": 1})


SET_OF_STR = {"type": "object", "title": "M", "required": ["tags"], "properties": {"tags": {
    "type": "array", "items": {"type": "string"}, "uniqueItems": True, "title": "Tags"}}}


@pytest.mark.parametrize("schema, keys", [
    (SET_OF_STR, '["uniqueItems"]'),  # pydantic's set[str]: guidance for vLLM as well
    ({**EVEN, "unevaluatedProperties": False}, '["unevaluatedProperties"]'),
    ({**EVEN, "dependentRequired": {"n": ["m"]}}, '["dependentRequired"]'),
    ({**EVEN, "if": {"required": ["n"]}, "then": {}}, '["if", "then"]'),
    ({**EVEN, "not": {}}, '["not"]'),
    # xgrammar refuses these (a strict node that cannot hold), so vLLM gives them to guidance
    ({"type": "object", "minProperties": 1, "dependentRequired": {}}, '["dependentRequired"]'),
    (at({"prefixItems": [INT], "minContains": 2}), '["minContains"]'),
    (at({"items": INT, "minContains": 3, "maxItems": 2}), '["minContains"]'),
    # NOTE(property-names): vLLM's own check, and xgrammar's refusal of a key typed integer
    ({"type": "object", "properties": {}, "propertyNames": {"enum": ["a"]}}, '["propertyNames"]'),
    ({"type": "object", "propertyNames": {"type": "integer"}}, '["propertyNames"]'),
], ids=["set-of-str", "unevaluated", "dependent", "if-then", "not", "min-properties",
        "min-contains-past-prefix", "min-contains-past-max", "names-beside-properties",
        "names-not-strings"])
def test_where_vllm_gives_the_schema_to_guidance_they_stay_a_400(schema, keys):
    """vLLM's guidance answers "Grammar error: Unimplemented keys: [...]" for each."""
    with pytest.raises(RequestError, match=re.escape(f"Unimplemented keys: {keys}")) as err:
        parse_guided({"structured_outputs": {"json": schema}})
    assert err.value.param == "structured_outputs.json"
    with pytest.raises(RequestError, match="Unimplemented keys") as err:
        forced(schema, "required")
    assert err.value.param == "tools[0].function.parameters"


MCP_TOOL = {"properties": {"path": {"type": "string"}, "opts": {"properties": {
    "depth": INT}}}, "required": ["path"]}  # no "type": "object", as many MCP servers send


def test_a_forced_call_of_a_tool_without_type_object_is_an_object():
    """NOTE(xgrammar-infers): vLLM's xgrammar reads the parameters as an object (closed), so
    a forced call's arguments are one; llguidance alone took ``5`` or ``"s"``."""
    for spec, wrap in ((forced(MCP_TOOL), lambda v: v),
                       (forced(MCP_TOOL, "required"), lambda v: [{"name": "t", "parameters": v}])):
        assert accepts(spec, wrap({"path": "p", "opts": {"depth": 1}}))
        for bad in (5, "s", [], None, {"path": "p", "x": 1}, {"path": "p", "opts": 3}):
            assert not accepts(spec, wrap(bad)), (spec.param, bad)


def required(*parameters) -> object:
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": p}}
             for i, p in enumerate(parameters)]
    return parse_tool_request({"tools": tools, "tool_choice": "required"}, None).grammar


def test_required_picks_the_backend_for_the_union_of_every_tool():
    """NOTE(union-reach): beside a multipleOf tool, vLLM gives every tool to guidance: a
    closed-looking tool takes an undeclared key there (it was closed tool by tool), and a
    keyword xgrammar would ignore is guidance's 400, naming that tool."""
    extra = [{"name": "t1", "parameters": {"a": 1, "x": 2}}]
    assert accepts(required(EVEN, OBJ), extra)
    assert not accepts(required({"type": "object"}, OBJ), extra)  # xgrammar: closed
    with pytest.raises(RequestError, match="Unimplemented keys") as err:
        required(EVEN, KINDS["if-then-else"][0])
    assert err.value.param == "tools[1].function.parameters"
    spec = required({"type": "object"}, KINDS["unevaluatedProperties"][0])
    assert not accepts(spec, extra) and accepts(spec, [{"name": "t1", "parameters": {}}])


def test_a_schema_xgrammar_refuses_is_read_as_guidance_reads_it():
    """xgrammar refuses a node it reads strict that cannot hold (an array with ``minItems`` and
    no ``items``; closed, ``{"properties": {}, "minProperties": 1}``), so vLLM gives the whole
    schema to guidance: every object open, an untyped node any type, and for tool_choice
    required every tool (NOTE(union-reach)). Closed here, the outer object refused an
    undeclared key and the second node held no object. A node xgrammar drops (``not``)
    refuses nothing."""
    sent = {"type": "object", "properties": {"l": {"type": "array", "minItems": 1},
                                             "o": {"properties": {}, "minProperties": 1}}}
    spec = parse_guided({"structured_outputs": {"json": sent}})
    assert accepts(spec, {"l": [1], "o": {"a": 1}, "x": 1}) and accepts(spec, {"o": 1})
    assert not accepts(spec, {"l": []}) and not accepts(spec, {"o": {}})
    assert accepts(required(sent, OBJ), [{"name": "t1", "parameters": {"a": 1, "x": 2}}])
    dropped = parse_guided({"guided_json": {**OBJ, "not": {"type": "array", "minItems": 1}}})
    assert not accepts(dropped, {"x": 1})


LIST = {"anyOf": [{"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
                 {"type": "null"}]}
ENFORCED = {"type": "object", "required": ["k", "n"], "unevaluatedProperties": False,
            "properties": {"k": {"enum": ["x", "y"]},
                           "n": {"type": "integer", "minimum": 0, "maximum": 9}, "t": LIST}}
FLAG = {"type": "object", "properties": {"on": {"type": "boolean"}}}
SENT = {**ENFORCED, "properties": {**ENFORCED["properties"], "t": {**LIST, "uniqueItems": True}},
        "dependentRequired": {"t": ["n"]}, "if": {"properties": {"k": {"const": "x"}}},
        "then": {"required": ["t"]}, "not": {"required": ["zz"]}}


async def test_a_schema_that_was_a_400_is_served_and_its_output_obeys_it(make_server):
    """Through the server: response_format and a required tool with every kind at once."""
    chat = {"messages": [{"role": "user", "content": "JSON"}], "max_tokens": 120, "seed": 8,
            "temperature": 1.0}
    tools = [{"type": "function", "function": {"name": "f", "parameters": SENT}},
             {"type": "function", "function": {"name": "g", "parameters": FLAG}}]
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/chat/completions", json={
                **chat, "n": 2, "response_format": as_format(SENT)}) as r:
            out = await r.json()
            assert r.status == 200, out
        for choice in out["choices"]:
            jsonschema.validate(json.loads(choice["message"]["content"]), ENFORCED)
        async with s.post(srv.v1 + "/chat/completions", json={
                **chat, "tools": tools, "tool_choice": "required", "max_tokens": 200,
                "parallel_tool_calls": False}) as r:
            out = await r.json()
            assert r.status == 200, out
    assert out["choices"][0]["finish_reason"] == "tool_calls", out
    for call in out["choices"][0]["message"]["tool_calls"]:
        args = json.loads(call["function"]["arguments"])
        jsonschema.validate(args, ENFORCED if call["function"]["name"] == "f" else {
            **FLAG, "additionalProperties": False})
