"""Tool and response_format schemas vLLM's default backend (xgrammar) serves, through the real
parser and llguidance compiler, each grammar read token by token with the built-in byte
tokenizer: the formats llguidance lacks are patterns of exactly their syntax
(kvpool/runtime/model/grammar.py NOTE(formats)), a oneOf llguidance cannot prove disjoint is
compiled as anyOf (NOTE(one-of)), a forced tool schema may be 1 MiB (NOTE(schema-cap)), and a
forced call declares no key its schema does not and a zero-argument tool's is ``{}``
(tools/request.py NOTE(closed-tools)); what llguidance cannot do stays a 400."""

from __future__ import annotations

import json

import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model import build_byte_tokenizer
from kvpool.runtime.model.grammar import MAX_SCHEMA_CHARS, GrammarSpec
from kvpool.runtime.model.grammar_matchers import GrammarMatchers
from kvpool.server.xgrammar_reach import goes_to_xgrammar
from kvpool.server.guided_fields import parse_guided
from kvpool.server.sampling_fields import parse_response_format
from kvpool.server.tools.request import parse_tool_request

TOK = build_byte_tokenizer()
MATCHERS = GrammarMatchers(TOK, 520)


def accepts(spec: GrammarSpec, value) -> bool:
    """Whether the compiled grammar generates ``value`` (compact JSON) whole."""
    m = GrammarMatchers.new_matcher(MATCHERS.compiler.compile(spec))
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    ids = TOK.encode(text, add_special_tokens=False)
    if m.validate_tokens(ids) != len(ids):
        return False
    m.consume_tokens(ids)
    return m.is_accepting()


def forced(parameters, choice="named", parallel=True, name="t") -> GrammarSpec:
    """The grammar of a forced call of one tool ``name`` with ``parameters`` (left out: None)."""
    fn = {"name": name} if parameters is None else {"name": name, "parameters": parameters}
    tool_choice = {"type": "function", "function": {"name": name}} if choice == "named" \
        else choice
    return parse_tool_request({"tools": [{"type": "function", "function": fn}],
                               "tool_choice": tool_choice, "parallel_tool_calls": parallel},
                              None).grammar


def as_format(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def one_string(fmt: str) -> dict:
    return {"type": "object", "properties": {"u": {"type": "string", "format": fmt}},
            "required": ["u"]}


@pytest.mark.parametrize("fmt, good, bad", [
    ("json-pointer", ["", "/", "/a~0b/c~1d", "//x", "/ü/0"], ["a", "/a~2", "/a~", "#/a"]),
    ("relative-json-pointer", ["0", "1/a", "2#", "0+1/x~1y", "10-2#"],
     ["", "01", "/a", "-1", "1#/a", "1+#"]),
    ("uri-reference", ["", "../a?b=1#c", "https://x.org/p", "café/ü"], ["a b", "a\tb", "a\nb"]),
    ("uri-template", ["http://x.org/{id}{?q,r}", "/a/{b}"], ["{a b}", "a\u00a0b"]),
])
def test_formats_xgrammar_takes_compile_to_their_exact_syntax(fmt, good, bad):
    """Named, required and response_format: each value of the format and none other."""
    specs = [forced(one_string(fmt)), GrammarSpec.json_schema(one_string(fmt))]
    for spec in specs:
        for value in good:
            assert accepts(spec, {"u": value}), (fmt, value)
        for value in bad:
            assert not accepts(spec, {"u": value}), (fmt, value)
    required = forced(one_string(fmt), "required", parallel=False)
    assert accepts(required, [{"name": "t", "parameters": {"u": good[-1]}}])
    assert not accepts(required, [{"name": "t", "parameters": {"u": bad[0]}}])


def test_a_format_beside_a_pattern_holds_both_and_values_stay_as_sent():
    both = GrammarSpec.json_schema({"type": "string", "format": "json-pointer",
                                    "pattern": "^/a.*"})
    assert accepts(both, "/ab") and not accepts(both, "/b") and not accepts(both, "a")
    # a const that reads like a schema and a property named format are not rewritten
    const = GrammarSpec.json_schema({"const": {"format": "uri-reference"}})
    assert accepts(const, {"format": "uri-reference"}) and not accepts(const, {"pattern": "x"})
    named = GrammarSpec.json_schema({"type": "object", "properties": {
        "format": {"type": "string", "format": "uri-template"}}, "required": ["format"]})
    assert accepts(named, {"format": "/{x}"}) and not accepts(named, {"format": "a b"})


PATH_OR_URL = {"type": "object", "properties": {"target": {"oneOf": [
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}]}},
    "required": ["target"]}


