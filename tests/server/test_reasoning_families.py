"""The reasoning parsers beyond the think-tag basics (reasoning.py's table): each family's
tags and opening rule, Mistral's thinking that the answer opens (again and again), special
tags kept in the text, and a served model read by ``--reasoning-parser mistral``, checked
against its raw output split by a reader written here."""

from __future__ import annotations

import json

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.runtime.model import load_tokenizer
from kvpool.runtime.model.sampling import SamplingParams
from kvpool.server.choice_reader import ChoiceReader
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.reasoning import PARSERS, ReasoningParser, read_reasoning
from tests.runtime.model.helpers import save_hf_model
from tests.server.chat_templates import CHATML, think_dir
from tests.server.helpers import ServerProcess, post_ok, sse_chunks

pytest.importorskip("transformers")

TAGS = ("<think>", "</think>", "<seed:think>", "</seed:think>", "[THINK]", "[/THINK]")
ASK = [{"role": "user", "content": "What is two and two?"}]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(think_dir(tmp_path_factory.mktemp("tags"), CHATML, TAGS))


def chat(reasoning=None) -> ParsedRequest:
    return ParsedRequest(kind="chat", model="m", prompt_ids=[1], params=SamplingParams(),
                         stream=True, include_usage=False, cache_salt=None, priority=0,
                         user=None, prompts=([1],), reasoning=reasoning)


def segments(text: str, name: str, inside: bool) -> list[tuple[bool, str]]:
    """``text``'s segments in order under parser ``name``, each (thinking, its text), read
    here apart from reasoning.py: tags end and (Mistral) open segments; a start tag inside
    a thinking segment is dropped."""
    fam, out, i = PARSERS[name], [], 0
    while i <= len(text):
        tag = fam.end if inside else fam.start
        j = text.find(tag, i) if inside or fam.reopens else -1
        seg = text[i:] if j < 0 else text[i:j]
        out.append((inside, seg.replace(fam.start, "") if inside else seg))
        if j < 0:
            break
        i, inside = j + len(tag), not inside
    return out


def reference(text: str, name: str, inside: bool) -> tuple[list[str], list[str]]:
    """The reasoning and answer segments of ``text`` under parser ``name``."""
    segs = segments(text, name, inside)
    return [s for t, s in segs if t], [s for t, s in segs if not t]


@pytest.mark.parametrize("kw,opens", [
    ({}, {"glm45": True, "kimi_k2": True, "minimax_m2": True, "seed_oss": True,
          "mistral": False}),
    ({"thinking": False}, {"glm45": False, "kimi_k2": False, "seed_oss": True}),
    ({"enable_thinking": False}, {"glm45": False, "kimi_k2": False, "seed_oss": False,
                                  "minimax_m2": True}),
    ({"enable_thinking": False, "thinking": True}, {"glm45": True, "kimi_k2": True}),
    ({"thinking": None}, {"glm45": True, "kimi_k2": True}),  # null is not told
    ({"enable_thinking": True}, {"mistral": False}),
])
def test_when_each_family_opens_in_its_thinking(tok, kw, opens):
    for name, want in opens.items():
        assert ReasoningParser(name, tok).opens_inside(kw) is want, (name, kw)


@pytest.mark.parametrize("text,want", [
    ("a[THINK]b[/THINK]c[THINK]d", ("bd", "ac")),
    ("[THINK]plan[/THINK]It is 4.", ("plan", "It is 4.")),
    ("It is 4.", (None, "It is 4.")),  # no thinking written: no reasoning at all
    ("x[/THINK]y", (None, "x[/THINK]y")),  # an end tag in the answer is text
    ("[THINK]a[THINK]b", ("ab", None)),  # never closed
    ("x[THINK]", ("", "x")),  # opened, nothing thought yet
])
def test_mistral_thinks_where_the_answer_opens_it(tok, text, want):
    req = ReasoningParser("mistral", tok).request({}, include=True)
    assert req.split(text) == want
    assert ReasoningParser("mistral", tok).request({}, include=False).split(text) == (
        None, want[1])


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(PARSERS)), data=st.data(),
       cuts=st.lists(st.integers(0, 90), max_size=6), kw=st.sampled_from(
           [{}, {"enable_thinking": False}, {"thinking": True}]))
