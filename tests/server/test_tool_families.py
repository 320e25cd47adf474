"""The tool-call parsers of the model families beside the first four: qwen3_coder, seed_oss,
glm45 and minimax_m2 (arguments written as text between tags, typed by the request's tool
schema), deepseek_v3,
deepseek_v31 and kimi_k2 (JSON arguments between special-token tags). Each output is written
here by a writer of the family's format, independent of the parsers: the whole-output parse
gives back the calls written, and the streaming reader the same, however the text is cut.
Hostile and malformed outputs read as plain content or stop at the first bad call."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.server.tools.parsers import PARSERS, tool_parser
from kvpool.server.tools.stream import ParserStream
from kvpool.server.tools.typed import coerce
from tests.server.test_tool_parsers import join

DS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
      "<｜tool▁calls▁end｜>")
KIMI = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
        "<|tool_call_end|>", "<|tool_calls_section_end|>")
TYPES = ("string", "integer", "number", "boolean", "array", "object")
NAMES = ("get_weather", "f", "a.b-c_1")


def write(family: str, calls: list[tuple[str, dict]]) -> str:
    """The calls as the family's model writes them (texts for the XML families' values)."""
    if family in ("qwen3_coder", "seed_oss"):
        tag = "tool_call" if family == "qwen3_coder" else "seed:tool_call"
        return "".join(f"<{tag}>\n<function={n}>\n" + "".join(
            f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in a.items())
            + f"</function>\n</{tag}>\n" for n, a in calls)
    if family == "minimax_m2":
        quote = ['"{}"', "'{}'", "{}"]
        return "<minimax:tool_call>\n" + "".join(
            f"<invoke name={quote[i % 3].format(n)}>\n" + "".join(
                f"<parameter name={quote[(i + j) % 3].format(k)}>{v}</parameter>\n"
                for j, (k, v) in enumerate(a.items())) + "</invoke>\n"
            for i, (n, a) in enumerate(calls)) + "</minimax:tool_call>"
    if family == "glm45":
        return "".join(f"<tool_call>{n}\n" + "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in a.items())
            + "</tool_call>" for n, a in calls)
    if family == "deepseek_v3":
        body = "".join(f"{DS[1]}function{DS[2]}{n}\n```json\n{json.dumps(a)}\n```{DS[3]}"
                       for n, a in calls)
    elif family == "deepseek_v31":
        body = "".join(f"{DS[1]}{n}{DS[2]}{json.dumps(a)}{DS[3]}" for n, a in calls)
    else:
        return KIMI[0] + "".join(f"{KIMI[1]}functions.{n}:{i}{KIMI[2]}{json.dumps(a)}{KIMI[3]}"
                                 for i, (n, a) in enumerate(calls)) + KIMI[4]
    return DS[0] + body + DS[4]


def as_text(kind: str, value) -> str:
    """How an XML family writes a value of schema type ``kind``."""
    if kind in ("array", "object"):
        return json.dumps(value)
    return {True: "true", False: "false"}.get(value, str(value)) if kind == "boolean" else (
        repr(value) if kind == "number" else str(value))


def values(kind: str):
    scalars = st.one_of(st.integers(-99, 99), st.text("abc xyz", max_size=4), st.booleans())
    return {"string": st.text(st.characters(blacklist_characters="<", codec="utf-8"),
                              max_size=12),
            "integer": st.integers(-10 ** 12, 10 ** 12),
            "number": st.floats(allow_nan=False, allow_infinity=False, width=32),
            "boolean": st.booleans(), "array": st.lists(scalars, max_size=3),
            "object": st.dictionaries(st.text("kq", min_size=1, max_size=3), scalars,
                                      max_size=3)}[kind]


@st.composite
def typed_calls(draw):
    """(tools, [(name, {param: value})]) with each parameter's schema type."""
    kinds = {n: draw(st.dictionaries(st.sampled_from(["city", "days", "x", "opts"]),
                                     st.sampled_from(TYPES), max_size=4)) for n in NAMES}
    tools = tuple({"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in ks.items()}}}}
        for n, ks in kinds.items())
    calls = []
    for name in draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3)):
        calls.append((name, {k: (t, draw(values(t))) for k, t in kinds[name].items()}))
    return tools, calls


