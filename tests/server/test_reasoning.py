"""reasoning.py and choice_reader.py without a server: the split of a whole output, the stream
of the same output cut anywhere (hypothesis: its parts join to the split), the token count,
the tool reader behind the reasoning, and the parsers' startup errors on a real tokenizer."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.errors import ConfigError
from kvpool.runtime.model import load_tokenizer
from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.runtime.model.sampling import SamplingParams
from kvpool.server.choice_reader import ChoiceReader, chat_message
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.reasoning import ReasoningParser, with_reasoning
from kvpool.server.tools.hermes import HermesParser
from kvpool.server.tools.request import ToolRequest
from tests.server.chat_templates import CHATML, think_dir

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(think_dir(tmp_path_factory.mktemp("think"), CHATML))


def chat(reasoning=None, tools=None) -> ParsedRequest:
    return ParsedRequest(kind="chat", model="m", prompt_ids=[1], params=SamplingParams(),
                         stream=True, include_usage=False, cache_salt=None, priority=0,
                         user=None, prompts=([1],), tools=tools, reasoning=reasoning)


@pytest.mark.parametrize("text,want", [
    ("<think>plan</think>It is 4.", ("plan", "It is 4.")),
    ("plan</think>It is 4.", ("plan", "It is 4.")),  # the template wrote <think>
    ("still thinking", ("still thinking", None)),  # never closed: all reasoning
    ("</think>", ("", None)),
    ("a<think>b</think>c</think>d", ("ab", "c</think>d")),  # the first end tag ends it
])
def test_split(tok, text, want):
    for name in ("deepseek_r1", "qwen3"):
        req = ReasoningParser(name, tok).request({}, include=True)
        assert req.split(text) == want
        assert ReasoningParser(name, tok).request({}, include=False).split(text) == (None,
                                                                                   want[1])


@pytest.mark.parametrize("kw,opens", [
    ({}, {"deepseek_r1": True, "step3": True, "step5": True, "qwen3": True, "deepseek_v3": False}),
    ({"enable_thinking": False}, {"deepseek_r1": True, "qwen3": False, "deepseek_v3": False}),
    ({"enable_thinking": True}, {"qwen3": True, "deepseek_v3": True}),
    ({"thinking": True}, {"qwen3": True, "deepseek_v3": True}),
])
def test_when_an_output_opens_in_its_thinking(tok, kw, opens):
    """vLLM's rules: deepseek_v3 (DeepSeek V3.1+) thinks only when told to."""
    for name, want in opens.items():
        assert ReasoningParser(name, tok).opens_inside(kw) is want, (name, kw)


def test_qwen3_with_thinking_off_is_all_content_and_its_grammar_starts_at_once(tok):
    off = ReasoningParser("qwen3", tok).request({"enable_thinking": False}, include=True)
    assert off.split("<think>x</think>y") == (None, "<think>x</think>y")
    assert off.grammar_after is None
    on = ReasoningParser("deepseek_r1", tok).request({"enable_thinking": False}, include=True)
    assert on.inside and on.grammar_after == tok.token_to_id("</think>")
    assert with_reasoning(chat(), on).params.response_format is None  # nothing to gate
    spec = GrammarSpec.regex("ok")
    base = chat()
    req = with_reasoning(dataclasses.replace(
        base, params=dataclasses.replace(base.params, response_format=spec)), on)
    assert req.params.response_format.after == on.grammar_after
    assert req.params.response_format.grammar == spec.grammar
    assert with_reasoning(dataclasses.replace(
        base, params=dataclasses.replace(base.params, response_format=spec)),
        off).params.response_format.after is None


PIECES = st.lists(st.sampled_from(["<think>", "</think>", "<", "</", "think", ">", "th", "a",
                                   "b c", "\n"]), max_size=14)


@settings(max_examples=300, deadline=None)
@given(pieces=PIECES, cuts=st.lists(st.integers(0, 80), max_size=6), include=st.booleans())
def test_a_stream_cut_anywhere_joins_to_the_split(tok, pieces, cuts, include):
    text = "".join(pieces)
    req = ReasoningParser("deepseek_r1", tok).request({}, include=include)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    reader = ChoiceReader(chat(req))
    deltas = []
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        deltas += reader.feed(text[a:b], done=k == len(bounds) - 2)
    if len(bounds) == 1:
        deltas += reader.feed("", done=True)
    reasoning, content = req.split(text)
    shown = [d["reasoning"] for d in deltas if "reasoning" in d]
    assert ("".join(shown) if include else None) == reasoning and (include or not shown)
    assert "".join(d.get("content") or "" for d in deltas) == (content or "")
    assert all(v for d in deltas for v in d.values())  # no empty delta


def test_count_stops_at_the_end_tag_and_skips_the_tags(tok):
    req = ReasoningParser("qwen3", tok).request({}, include=True)
    start, end = tok.token_to_id("<think>"), tok.token_to_id("</think>")
    assert req.count([start, 5, 6, 7], True) == (3, True)
    assert req.count([8, end, 9, 10], True) == (1, False)
    assert req.count([], True) == (0, True)
    assert req.count([start, 5, end], False) == (0, False)  # the answer opens none