def test_every_family_streams_what_it_splits(tok, name, data, cuts, kw):
    fam = PARSERS[name]
    bits = [fam.start, fam.end, fam.start[:3], fam.end[:2], fam.end[2:], "a", "b c", "<", "["]
    text = "".join(data.draw(st.lists(st.sampled_from(bits), max_size=14)))
    req = ReasoningParser(name, tok).request(kw, include=True)
    thought, answer = reference(text, name, req.inside)
    assert req.split(text) == (("".join(thought), "".join(answer) or None) if thought
                               else (None, text))
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    reader, deltas = ChoiceReader(chat(req)), []
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        deltas += reader.feed(text[a:b], done=k == len(bounds) - 2)
    assert "".join(d.get("reasoning", "") for d in deltas) == "".join(thought)
    assert "".join(d.get("content", "") for d in deltas) == "".join(answer)
    assert all(v for d in deltas for v in d.values())  # no empty delta


def test_mistral_counts_every_thinking_the_answer_opens(tok):
    req = ReasoningParser("mistral", tok).request({}, include=True)
    start, end = tok.token_to_id("[THINK]"), tok.token_to_id("[/THINK]")
    assert req.count([5, start, 6, 7, end, 8, start, 9], False) == (3, True)
    assert req.count([10, end, 11], True) == (1, False)


def test_special_tags_stay_in_the_text_and_mistral_budgets_the_thinkings_it_opens(tmp_path):
    special = load_tokenizer(think_dir(tmp_path, CHATML, ("[THINK]", "[/THINK]"), True))
    parser = ReasoningParser("mistral", special)
    assert parser.keeps_special_tokens
    assert read_reasoning(chat(), {}, parser, ()).params.skip_special_tokens is False
    sent = read_reasoning(chat(), {"skip_special_tokens": True}, parser, ())
    assert sent.params.skip_special_tokens is True  # the client's choice stands
    got = read_reasoning(chat(), {"thinking_token_budget": 8}, parser, ())
    assert got.params.think_budget == (8, parser.start_id, parser.end_id, 1)
    plain = ReasoningParser("qwen3", load_tokenizer(think_dir(tmp_path / "q", CHATML)))
    assert read_reasoning(chat(), {"thinking_token_budget": 8}, plain, (
        ("enable_thinking", False),)).params.think_budget is None  # it never thinks


@pytest.fixture(scope="module")
def mistral_served(tmp_path_factory):
    d = tmp_path_factory.mktemp("magistral")
    save_hf_model(d, "qwen2", vocab_size=320)
    think_dir(d, CHATML, ("[THINK]", "[/THINK]"), special=True)
    yield from ServerProcess.serving(d, "--reasoning-parser", "mistral")


async def post(url: str, path: str, body: dict) -> dict:
    return await post_ok(url + path, body)


async def test_a_served_mistral_output_is_split_at_every_tag(mistral_served):
    """Raw outputs (/v1/completions, special tokens kept) against the chat route's message,
    stream and reasoning token count, two choices a request; both tags biased up so the
    outputs open and close thinking in their answers."""
    url = mistral_served
    ids = [(await post(url, "/tokenize", {"prompt": t, "add_special_tokens": False}))["tokens"]
           for t in ("[THINK]", "[/THINK]")]
    start, end = ids[0][0], ids[1][0]
    prompt = (await post(url, "/tokenize", {"messages": ASK}))["tokens"]
    both = 0
    for seed in range(4):
        body = {"seed": seed, "temperature": 1.0, "max_tokens": 40, "n": 2,
                "logit_bias": {str(start): 5.0, str(end): 5.0}}
        raw = await post(url, "/v1/completions", {"prompt": prompt, "return_token_ids": True,
                                                  "skip_special_tokens": False, **body})
        got = await post(url, "/v1/chat/completions", {"messages": ASK, **body})
        chunks = await sse_chunks(url + "/v1/chat/completions",
                                  {"messages": ASK, "stream": True, **body})
        tokens = 0
        for c in raw["choices"]:
            i, text = c["index"], c["text"]
            thought, answer = reference(text, "mistral", False)
            msg = got["choices"][i]["message"]
            assert msg.get("reasoning") == ("".join(thought) if thought else None)
            assert msg["content"] == ("".join(answer) or None if thought else text)
            deltas = [k["choices"][0]["delta"] for k in chunks
                      if k["choices"] and k["choices"][0]["index"] == i]
            assert "".join(d.get("reasoning") or "" for d in deltas) == "".join(thought)
            assert "".join(d.get("content") or "" for d in deltas) == "".join(answer)
            tokens += _thinking_tokens(c["token_ids"], start, end)
            both += len(thought) > 0 and any(answer)
        assert got["usage"]["completion_tokens_details"] == {"reasoning_tokens": tokens}
    assert both, "no output both thought and answered: the bias needs a look"


