"""``--reasoning-parser granite`` (reasoning_text.py): a thinking that the text markers "Here is
my thought process:" and "Here is my response:" set apart, each several tokens. The streamed
reader against a regex written here, however the text is cut; the reasoning tokens against
each token's span; and a served tiny Granite whose vocabulary spells the markers in two added
tokens each, biased up so that its outputs write them, checked against its raw output."""

from __future__ import annotations

import re

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.runtime.model import load_tokenizer
from kvpool.runtime.model.sampling import SamplingParams
from kvpool.server.choice_reader import ChoiceReader, chat_message
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.reasoning import ReasoningParser, read_reasoning
from tests.runtime.model.helpers import save_hf_model
from tests.server.chat_templates import CHATML, think_dir
from tests.server.helpers import ServerProcess, post_ok, sse_chunks

pytest.importorskip("transformers")

START, END = "Here is my thought process:", "Here is my response:"
HERE = r"(?:Here's|Here is) my "
# the thinking opens only at the output's start; the first response marker ends it
READ = re.compile(HERE + r"thought process:(.*?)(?:" + HERE + r"response:(.*))?\Z", re.S)
BITS = [START, END, "Here's my thought process:", "Here's my response:", START[:9], START[9:],
        END[:13], END[13:], "Here", "H", ":", " a", "b c", "\n"]
PIECES = ("Here is my", "Here's my", " thought process:", " response:")  # added tokens


def reference(text: str) -> tuple[str | None, str | None]:
    """(reasoning, content) of a whole output, read here apart from reasoning_text.py."""
    m = READ.match(text)
    return (None, text) if m is None else (m[1], m[2] or None)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(think_dir(tmp_path_factory.mktemp("granite_tok"), CHATML, False))


def chat(reasoning) -> ParsedRequest:
    return ParsedRequest(kind="chat", model="m", prompt_ids=[1], params=SamplingParams(),
                         stream=True, include_usage=False, cache_salt=None, priority=0,
                         user=None, prompts=([1],), reasoning=reasoning)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), cuts=st.lists(st.integers(0, 120), max_size=8),
       kw=st.sampled_from([{}, {"thinking": True}]), include=st.booleans())
def test_the_stream_reads_the_markers_however_the_text_is_cut(tok, data, cuts, kw, include):
    text = "".join(data.draw(st.lists(st.sampled_from(BITS), max_size=10)))
    req = ReasoningParser("granite", tok).request(kw, include=include)
    thought, answer = reference(text)
    assert req.split(text) == ((thought if include else None), answer)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    reader, deltas = ChoiceReader(chat(req)), []
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        deltas += reader.feed(text[a:b], done=k == len(bounds) - 2)
    assert "".join(d.get("reasoning", "") for d in deltas) == (thought or "" if include else "")
    assert "".join(d.get("content", "") for d in deltas) == (answer or "")
    assert all(v for d in deltas for v in d.values())  # no empty delta


@pytest.mark.parametrize("marker", [END, "Here's my response:"])
@pytest.mark.parametrize("cut", [None, 1, len(START), len(START) + 4])
def test_an_empty_thinking_is_reasoning_empty_whole_and_no_reasoning_delta_streamed(
        tok, marker, cut):
    """NOTE(granite-markers): vLLM's whole answer keeps the empty thinking (reasoning "") and
    its stream sends no delta without text; the streamed content is the whole one's, however
    the text is cut (vLLM's stream sends marker text there instead)."""
    text = START + marker + " X"
    req = ReasoningParser("granite", tok).request({"thinking": True}, include=True)
    assert chat_message(chat(req), text, "stop")[0] == {
        "role": "assistant", "reasoning": "", "content": " X"}
    reader = ChoiceReader(chat(req))
    pieces = [text] if cut is None else [text[:cut], text[cut:]]
    deltas = [d for k, p in enumerate(pieces) for d in reader.feed(p, k == len(pieces) - 1)]
    assert deltas and all(list(d) == ["content"] for d in deltas), deltas
    assert "".join(d["content"] for d in deltas) == " X"


def wholly_inside(tok, ids: list[int]) -> int:
    """The tokens whose text lies wholly between the markers (to the end, unclosed)."""
    spans, at = [], 0
    for t in ids:
        piece = tok.decode([t])
        spans.append((at, at + len(piece)))
        at += len(piece)
    text = tok.decode(ids)
    m = READ.match(text)
    if m is None:
        return 0
    end = m.end(1) if m[2] is not None else len(text)
    return sum(m.start(1) <= a and b <= end for a, b in spans)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), cuts=st.lists(st.integers(0, 60), max_size=6))
def test_usage_counts_the_tokens_wholly_inside_the_thinking(tok, data, cuts):
    """The markers spelled in several tokens each, the ids fed in any chunks."""
    text = "".join(data.draw(st.lists(st.sampled_from(BITS), max_size=10)))
    ids = tok.encode(text, add_special_tokens=False)
    req = ReasoningParser("granite", tok).request({"thinking": True}, include=True)
    state, n = req.counter(), 0
    bounds = sorted({min(c, len(ids)) for c in cuts} | {0, len(ids)})
    for a, b in zip(bounds, bounds[1:]):
        if state:  # as responses.py: a choice whose thinking cannot go on counts no more
            k, state = req.count(ids[a:b], state)
            n += k
    assert n == wholly_inside(tok, ids)