def streamed(parser, text: str, cuts: list[int]):
    reader, deltas, pos = ParserStream(parser), [], 0
    for cut in sorted(cuts) + [len(text)]:
        deltas += reader.feed(text[pos:cut])
        pos = max(pos, cut)
    return join(deltas + reader.finish())


def check_both(parser, text: str, content, want: list[tuple[str, dict]], cuts) -> None:
    whole = parser.extract(text)
    assert whole.content == content
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == want
    assert streamed(parser, text, cuts) == (whole.content, [(c.name, c.arguments)
                                                           for c in whole.calls])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["qwen3_coder", "seed_oss", "glm45", "minimax_m2"]), typed_calls(),
       st.text("Sure, checking.\n", max_size=12), st.lists(st.integers(0, 600), max_size=8))
def test_xml_families_read_back_typed_calls(family, drawn, lead, cuts):
    tools, calls = drawn
    text = lead + write(family, [(n, {k: as_text(t, v) for k, (t, v) in a.items()})
                                 for n, a in calls])
    want = [(n, {k: v for k, (_, v) in a.items()}) for n, a in calls]
    check_both(tool_parser(family).for_tools(tools), text, lead or None, want, cuts)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["deepseek_v3", "deepseek_v31", "kimi_k2"]),
       st.lists(st.tuples(st.sampled_from(NAMES), st.dictionaries(
           st.text(max_size=5), st.recursive(st.none() | st.booleans() | st.integers()
                                             | st.text(max_size=6),
                                             lambda x: st.lists(x, max_size=3), max_leaves=6),
           max_size=3)), min_size=1, max_size=3),
       st.text("Let me look.", max_size=12), st.lists(st.integers(0, 600), max_size=8))
def test_json_families_read_back_their_calls(family, calls, lead, cuts):
    check_both(tool_parser(family), lead + write(family, calls), lead or None, calls, cuts)


def test_kimi_keeps_its_own_call_ids():
    got = tool_parser("kimi_k2").extract(write("kimi_k2", [("f", {}), ("get_weather", {})]))
    assert [c.id for c in got.calls] == ["functions.f:0", "functions.get_weather:1"]


@pytest.mark.parametrize("family, text, calls", [
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n", []),
    ("qwen3_coder", "<function=rm\t-rf>\n</function><function=g>\n</function>", [("g", {})]),
    ("qwen3_coder", "a <function=f><parameter=x>1<parameter=y>2</function>",
     [("f", {"x": "1", "y": "2"})]),  # no schema: text, a value ended by the next tag
    ("qwen3_coder", "<tool_call>\nno function here\n</tool_call>", []),
    ("glm45", "<tool_call>{\"name\":\n\"f\"}</tool_call>", []),
    ("seed_oss", "<tool_call>\n<function=f>\n</function>", [("f", {})]),  # vLLM's fallback
    ("minimax_m2", '<minimax:tool_call><invoke name="a\tb"></invoke><invoke name=g>'
     '<parameter name="k">v<parameter name="j">w</parameter></invoke>',
     [("g", {"k": "v", "j": "w"})]),
    ("minimax_m2", '<minimax:tool_call><invoke name="f"><parameter name="k">1', []),
    ("glm45", "<tool_call>f</tool_call><tool_call>g<arg_key>k</arg_key>", [("f", {})]),
    ("deepseek_v3", f"{DS[0]}{DS[1]}function{DS[2]}f\n```json\n{{\"x\": 1}} tail\n```{DS[3]}",
     []),
    ("deepseek_v3", f"{DS[0]}{DS[1]}function{DS[2]}f\n{{\"x\": 1}}{DS[3]}", []),
    ("deepseek_v31", f"{DS[0]}{DS[1]}f{DS[2]}[1]{DS[3]}{DS[1]}g{DS[2]}{{}}{DS[3]}", []),
    ("deepseek_v31", f"{DS[0]}{DS[1]}f{DS[2]}{{}}{DS[3]}{DS[1]}g{DS[2]}{{bad{DS[3]}",
     [("f", {})]),
    ("kimi_k2", f"{KIMI[0]}{KIMI[1]}functions.f{KIMI[2]}{{}}{KIMI[3]}", []),
    ("kimi_k2", f"{KIMI[0]}{KIMI[1]}functions.f:0{KIMI[2]}{{\"a\": 1}}", []),
])
def test_malformed_outputs_are_content_or_stop_at_the_first_bad_call(family, text, calls):
    got = tool_parser(family).extract(text)
    assert [(c.name, json.loads(c.arguments)) for c in got.calls] == calls
    if not calls:
        assert got.content == text
    assert streamed(tool_parser(family), text, [3, 9, 20])[1] == [
        (c.name, c.arguments) for c in got.calls]