def test_a_one_of_llguidance_cannot_prove_disjoint_is_served_as_any_of():
    for spec in (forced(PATH_OR_URL), GrammarSpec.json_schema(PATH_OR_URL),
                 parse_guided({"structured_outputs": {"json": PATH_OR_URL}})):
        assert accepts(spec, {"target": {"path": "a"}})
        assert accepts(spec, {"target": {"url": "b"}})
        assert not accepts(spec, {"target": 3})
    forced(PATH_OR_URL, "required")


@pytest.mark.parametrize("schema, why", [
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "string", "format": "iri"}, "Unknown format: iri"),
    ({"type": "string", "format": "regex"}, "Unknown format: regex"),
])
def test_what_llguidance_cannot_do_stays_a_400_naming_the_tool(schema, why):
    with pytest.raises(RequestError, match=why) as err:
        forced({"type": "object", "properties": {"x": schema}}, "required")
    assert err.value.param == "tools[0].function.parameters"
    with pytest.raises(RequestError, match=why):
        GrammarSpec.json_schema(schema)


def github_tool(i: int) -> dict:
    """An MCP-like tool of 7 described properties (~830 characters in the forced schema)."""
    text = {"type": "string", "description": "Repository owner (user or organisation)."}
    props = {k: text for k in ("path", "ref", "owner", "repo")} | {
        "mode": {"type": "string", "enum": ["read", "write", "append", "delete"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000,
                  "description": "Maximum items."},
        "labels": {"type": "array", "items": {"type": "string"},
                   "description": "Labels to apply."}}
    return {"type": "function", "function": {
        "name": f"mcp__github__tool_{i}", "description": "A GitHub tool.",
        "parameters": {"type": "object", "properties": props,
                       "required": ["owner", "repo", "path"]}}}


def test_required_over_100_realistic_tools_compiles_and_1_mib_is_the_bound():
    """NOTE(schema-cap): the union was refused past 64 KiB (~80 such tools)."""
    tools = [github_tool(i) for i in range(100)]
    req = parse_tool_request({"tools": tools, "tool_choice": "required"}, None)
    assert 64 * 1024 < len(req.grammar.schema) < MAX_SCHEMA_CHARS
    call = {"name": "mcp__github__tool_99", "parameters": {"path": "a", "owner": "o",
                                                           "repo": "r"}}
    assert accepts(req.grammar, [call])
    assert not accepts(req.grammar, [{**call, "name": "mcp__github__tool_100"}])
    with pytest.raises(RequestError, match=f"at most {MAX_SCHEMA_CHARS}"):
        GrammarSpec.json_schema({"type": "string", "description": "x" * MAX_SCHEMA_CHARS})


READ_FILE = {"type": "object", "properties": {"path": {"type": "string", "maxLength": 5}},
             "required": ["path"]}


@pytest.mark.parametrize("choice", ["named", "required"])
def test_a_forced_call_declares_no_key_its_schema_does_not(choice):
    spec = forced(READ_FILE, choice)

    def call(args):
        return args if choice == "named" else [{"name": "t", "parameters": args}]

    assert accepts(spec, call({"path": "a"}))
    assert not accepts(spec, call({"path": "a", "mode": 1}))
    # nested objects close too; one that sets additionalProperties keeps it
    nested = forced({"type": "object", "properties": {
        "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
        "env": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
        "meta": {"type": "object"}}}, choice)
    assert accepts(nested, call({"opts": {"deep": True}, "env": {"A": "1"}, "meta": {"k": 1}}))
    assert not accepts(nested, call({"opts": {"deep": True, "x": 1}}))
    # response_format used to stay as sent (open) here; it closes as forced calls do now, as
    # vLLM's xgrammar closes both (guided_fields.py NOTE(strict-schemas)): the compiler alone
    # (llguidance) still takes any key, so the closing is the server's
    assert accepts(GrammarSpec.json_schema(READ_FILE), {"path": "a", "mode": 1})
    assert not accepts(parse_response_format(as_format(READ_FILE)), {"path": "a", "mode": 1})


@pytest.mark.parametrize("parameters", [
    None, {}, {"type": "object", "properties": {}},
    {"type": "object", "description": "No arguments.", "title": "T", "properties": {},
     "required": []}], ids=["left-out", "empty", "no-properties", "described"])
def test_a_zero_argument_tool_is_called_with_an_empty_object(parameters):
    named, required = forced(parameters), forced(parameters, "required", parallel=False)
    assert accepts(named, {}) and not accepts(named, {"a": 1})
    assert accepts(required, [{"name": "t", "parameters": {}}])
    assert not accepts(required, [{"name": "t", "parameters": {"a": 1}}])


@pytest.mark.parametrize("parameters", [
    {"type": "object"}, {"type": "object", "description": "Any filters.", "title": "T"}],
    ids=["bare-object", "described"])
def test_a_tool_declaring_no_member_takes_any_object(parameters):
    """As xgrammar's strict mode leaves it (NOTE(closed-tools)): before, forced to ``{}``."""
    named, required = forced(parameters), forced(parameters, "required", parallel=False)
    assert accepts(named, {}) and accepts(named, {"a": 1})
    assert accepts(required, [{"name": "t", "parameters": {"a": [1]}}])


def test_closing_reads_only_schema_positions():
    """NOTE(closed-values): a const value stays as sent, a property named default closes."""
    spec = forced({"type": "object", "properties": {
        "c": {"const": {"properties": {"a": 1}}},
        "default": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        "required": ["c", "default"]})
    assert accepts(spec, {"c": {"properties": {"a": 1}}, "default": {"a": 1}})
    assert not accepts(spec, {"c": {"properties": {"a": 1}}, "default": {"a": 1, "b": 2}})


def strict_specs(schema) -> list[GrammarSpec]:
    """``schema`` as response_format, structured_outputs.json (object and text), guided_json."""
    return [parse_response_format(as_format(schema)),
            parse_guided({"structured_outputs": {"json": schema}}),
            parse_guided({"structured_outputs": {"json": json.dumps(schema)}}),
            parse_guided({"guided_json": schema})]


USER = {"type": "object", "title": "User", "required": ["name", "age"], "properties": {
    "name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "maximum": 99},
    "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
    "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
    "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
    "meta": {"type": "object"}, "any": {"anyOf": [{"properties": {"k": {}}}, {"type": "null"}]}},
    "$defs": {"Tag": {"type": "object", "properties": {"t": {"type": "string"}}}}}


@pytest.mark.parametrize("field", ["response_format", "so.json", "so.json text", "guided_json"])
def test_a_schema_without_additional_properties_takes_no_undeclared_key(field):
    """NOTE(strict-schemas): what xgrammar's strict mode (vLLM's default) takes: an object
    with properties and no additionalProperties closed (root, $defs, anyOf), prefixItems
    closed, additionalProperties a schema or a bare object kept open; instructor's pydantic
    schema (repro: a third key until max_tokens) can no longer grow a key."""
    spec = strict_specs(USER)[("response_format", "so.json", "so.json text",
                               "guided_json").index(field)]
    ok = {"name": "ab", "age": 2, "tags": [{"t": "x"}], "pair": [1, "s"], "extra": {"n": 1},
          "meta": {"k": [1]}, "any": {"k": 1}}
    assert accepts(spec, ok)
    for bad in ({"x": "y"}, {"tags": [{"t": "x", "u": 1}]}, {"pair": [1, "s", 3]},
                {"any": {"k": 1, "j": 2}}, {"extra": {"n": "s"}}):
        assert not accepts(spec, {"name": "ab", "age": 2, **bad}), bad


def test_what_xgrammar_would_refuse_or_drop_stays_as_sent():
    """NOTE(strict-schemas): a required name properties lack, minItems past prefixItems and a
    two-branch allOf are served open, never turned into a 400 (closed, each is unsatisfiable
    or refuses the other branch's keys); disable_additional_properties stays accepted."""
    undeclared = {"type": "object", "properties": {"a": {"type": "integer"}},
                  "required": ["a", "b"]}
    both = {"type": "object", "allOf": [{"properties": {"a": {"type": "integer"}}},
                                        {"properties": {"b": {"type": "integer"}}}]}
    for spec in strict_specs(undeclared):
        assert accepts(spec, {"a": 1, "b": 2})
    for spec in strict_specs({"type": "array", "prefixItems": [{}], "minItems": 2}):
        assert accepts(spec, [1, 2])
    for spec in strict_specs(both):
        assert accepts(spec, {"a": 1, "b": 2})
    closed = parse_guided({"structured_outputs": {"json": READ_FILE,
                                                  "disable_additional_properties": False}})
    assert not accepts(closed, {"path": "a", "mode": 1})


_OBJ = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.mark.parametrize("schema, value", [
    ({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}, "o": _OBJ},
      "required": ["n", "o"]}, {"n": 5, "o": {"a": 1, "x": 1}}),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^[a-z]+$",
                                             "maxLength": 5}}, "required": ["s"]},
     {"s": "abc", "x": 1}),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "patternProperties": {"^x_": {"type": "integer"}}, "required": ["a"]}, {"a": 1, "b": 2}),
    ({"type": "object", "patternProperties": {"^x_": {"type": "integer"}, "^y_": {}}},
     {"other": 1}),
], ids=["multipleOf", "bounded-pattern", "pattern-and-properties", "two-patterns"])
def test_schemas_vllm_gives_to_guidance_stay_open(schema, value):
    """NOTE(xgrammar-reach): vLLM 0.33 compiles these with guidance, objects open; closing them
    (a9395f3) made a value vLLM generates impossible here, in every field and forced calls."""
    assert all(accepts(spec, value) for spec in strict_specs(schema))
    assert accepts(forced(schema), value)