def test_a_budget_is_refused_and_a_grammar_only_while_told_to_think(tok):
    parser = ReasoningParser("granite", tok)
    assert parser.start_id is None and parser.end_id is None
    with pytest.raises(Exception, match="thinking_token_budget: --reasoning-parser granite"):
        read_reasoning(chat(None), {"thinking_token_budget": 5}, parser, ())
    assert read_reasoning(chat(None), {"thinking_token_budget": -1}, parser, ()).reasoning
    spec = object()  # a GrammarSpec: only whether there is one matters here
    assert parser.request({}, include=True).gate(spec) is spec  # the answer from its start
    with pytest.raises(Exception, match="cannot wait for a thinking that a text marker ends"):
        parser.request({"thinking": True}, include=True).gate(spec)


GRANITE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
           "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
           "{% if thinking %}Think first.\n{% endif %}{% endif %}")
ASK = [{"role": "user", "content": "What is two and two?"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("granite")
    save_hf_model(d, "granite", vocab_size=320)
    think_dir(d, GRANITE, PIECES)
    yield from ServerProcess.serving(d, "--reasoning-parser", "granite")


async def piece_ids(url: str) -> list[int]:
    got = [(await post_ok(url + "/tokenize", {"prompt": p, "add_special_tokens": False}))[
        "tokens"] for p in PIECES]
    assert all(len(t) == 1 for t in got)
    return [t[0] for t in got]


def sampled(seed: int, bias: dict, **kw) -> dict:
    return {"seed": seed, "temperature": 1.0, "max_tokens": 16, "n": 2, "logit_bias": bias,
            "chat_template_kwargs": {"thinking": True}, **kw}


def served_count(ids: list[int], here: set[int], thought: int, response: int) -> int:
    """The reasoning tokens of an output whose markers are the added tokens' pairs."""
    if len(ids) < 2 or ids[0] not in here or ids[1] != thought:
        return 0
    for k in range(2, len(ids) - 1):
        if ids[k] in here and ids[k + 1] == response:
            return k - 2
    return len(ids) - 2


async def test_a_served_granite_output_is_read_at_its_markers(served):
    """Raw outputs (/v1/completions on the same prompt ids) against the chat message, the
    stream and usage; two choices a request, so each choice reads and counts its own."""
    ids4 = await piece_ids(served)
    bias = {str(ids4[0]): 9.0, str(ids4[1]): 8.0, str(ids4[2]): 9.0, str(ids4[3]): 8.0}
    prompt = (await post_ok(served + "/tokenize", {"messages": ASK, "chat_template_kwargs": {
        "thinking": True}}))["tokens"]
    both = plain = 0
    for seed in range(0, 16, 2):  # n=2 takes seeds seed and seed + 1
        raw = await post_ok(served + "/v1/completions", {
            "prompt": prompt, "return_token_ids": True, **sampled(seed, bias)})
        body = {"messages": ASK, **sampled(seed, bias)}
        got = await post_ok(served + "/v1/chat/completions", body)
        chunks = await sse_chunks(served + "/v1/chat/completions", {**body, "stream": True})
        tokens = 0
        for c in raw["choices"]:
            i, (thought, answer) = c["index"], reference(c["text"])
            msg = got["choices"][i]["message"]
            assert (msg.get("reasoning"), msg["content"]) == (thought, answer)
            deltas = [k["choices"][0]["delta"] for k in chunks
                      if k["choices"] and k["choices"][0]["index"] == i]
            assert "".join(d.get("reasoning") or "" for d in deltas) == (thought or "")
            assert "".join(d.get("content") or "" for d in deltas) == (answer or "")
            tokens += served_count(c["token_ids"], set(ids4[:2]), ids4[2], ids4[3])
            both += bool(thought and answer)
            plain += thought is None
        assert got["usage"]["completion_tokens_details"] == {"reasoning_tokens": tokens}
    assert both and plain, "the outputs did not both think and answer: the bias needs a look"


async def test_granite_refuses_what_needs_one_end_token(served):
    """A thinking budget: a 400 as in vLLM; a grammar while told to think: a 400 naming why;
    without ``thinking`` the grammar constrains the answer from its first token;
    include_reasoning false hides the thinking."""
    grammar = {"structured_outputs": {"regex": "ok"}}
    async with aiohttp.ClientSession() as s:
        for bad in ({"thinking_token_budget": 4}, grammar):
            r = await s.post(served + "/v1/chat/completions",
                             json={"messages": ASK, **sampled(0, {}), **bad})
            assert r.status == 400, bad
            assert "--reasoning-parser granite" in (await r.json())["error"]["message"]
    off = {**sampled(0, {}), "chat_template_kwargs": {}, **grammar}
    got = await post_ok(served + "/v1/chat/completions", {"messages": ASK, **off})
    assert [c["message"]["content"] for c in got["choices"]] == ["ok", "ok"]
    ids4 = await piece_ids(served)
    bias = {str(ids4[0]): 9.0, str(ids4[1]): 8.0, str(ids4[2]): 9.0, str(ids4[3]): 8.0}
    for seed in range(3):
        body = {"messages": ASK, **sampled(seed, bias)}
        shown = await post_ok(served + "/v1/chat/completions", body)
        hidden = await post_ok(served + "/v1/chat/completions",
                               {**body, "include_reasoning": False})
        assert [(None, c["message"]["content"]) for c in shown["choices"]] == [
            (c["message"]["reasoning"], c["message"]["content"]) for c in hidden["choices"]]
        assert hidden["usage"] == shown["usage"]  # still counted