@pytest.mark.parametrize("text, schema, value", [
    ("5", {"type": "integer"}, 5), ("5", {"type": "string"}, "5"),
    (" 7 ", {"type": "int"}, 7), ("1_000", {"type": "integer"}, "1_000"),
    ("3.0", {"type": "number"}, 3), ("2.5e3", {"type": "double"}, 2500),
    ("1e999", {"type": "number"}, "1e999"), ("NaN", {"type": "number"}, "NaN"),
    ("[1e999]", {"type": "array"}, "[1e999]"), ("Infinity", {"type": "object"}, "Infinity"),
    ("TRUE", {"type": "boolean"}, True), ("0", {"type": "bool"}, False),
    ("yes", {"type": "boolean"}, "yes"), ("null", {"type": ["string", "null"]}, None),
    ("Null", {"type": "string"}, "Null"), ("2", {"enum": [1, 2]}, 2),
    ("2", {"enum": ["1", "2"]}, "2"), ("x", {"anyOf": [{"type": "integer"},
                                                       {"type": "string"}]}, "x"),
    ("4", {"oneOf": [{"type": "integer"}, {"type": "string"}]}, 4),
    ('{"a": 1}', {"type": "object"}, {"a": 1}), ("[1]", {"type": "object"}, [1]),
    ('{"a": 1}', {"type": "array"}, {"a": 1}), ("plain", {}, "plain"),
    ("12", {"type": "Unknown"}, 12), ("1", "not a schema", "1"),
    ("9" * 5000, {"type": "integer"}, "9" * 5000),  # past int's digit limit: text, no error
    ("9" * 5000, {"type": ["number", "integer"]}, "9" * 5000),
    ("7", {"type": 5, "enum": {"a": 1}, "anyOf": "x"}, "7"),  # odd schema: no type, no error
])
def test_values_take_the_schemas_type(text, schema, value):
    got = coerce(text, schema)
    assert got == value and type(got) is type(value)
    assert not isinstance(got, float) or math.isfinite(got)