@pytest.mark.parametrize("schema, xgrammar", [
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, True),
    ({"type": ["integer", "null"], "multipleOf": 2}, False),
    ({"type": "array", "contains": {"type": "integer"}}, False),
    ({"type": "string", "format": "email"}, True),
    ({"type": "string", "format": "credit-card"}, False),
    ({"type": "string", "pattern": "a", "minLength": 1}, False),
    ({"type": "object", "propertyNames": {"pattern": "^a"}}, True),
    ({"type": "object", "propertyNames": {"pattern": "^a", "maxLength": 3}}, False),
    ({"type": "object", "propertyNames": {}, "properties": {}}, False),
    ({"type": "object", "propertyNames": {}, "unevaluatedProperties": False}, False),
    ({"type": "object", "propertyNames": {"type": "integer"}}, False),  # xgrammar's refusal
    ({"type": ["object", "null"], "propertyNames": True}, False),
    ({"anyOf": [{"allOf": [{"type": "string"}, {"enum": ["y"]}]}]}, False),
    ({"allOf": [{"type": "string"}]}, True),
    ({"$defs": {"d": {"type": "number", "multipleOf": 1}}, "type": "object"}, False),
])
def test_which_schemas_vllm_compiles_with_xgrammar(schema, xgrammar):
    """vLLM 0.33's has_xgrammar_unsupported_json_features, rule by rule (NOTE(xgrammar-reach))."""
    assert goes_to_xgrammar(schema) is xgrammar