def test_tool_calls_are_read_from_the_answer_only(tok):
    think = ReasoningParser("qwen3", tok).request({}, include=True)
    tools = ToolRequest(tools=(), choice="auto", parser=HermesParser())
    text = ('<think>call <tool_call>{"name": "no", "arguments": {}}</tool_call>?</think>Sure.'
            '<tool_call>{"name": "get", "arguments": {"a": 1}}</tool_call>')
    message, reason = chat_message(chat(think, tools), text, "stop")
    assert reason == "tool_calls" and message["content"] == "Sure."
    assert message["reasoning"].startswith("call <tool_call>")
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get"]
    reader = ChoiceReader(chat(think, tools))
    deltas = [d for i in range(0, len(text), 7) for d in reader.feed(text[i:i + 7], False)]
    deltas += reader.feed("", True)
    names = [c["function"].get("name") for d in deltas for c in d.get("tool_calls") or ()]
    assert [n for n in names if n] == ["get"] and reader.called


def test_the_parsers_refuse_what_they_cannot_read(tmp_path, tok):
    with pytest.raises(ConfigError, match="use one of deepseek_r1, deepseek_v3, glm45, "
                       "granite, kimi_k2, minimax_m2, mistral, qwen3, seed_oss, step3, step5"):
        ReasoningParser("hunyuan_a13b", tok)
    plain = load_tokenizer(think_dir(tmp_path, CHATML, tags=False))
    with pytest.raises(ConfigError, match="has no <think> / </think> tokens"):
        ReasoningParser("qwen3", plain)


def test_an_assistants_earlier_thinking_reaches_the_template_under_both_names():
    from kvpool.server.chat_messages import message_dict, parse_messages
    from kvpool.errors import RequestError
    for key in ("reasoning", "reasoning_content"):
        msgs = parse_messages([{"role": "user", "content": "q"},
                               {"role": "assistant", "content": "a", key: "thought"}])
        got = message_dict(msgs[1])
        assert got["reasoning"] == got["reasoning_content"] == "thought"
    assert "reasoning" not in message_dict(parse_messages([{"role": "user", "content": "q",
                                                            "reasoning": "x"}])[0])
    with pytest.raises(RequestError, match=r"messages\[0\].reasoning"):
        parse_messages([{"role": "assistant", "content": "a", "reasoning": 3}])


def test_a_reasoning_item_joins_the_assistant_message_next_to_it():
    from kvpool.errors import RequestError
    from kvpool.server.responses_items import item_messages
    thought = {"type": "reasoning", "summary": [],
               "content": [{"type": "reasoning_text", "text": "plan"}]}
    answer = {"type": "message", "role": "assistant", "content": "It is 4."}
    ask = {"role": "user", "content": "2+2?"}
    assert item_messages([ask, thought, answer], "input") == [
        ask, {"role": "assistant", "content": "It is 4.", "reasoning": "plan"}]
    summary = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}
    assert item_messages([ask, summary, answer, answer], "input")[1:] == [
        {"role": "assistant", "content": "It is 4.", "reasoning": "s"},
        {"role": "assistant", "content": "It is 4."}]  # a second answer is a turn of its own
    with pytest.raises(RequestError, match=r"input\[0\].encrypted_content"):
        item_messages([{**thought, "encrypted_content": "gAAA"}], "input")


def test_a_thinking_budget_needs_the_parser_and_binds_only_a_thinking_output(tok):
    from kvpool.errors import RequestError
    from kvpool.server.reasoning import read_reasoning
    with pytest.raises(RequestError, match="thinking_token_budget: needs a reasoning model"):
        read_reasoning(chat(), {"thinking_token_budget": 5}, None, ())
    assert read_reasoning(chat(), {"thinking_token_budget": -1}, None, ()) == chat()
    ids = (tok.token_to_id("<think>"), tok.token_to_id("</think>"))
    qwen = ReasoningParser("qwen3", tok)
    got = read_reasoning(chat(), {"thinking_token_budget": 5}, qwen, ())
    assert got.params.think_budget == (5, *ids, 0) and got.reasoning.inside
    off = read_reasoning(chat(), {"thinking_token_budget": 5}, qwen,
                         (("enable_thinking", False),))
    assert off.params.think_budget is None and not off.reasoning.inside
    assert read_reasoning(chat(), {"include_reasoning": False}, qwen, ()).reasoning.include is False


def test_anthropic_thinking_is_the_chat_budget_and_an_earlier_thought_the_reasoning():
    from kvpool.server.anthropic_input import messages_to_chat
    from kvpool.server.field_policy import FieldPolicy
    body = {"model": "m", "max_tokens": 2048,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": "2+2?"},
                         {"role": "assistant", "content": [
                             {"type": "thinking", "thinking": "add ", "signature": "s"},
                             {"type": "thinking", "thinking": "them", "signature": "s"},
                             {"type": "redacted_thinking", "data": "x"},
                             {"type": "text", "text": "4"}]},
                         {"role": "user", "content": "and 3+3?"}]}
    chat, _ = messages_to_chat(body, FieldPolicy(False), thinks=True)
    assert chat["thinking_token_budget"] == 1024
    plain, _ = messages_to_chat(body, FieldPolicy(False))  # no parser: no budget (no 400)
    assert "thinking_token_budget" not in plain
    assert chat["messages"][1] == {"role": "assistant", "content": "4", "reasoning": "add them"}
    off, _ = messages_to_chat({**body, "thinking": {"type": "disabled"}}, FieldPolicy(False))
    assert "thinking_token_budget" not in off and off["reasoning_effort"] == "none"