def _thinking_tokens(ids: list[int], start: int, end: int) -> int:
    n, inside = 0, False
    for t in ids:
        if t in (start, end):
            inside = t == start
        else:
            n += inside
    return n


async def test_a_served_mistral_budget_is_shared_by_every_thinking(mistral_served):
    """[THINK] biased up and [/THINK] down, so a thinking runs on unless the budget ends it:
    the first thinking gets the budget, and each one after it is closed at once."""
    url, budget = mistral_served, 3
    start, end = [(await post(url, "/tokenize", {"prompt": t, "add_special_tokens": False}))[
        "tokens"][0] for t in ("[THINK]", "[/THINK]")]
    cut = 0
    for seed in range(3):
        body = {"messages": ASK, "seed": seed, "temperature": 1.0, "max_tokens": 30, "n": 2,
                "logit_bias": {str(start): 6.0, str(end): -20.0}, "return_token_ids": True,
                "thinking_token_budget": budget}
        got = await post(url, "/v1/chat/completions", body)
        spent = 0
        for c in got["choices"]:
            ids = c["token_ids"]
            n = _thinking_tokens(ids, start, end)
            assert n <= budget, ids
            spent += n
            assert all(t == end for t in _after_spent(ids, start, end, budget)), ids
            cut += n == budget and end in ids
        assert got["usage"]["completion_tokens_details"] == {"reasoning_tokens": spent}
    assert cut, "no thinking reached the budget: the bias needs a look"


def _after_spent(ids: list[int], start: int, end: int, budget: int) -> list[int]:
    """The token after each start tag that opens a thinking once ``budget`` is spent."""
    out, n, inside = [], 0, False
    for k, t in enumerate(ids):
        if not inside:
            inside = t == start
            if inside and n >= budget and k + 1 < len(ids):
                out.append(ids[k + 1])
        elif t == end:
            inside = False
        else:
            n += t != start
    return out


async def test_a_streamed_response_keeps_mistrals_order(mistral_served):
    """/v1/responses streamed under mistral: its items follow the output, a message for each
    run of answer and a reasoning item for each run of thinking, in the order written, their
    texts the raw output's (answer text before a [THINK] included)."""
    url = mistral_served
    start, end = [(await post(url, "/tokenize", {"prompt": t, "add_special_tokens": False}))[
        "tokens"][0] for t in ("[THINK]", "[/THINK]")]
    prompt = (await post(url, "/tokenize", {"messages": ASK}))["tokens"]
    answer_first = 0
    for seed in range(6):
        body = {"seed": seed, "temperature": 1.0, "logit_bias": {str(start): 4.0,
                                                                 str(end): 5.0}}
        raw = await post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 40,
                                                  "skip_special_tokens": False, **body})
        want = _runs(raw["choices"][0]["text"])
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/responses", json={
                "input": ASK[0]["content"], "max_output_tokens": 40, "stream": True,
                **body}) as r:
            assert r.status == 200, await r.text()
            events = [json.loads(line.removeprefix("data: "))
                      for line in (await r.text()).splitlines() if line.startswith("data: ")]
        got = [(e["item"]["type"], e["item"]["content"][0]["text"]) for e in events
               if e["type"] == "response.output_item.done"]
        assert got == want, (seed, raw["choices"][0]["text"])
        answer_first += len(want) > 1 and want[0][0] == "message"
    assert answer_first, "no output answered before it thought: the bias needs a look"


def _runs(text: str) -> list[tuple[str, str]]:
    """The output's non-empty segments as Responses items: runs of one kind joined."""
    out: list[tuple[str, str]] = []
    for thinking, seg in segments(text, "mistral", False):
        kind = "reasoning" if thinking else "message"
        if seg and out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + seg)
        elif seg:
            out.append((kind, seg))
    return out
