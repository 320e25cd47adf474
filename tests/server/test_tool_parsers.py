"""The tool-call parsers on outputs shaped like the models' own (Hermes/Qwen, Llama 3.1
JSON, Mistral, pythonic): text before the calls, several calls, malformed output read as
plain content; and the streaming reader gives back the same content and calls as the
whole-output parse, however the text is cut into pieces."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.server.tools.calls import Extracted
from kvpool.server.tools.forced import CallArrayStream, NamedStream
from kvpool.server.tools.parsers import PARSERS, tool_parser
from kvpool.server.tools.stream import ParserStream
from kvpool.server.tools.tool_text import ToolText

HERMES_TWO = ('Let me look that up.\n<tool_call>\n{"name": "get_weather", "arguments": '
              '{"city": "Paris", "unit": "celsius"}}\n</tool_call>\n<tool_call>\n'
              '{"name": "get_time", "arguments": {"zone": "Europe/Paris"}}\n</tool_call>')
CASES = {  # parser -> [(output, content, [(name, arguments)])]
    "hermes": [
        (HERMES_TWO, "Let me look that up.\n",
         [("get_weather", {"city": "Paris", "unit": "celsius"}),
          ("get_time", {"zone": "Europe/Paris"})]),
        ('<tool_call>\n{"name": "f", "arguments": {"q": "a < b"}}', None, [("f", {"q": "a < b"})]),
        ("The answer is 42.", "The answer is 42.", []),
        ('Sure <tool_call>{"name": "f", "arguments": {"x": 1</tool_call>',
         'Sure <tool_call>{"name": "f", "arguments": {"x": 1</tool_call>', []),
        ('<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>',
         []),
    ],
    "llama3_json": [
        ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', None,
         [("get_weather", {"city": "Paris"})]),
        ('{"name": "a", "parameters": {"x": [1, 2]}}; {"name": "b", "arguments": {}}', None,
         [("a", {"x": [1, 2]}), ("b", {})]),
        ('It is sunny. {"name": "a", "parameters": {}}',
         'It is sunny. {"name": "a", "parameters": {}}', []),
        ('{"name": "a", "parameters": {"x": ', '{"name": "a", "parameters": {"x": ', []),
        ('{"not": "a call"}', '{"not": "a call"}', []),
    ],
    "mistral": [
        ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
         '{"name": "get_time", "arguments": {}}]', None,
         [("get_weather", {"city": "Paris"}), ("get_time", {})]),
        ('Checking.[TOOL_CALLS]get_weather{"city": "Rome"}[TOOL_CALLS]get_time[ARGS]{}',
         "Checking.", [("get_weather", {"city": "Rome"}), ("get_time", {})]),
        ("No tools needed.", "No tools needed.", []),
        ('[TOOL_CALLS][{"name": "x", "arguments": ', '[TOOL_CALLS][{"name": "x", "arguments": ',
         []),
    ],
    "pythonic": [
        ("[get_weather(city='San Francisco', metric='celsius'), get_time(zone=\"UTC\")]", None,
         [("get_weather", {"city": "San Francisco", "metric": "celsius"}),
          ("get_time", {"zone": "UTC"})]),
        ("<|python_start|>[search(q='a]b', n=3, exact=true, tags=None)]<|python_end|>", None,
         [("search", {"q": "a]b", "n": 3, "exact": True, "tags": None})]),
        ("[f(x=__import__('os').system('true'))]", "[f(x=__import__('os').system('true'))]",
         []),
        ("[f(1, 2)]", "[f(1, 2)]", []),
        ("I would call [f(x=1)] here.", "I would call [f(x=1)] here.", []),
        ("[f(x=1)", "[f(x=1)", []),
    ],
}
ALL = [(name, *case) for name, cases in CASES.items() for case in cases]


def shaped(calls) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in calls]


def test_every_vllm_parser_name_is_here():
    assert {"hermes", "llama3_json", "mistral", "pythonic"} <= set(PARSERS)
    with pytest.raises(ValueError, match="hermes"):
        tool_parser("nope")


@pytest.mark.parametrize("name, output, content, calls", ALL)
def test_whole_output(name, output, content, calls):
    got = tool_parser(name).extract(output)
    assert got.content == content
    assert shaped(got.calls) == calls
    assert len({c.id for c in got.calls}) == len(got.calls)
    if name == "mistral":  # Mistral's templates accept 9-character alphanumeric ids only
        assert all(len(c.id) == 9 and c.id.isalnum() for c in got.calls)


def join(deltas):
    """Stream deltas -> (content or None, [(id, name, arguments text)]) as a client joins."""
    content, calls = [], {}
    for d in deltas:
        content.append(d.get("content") or "")  # hermes' call deltas: null (tools/stream.py)
        for tc in d.get("tool_calls", ()):
            slot = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
            if "id" in tc:
                assert slot["id"] is None, "one opening delta per call"
                assert tc["type"] == "function" and "name" in tc["function"]
                slot["id"], slot["name"] = tc["id"], tc["function"]["name"]
            else:
                assert slot["id"] is not None, "arguments before the call's opening delta"
            slot["arguments"] += tc["function"].get("arguments", "")
    text = "".join(content)
    return text or None, [(calls[k]["name"], calls[k]["arguments"]) for k in sorted(calls)]


@pytest.mark.parametrize("name, output, content, calls", ALL)
def test_stream_joins_to_the_whole_output_parse(name, output, content, calls):
    rng = random.Random(len(output))
    whole = tool_parser(name).extract(output)
    for _ in range(20):
        reader = ParserStream(tool_parser(name))
        deltas, pos = [], 0
        while pos < len(output):
            step = rng.randint(1, 6)
            deltas += reader.feed(output[pos:pos + step])
            pos += step
        deltas += reader.finish()
        got_content, got_calls = join(deltas)
        assert got_content == (whole.content if whole.calls else output)
        assert got_calls == [(c.name, c.arguments) for c in whole.calls]
        assert reader.called == bool(calls)


def test_content_before_a_call_streams_before_the_call_completes():
    reader = ParserStream(tool_parser("hermes"))
    assert reader.feed("Checking <tool") == [{"content": "Checking "}]  # "<tool" may open one
    assert reader.feed('_call>{"name": "f", "arguments": {}') == []
    out = reader.feed("}</tool_call>")
    assert [list(d["tool_calls"][0]) for d in out] == [["index", "id", "type", "function"],
                                                       ["index", "function"]]
    assert reader.feed(" and more") == [] and reader.finish() == []


def test_parallel_tool_calls_false_keeps_the_first_call():
    reader = ParserStream(tool_parser("hermes"), limit=1)
    _, calls = join(reader.feed(HERMES_TWO) + reader.finish())
    assert [n for n, _ in calls] == ["get_weather"]


def test_forced_outputs_stream_their_arguments_as_generated():
    text = ('[{"name":"a","parameters":{"s":"}\\",]","n":[1,{"k":null}]}},'
            '{"name":"b","parameters":{}}]')
    whole = CallArrayStream.extract(text)
    assert shaped(whole.calls) == [("a", {"s": '}",]', "n": [1, {"k": None}]}), ("b", {})]
    reader, deltas = CallArrayStream(), []
    for ch in text:
        deltas += reader.feed(ch)
    assert join(deltas) == (None, [(c.name, c.arguments) for c in whole.calls])
    cut = '[{"name":"a","parameters":{"s":"x'  # max_tokens hit: NOTE(cut-required)
    assert CallArrayStream.extract(cut) == CallArrayStream.extract("[") == Extracted(None)
    streamed = CallArrayStream()  # the stream sends the call as far as it went
    assert join(streamed.feed(cut) + streamed.finish()) == (None, [("a", '{"s":"x')])
    named = NamedStream("f")
    assert join(named.feed('{"x"') + named.feed(":1}")) == (None, [("f", '{"x":1}')])
    assert NamedStream.extract("f", '{"x":1}').calls[0].arguments == '{"x":1}'


JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.text(
    alphabet=st.sampled_from('ab{}[]()"\\\'\n é'), max_size=8),
    lambda x: st.lists(x, max_size=3) | st.dictionaries(st.text("k}{\"", max_size=3), x,
                                                         max_size=3), max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["hermes", "llama3_json", "mistral", "pythonic"]), JSONS,
       st.lists(st.integers(1, 7), min_size=1, max_size=40))
def test_the_stream_reads_again_only_when_a_top_level_value_closes(name, value, steps):
    """NOTE(closers) in tools/stream.py: ToolText says a call may be complete only at the
    piece whose closing bracket ends a top-level value; brackets in strings, quotes and
    escapes inside them (JSON's, or Python's either quote for pythonic) never count."""
    parser = tool_parser(name)
    arg = repr(value) if name == "pythonic" else json.dumps(value)
    body = f"f(x={arg})" if name == "pythonic" else '{"name": "f", "arguments": {"x": ' + arg + "}}"
    text = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "pythonic": "["}.get(name, "")
    text += body + ("]" if name == "pythonic" else "")
    tail, pos, said = ToolText(parser, ""), 0, []
    for step in steps * (len(text) // sum(steps) + 1):
        if pos >= len(text):
            break
        said.append((pos + step >= len(text), tail.add(text[pos:pos + step])))
        pos += step
    ends = [end for end, closed in said if closed]
    assert ends[-1:] == [True] and tail.depth == 0 and tail.text() == text
    assert len(ends) <= 1 + text.startswith("[TOOL_CALLS]"), said  # its own brackets close


def test_a_long_argument_full_of_brackets_is_read_once_it_closes():
    """The stream read the whole text again at every piece holding a closing bracket: a
    90 000-character argument (a file a coding agent writes) took a second on hermes and 28 s
    on pythonic, on the event loop; now it is read when the call closes."""
    code = "".join("if (x%d) { y = {a: [%d]}; }\n" % (i, i) for i in range(300))
    for name, text in [("hermes", '<tool_call>{"name": "w", "arguments": {"c": ' +
                        json.dumps(code) + "}}</tool_call>"),
                       ("pythonic", "[w(c=" + repr(code) + ")]")]:
        base = type(tool_parser(name))
        reads = []
        spy = type("Spy", (base,), {"extract": lambda self, t: reads.append(t) or
                                    base.extract(self, t)})()
        reader, deltas = ParserStream(spy), []
        for pos in range(0, len(text), 4):
            deltas += reader.feed(text[pos:pos + 4])
        assert join(deltas + reader.finish()) == (None, [("w", json.dumps({"c": code}))])
        assert len(reads) <= 3, len(reads)