def test_a_request_binds_its_own_tools_and_the_servers_parser_stays_unbound():
    shared = tool_parser("qwen3_coder")
    text = write("qwen3_coder", [("f", {"n": "3"})])
    as_int = shared.for_tools(({"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}}}},))
    assert json.loads(as_int.extract(text).calls[0].arguments) == {"n": 3}
    assert json.loads(shared.extract(text).calls[0].arguments) == {"n": "3"}
    assert shared.for_tools(({"type": "function", "function": {"name": "f"}},)).extract(
        text).calls[0].arguments == '{"n": "3"}'
    assert {"qwen3_coder", "qwen3_xml", "seed_oss", "glm45", "glm47", "minimax_m2",
            "deepseek_v3", "deepseek_v31", "kimi_k2", "qwen3_json", "llama4_json",
            "llama4_pythonic"} <= set(PARSERS)


@pytest.mark.parametrize("family, unit, call", [
    ("qwen3_coder", "<function=f>x", "<function=g>\n</function>"),
    ("seed_oss", "<parameter=a>>", "<function=g>\n</function>"),
    ("glm45", "<tool_call>f<arg_key>", "</tool_call><tool_call>g</tool_call>"),
    ("minimax_m2", "<invoke name=f>", "</invoke><invoke name=g></invoke>"),
    ("deepseek_v31", f"{DS[1]}f{DS[2]}{{>", f"{DS[3]}"),
    ("kimi_k2", f"{KIMI[1]}functions.f:0{KIMI[2]}{{>", f"{KIMI[3]}"),
])
def test_a_stream_reads_its_text_again_only_when_a_call_may_have_closed(family, unit, call):
    """NOTE(closers): a degenerate output (a small model repeating an unclosed tag) is read
    once when its marker arrives and once at the tag that closes a call, not at every piece
    holding a ``>`` (which made a long one cost time quadratic in its length)."""
    base = type(tool_parser(family))
    reads = []
    spy = type("Spy", (base,), {"extract": lambda self, text: reads.append(len(text))
                                or base.extract(self, text)})()
    opener = {"qwen3_coder": "<tool_call>", "seed_oss": "<seed:tool_call><function=f>",
              "glm45": "", "minimax_m2": "<minimax:tool_call>", "deepseek_v31": DS[0],
              "kimi_k2": KIMI[0]}[family]
    text = "Sure. " + opener + unit * 400 + call
    reader, deltas = ParserStream(spy), []
    for pos in range(0, len(text), 5):
        deltas += reader.feed(text[pos:pos + 5])
    deltas += reader.finish()
    assert len(reads) <= 4, len(reads)  # the marker, each closing tag, the finish
    assert join(deltas)[1] == [(c.name, c.arguments) for c in base().extract(text).calls]


def assert_read_once_over(family: str, text: str, calls: list) -> None:
    """``text``, streamed in 7-character pieces, gives back ``calls``, and its readings
    (``calls_from``, counted by a spy) look at about the text's length in all."""
    base = type(tool_parser(family))
    looked = []

    def calls_from(self, text, pos, seen):
        looked.append(len(text) - pos)
        return base.calls_from(self, text, pos, seen)
    reader, deltas = ParserStream(type("Spy", (base,), {"calls_from": calls_from})()), []
    for pos in range(0, len(text), 7):
        deltas += reader.feed(text[pos:pos + 7])
    got = join(deltas + reader.finish())[1]
    assert [(n, json.loads(a)) for n, a in got] == calls
    assert len(looked) >= len(calls) // 2 and sum(looked) <= 2 * len(text), sum(looked)


@pytest.mark.parametrize("family", ["hermes", "llama3_json", "qwen3_coder", "seed_oss", "glm45",
                                    "minimax_m2", "deepseek_v3", "deepseek_v31", "kimi_k2"])
def test_each_reading_goes_on_where_the_last_ended(family):
    """NOTE(resume): a stream of 300 calls (a small model looping) asks its parser only for
    the calls past the last one it gave, so the text a reading looks at is the new part:
    over the whole stream about the text's length, where reading every call from the first
    again cost the text's length per call (seconds at a thousand calls)."""
    calls = [("f", {"x": str(i)}) for i in range(300)]
    text = {"hermes": "".join(f'<tool_call>{{"name": "f", "arguments": {json.dumps(a)}}}'
                              "</tool_call>\n" for _, a in calls),
            "llama3_json": "<|python_tag|>" + "; ".join(
                f'{{"name": "f", "parameters": {json.dumps(a)}}}' for _, a in calls)
            }.get(family) or write(family, calls)
    assert_read_once_over(family, text, calls)
    one = ParserStream(tool_parser(family), limit=1)  # parallel_tool_calls false
    assert len(join(one.feed(text) + one.finish())[1]) == 1
