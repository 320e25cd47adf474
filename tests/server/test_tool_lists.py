"""The tool-call parsers of granite, jamba / hunyuan_a13b and phi4_mini_json (one JSON array
of calls after a marker, kvpool/server/tools/json_list.py) and of longcat, internlm, granite4
and ernie45 (hermes' blocks under other tags or the same). Each output is written here from
the calls, independent of the parsers: the whole-output parse gives back the calls written,
and the streaming reader the same, however the text is cut."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.server.tools.parsers import PARSERS, tool_parser
from kvpool.server.tools.stream import ParserStream
from tests.server.test_tool_families import NAMES, assert_read_once_over, check_both
from tests.server.test_tool_parsers import join

LISTS = ("granite", "granite31", "jamba", "hunyuan_a13b", "phi4_mini_json")
BLOCKS = ("longcat", "internlm", "granite4", "ernie45")


def write(family: str, calls: list[tuple[str, dict]]) -> str:
    """The calls as the family's model writes them."""
    objs = [{"name": n, ("parameters" if family == "internlm" else "arguments"): a}
            for n, a in calls]
    array = json.dumps(objs, ensure_ascii=False)
    if family in LISTS:
        return {"granite": "<|tool_call|>" + array, "granite31": "<tool_call> " + array,
                "jamba": f"<tool_calls>{array}</tool_calls>",
                "hunyuan_a13b": f"<tool_calls>\n{array}\n</tool_calls>",
                "phi4_mini_json": "functools" + array}[family]
    opening, closing = {"longcat": ("<longcat_tool_call>", "</longcat_tool_call>"),
                        "internlm": ("<|action_start|><|plugin|>\n", "<|action_end|>\n")
                        }.get(family, ("<tool_call>\n", "\n</tool_call>\n"))
    return "".join(opening + json.dumps(o, ensure_ascii=False) + closing for o in objs)


def parser(family: str):
    return tool_parser("granite" if family == "granite31" else family)


ARGS = st.dictionaries(st.text(max_size=5), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text("ab{}[]\"\\,: ", max_size=6),
    lambda x: st.lists(x, max_size=3) | st.dictionaries(st.text("kq", max_size=2), x,
                                                        max_size=2), max_leaves=6),
    max_size=3)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(LISTS + BLOCKS),
       st.lists(st.tuples(st.sampled_from(NAMES), ARGS), min_size=1, max_size=3),
       st.text("Let me look.", max_size=12), st.lists(st.integers(0, 400), max_size=8))
def test_each_family_reads_back_its_calls(family, calls, lead, cuts):
    check_both(parser(family), lead + write(family, calls), lead or None, calls, cuts)


@pytest.mark.parametrize("family, text, calls", [
    ("jamba", '<tool_calls>[{"name": "f", "arguments": {}}, 5, {"name": "g"}]</tool_calls>',
     ["f"]),  # the array's calls up to the first element that is no call
    ("granite", '<|tool_call|>[{"name": "f", "arguments": {}}, {"name": ', ["f"]),  # cut short
    ("granite", "<tool_call> {\"name\": \"f\"}", []),  # no array: plain content
    ("phi4_mini_json", "import functools\nfunctools.cache", []),
    ("phi4_mini_json", 'functools[{"arguments": {}}]', []),  # no name
    ("jamba", "<tool_calls>[" + "[" * 5000, []),
    ("internlm", '<|action_start|><|plugin|>{"name": "f", "parameters": [1]}<|action_end|>',
     []),  # arguments that are no object
    ("longcat", '<longcat_tool_call>{"name": "f", "arguments": {}}', ["f"]),  # stopped
])
def test_malformed_outputs_are_content_or_stop_at_the_first_bad_call(family, text, calls):
    whole = tool_parser(family).extract(text)
    assert [c.name for c in whole.calls] == calls
    if not calls:
        assert whole.content == text
    reader = ParserStream(tool_parser(family))
    got = join([d for i in range(0, len(text), 3) for d in reader.feed(text[i:i + 3])]
               + reader.finish())
    assert got == (whole.content, [(c.name, c.arguments) for c in whole.calls])


def test_a_stream_sends_each_call_of_an_array_as_its_object_closes():
    """Only braces count as brackets for these formats, so the first call goes out when its
    object closes, not when the whole array does."""
    text = write("granite", [("f", {"x": [1, 2]}), ("g", {})])
    first = text.index("}}") + 2
    reader = ParserStream(tool_parser("granite"))
    early = reader.feed(text[:first])
    assert join(early)[1] == [("f", '{"x": [1, 2]}')]
    assert join(early + reader.feed(text[first:]) + reader.finish())[1][1] == ("g", "{}")


@pytest.mark.parametrize("family", ["granite", "jamba", "phi4_mini_json", "internlm"])
def test_each_reading_goes_on_past_the_last_call_read(family):
    """NOTE(resume): an array of 300 calls (a small model looping) is read once over: each
    reading starts past the last element read, so the readings look at about the text's
    length in all, not at the text's length once per call."""
    calls = [("f", {"x": str(i)}) for i in range(300)]
    assert_read_once_over(family, write(family, calls), calls)


def test_the_names_are_vllms():
    assert {"granite", "granite4", "jamba", "hunyuan_a13b", "phi4_mini_json", "internlm",
            "longcat", "ernie45"} <= set(PARSERS)
    assert tool_parser("hunyuan_a13b").markers == tool_parser("jamba").markers
