"""Tool lists as vLLM takes them (kvpool/server/tools/request.py NOTE(tool-list), calls.py
NOTE(tool-names)), through the real request parser, the real llguidance compiler and every
real tool-call parser: thousands of tools, names agents use ("github/create_issue",
"server:tool", "café", "fetch url", up to 256 characters), a name given twice (a named choice
takes its first tool); a missing, empty, non-string, too long or control-character name is
still a 400 naming it."""

from __future__ import annotations

import json

import pytest

from kvpool.errors import RequestError
from kvpool.server.responses_tools import forced_text_format
from kvpool.server.tools.parsers import tool_parser
from kvpool.server.tools.request import MAX_TOOLS, parse_tool_request
from tests.server import test_tool_families as families
from tests.server import test_tool_lists as lists
from tests.server.test_tool_families import check_both
from tests.server.test_tool_schema_parity import accepts

NAMES = ["github/create_issue", "server:tool", "café", "fetch url", "mcp__srv__t", "x" * 256]
EMPTY = {"type": "object", "properties": {}}


def tools_named(*names: str, params: list | None = None) -> list[dict]:
    return [{"type": "function", "function": {"name": n, "parameters": p}}
            for n, p in zip(names, params or [EMPTY] * len(names))]


@pytest.mark.parametrize("choice", ["none", "required", "named"])
def test_names_agents_use_are_served_and_forced(choice):
    for name in NAMES:
        tool_choice = {"type": "function", "function": {"name": name}} \
            if choice == "named" else choice
        req = parse_tool_request({"tools": tools_named(name), "tool_choice": tool_choice,
                                  "parallel_tool_calls": False}, None)
        if choice == "required":  # the name goes into the grammar as a JSON string
            assert accepts(req.grammar, [{"name": name, "parameters": {}}])
            assert not accepts(req.grammar, [{"name": name + "x", "parameters": {}}])


@pytest.mark.parametrize("fn", [
    {}, {"name": ""}, {"name": None}, {"name": 5}, {"name": "x" * 257}, {"name": "a\nb"},
    {"name": "tab\there"}, {"name": "nul\x00"}, {"name": "c1\x85"}],
    ids=["missing", "empty", "null", "number", "257", "newline", "tab", "nul", "c1"])
def test_a_name_that_is_no_name_is_still_a_400_naming_it(fn):
    body = {"tools": [{"type": "function", "function": {**fn, "parameters": EMPTY}}],
            "tool_choice": "none"}
    with pytest.raises(RequestError, match="is required") as err:
        parse_tool_request(body, None)
    assert err.value.param == "tools[0].function.name"


def test_thousands_of_tools_are_one_request_and_the_bound_is_the_body():
    many = tools_named(*(f"mcp__srv{i % 9}__tool_{i}" for i in range(MAX_TOOLS)))
    assert len(parse_tool_request({"tools": many, "tool_choice": "none"}, None).tools) == 4096
    with pytest.raises(RequestError) as err:
        parse_tool_request({"tools": many + many[:1], "tool_choice": "none"}, None)
    assert err.value.param == "tools"


def test_a_name_given_twice_is_served_and_a_named_choice_takes_its_first_tool():
    first = {"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]}
    second = {"type": "object", "properties": {"b": {"const": 2}}, "required": ["b"]}
    tools = tools_named("t", "t", params=[first, second])
    named = parse_tool_request({"tools": tools, "tool_choice": {
        "type": "function", "function": {"name": "t"}}}, None)
    assert len(named.tools) == 2
    assert accepts(named.grammar, {"a": 1}) and not accepts(named.grammar, {"b": 2})
    required = parse_tool_request({"tools": tools, "tool_choice": "required",
                                   "parallel_tool_calls": False}, None)
    for args in ({"a": 1}, {"b": 2}):  # either tool of the name
        assert accepts(required.grammar, [{"name": "t", "parameters": args}])
    # an auto parser types a value by the first tool of its name
    typed = tool_parser("qwen3_coder").for_tools(tuple(tools_named("t", "t", params=[
        {"type": "object", "properties": {"n": {"type": "integer"}}},
        {"type": "object", "properties": {"n": {"type": "string"}}}])))
    call, = typed.extract("<tool_call>\n<function=t>\n<parameter=n>\n7\n</parameter>\n"
                          "</function>\n</tool_call>").calls
    assert json.loads(call.arguments) == {"n": 7}


def written(family: str, name: str) -> str:
    """One call of ``name`` with the argument k="v", as the family's model writes it."""
    call = [(name, {"k": "v"})]
    obj = json.dumps({"name": name, "arguments": {"k": "v"}}, ensure_ascii=False)
    if family in ("hermes", "qwen3_json"):
        return f"<tool_call>\n{obj}\n</tool_call>"
    if family == "llama3_json":
        return "<|python_tag|>" + obj.replace('"arguments"', '"parameters"')
    if family == "mistral":
        return f'[TOOL_CALLS]{name}{{"k": "v"}}'
    if family in lists.LISTS + lists.BLOCKS:
        return lists.write(family, call)
    return families.write(family, call)


FAMILIES = ["hermes", "llama3_json", "mistral", "qwen3_coder", "seed_oss", "glm45",
            "minimax_m2", "deepseek_v3", "deepseek_v31", "kimi_k2", *lists.LISTS, *lists.BLOCKS]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", NAMES[:4])
def test_every_parser_reads_a_call_of_such_a_name_whole_and_streamed(family, name):
    """Every format that can write the name (pythonic's are Python identifiers)."""
    parser = tool_parser("granite" if family == "granite31" else family)
    lead = "" if parser.at_start else "Sure. "  # llama3_json: calls open the output
    check_both(parser, lead + written(family, name), lead or None, [(name, {"k": "v"})],
               [3, 9, 20])


def test_responses_echoes_the_first_tool_of_a_named_choice_given_twice():
    """The text.format a forced Responses call echoes (NOTE(forced-text)) takes the first."""
    first, second = ({"type": "object", "properties": {k: {"type": "integer"}}} for k in "ab")
    tools = [{"type": "function", "name": "t", "parameters": p} for p in (first, second)]
    named = forced_text_format({"tools": tools, "tool_choice": {"type": "function",
                                                                "name": "t"}})
    assert named["schema"] == first
    required = forced_text_format({"tools": tools, "tool_choice": "required"})
    assert len(required["schema"]["items"]["anyOf"]) == 2
