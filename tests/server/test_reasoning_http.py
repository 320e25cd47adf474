"""``--reasoning-parser qwen3`` on a real ``kvpool serve DIR`` on 127.0.0.1: a tiny random
Qwen2 whose tokenizer has ``<think>`` / ``</think>`` and whose template, told
``enable_thinking: false``, closes an empty think block as Qwen3's does.

The chat answer is checked against the same prompt's raw output from /v1/completions (no
parser there) with the same seed: message.reasoning and content are that text split at
``</think>``; the stream's deltas join to the same; usage counts the tokens before the tag. A
grammar waits for the tag (NOTE(think-grammar)); include_reasoning false hides the reasoning;
enable_thinking false makes every token content."""

from __future__ import annotations

import json
import re

import aiohttp
import pytest

from kvpool.server import serve
from tests.runtime.model.helpers import save_hf_model
from tests.server.chat_templates import think_dir
from tests.server.helpers import ServerProcess, post_ok, sse_chunks

pytest.importorskip("transformers")

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
            "{% endif %}{% endif %}")
ASK = [{"role": "user", "content": "What is two and two?"}]
SEEDS = range(6)


def think_model(d, tags: bool = True):
    """A tiny Qwen2 directory whose tokenizer has the think tags (``tags``)."""
    save_hf_model(d, "qwen2", vocab_size=320)
    return think_dir(d, TEMPLATE, tags)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = think_model(tmp_path_factory.mktemp("think_model"))
    yield from ServerProcess.serving(d, "--reasoning-parser", "qwen3")


async def post(url: str, path: str, body: dict) -> dict:
    return await post_ok(url + path, body)


async def end_id(url: str) -> int:
    got = await post(url, "/tokenize", {"prompt": "</think>", "add_special_tokens": False})
    assert len(got["tokens"]) == 1
    return got["tokens"][0]


def sampled(seed: int, bias: dict, **kw) -> dict:
    return {"seed": seed, "temperature": 1.0, "max_tokens": 40, "logit_bias": bias, **kw}


async def raw_outputs(url: str, seed: int, bias: dict, n: int) -> list[tuple[str, list[int]]]:
    """The chat prompt's ``n`` outputs with no parser: /v1/completions on its ids, same
    sampling."""
    ids = (await post(url, "/tokenize", {"messages": ASK}))["tokens"]
    got = await post(url, "/v1/completions", {"prompt": ids, "return_token_ids": True, "n": n,
                                              **sampled(seed, bias)})
    return [(c["text"], c["token_ids"]) for c in got["choices"]]


async def test_the_answer_is_the_raw_output_split_at_the_end_tag(served):
    """Two choices per request, so each choice's reader and count are its own."""
    end = await end_id(served)
    start = (await post(served, "/tokenize", {"prompt": "<think>",
                                              "add_special_tokens": False}))["tokens"][0]
    bias = {str(end): 4.0}  # the tag comes now and then, so outputs split in both ways
    split = 0
    for seed in SEEDS:
        raw = await raw_outputs(served, seed, bias, 2)
        body = {"messages": ASK, "n": 2, **sampled(seed, bias)}
        got = await post(served, "/v1/chat/completions", body)
        chunks = await sse_chunks(served + "/v1/chat/completions", {**body, "stream": True})
        tokens = 0
        for i, (text, ids) in enumerate(raw):
            reasoning, tag, content = text.replace("<think>", "").partition("</think>")
            msg = got["choices"][i]["message"]
            assert msg["reasoning"] == text.partition("</think>")[0].replace("<think>", "")
            assert msg["content"] == ((content or None) if tag else None)
            thought = ids[:ids.index(end)] if end in ids else ids
            tokens += sum(t != start for t in thought)  # the tags are not counted
            deltas = [c["choices"][0]["delta"] for c in chunks
                      if c["choices"] and c["choices"][0]["index"] == i]
            assert "".join(d.get("reasoning") or "" for d in deltas) == reasoning
            assert "".join(d.get("content") or "" for d in deltas) == (content if tag else "")
            split += bool(tag and reasoning and content)
        assert got["usage"]["completion_tokens_details"] == {"reasoning_tokens": tokens}
    assert split, "no seed wrote reasoning, the tag and an answer: the bias needs a look"


async def test_a_grammar_constrains_only_the_answer(served):
    end = await end_id(served)
    answered = 0
    for seed in SEEDS:
        body = {"messages": ASK, "structured_outputs": {"regex": "(yes|no)"},
                **sampled(seed, {str(end): 4.0}, max_tokens=60)}
        msg = (await post(served, "/v1/chat/completions", body))["choices"][0]["message"]
        if msg["content"] is None:  # still thinking at max_tokens: nothing to constrain yet
            continue
        answered += 1
        assert msg["content"] in ("yes", "no")
        assert not re.fullmatch("(yes|no)", msg["reasoning"])  # free text, not the grammar's
    assert answered


async def test_include_reasoning_false_hides_it_and_thinking_off_is_all_content(served):
    end = await end_id(served)
    body = {"messages": ASK, **sampled(1, {str(end): 4.0}), "include_reasoning": False}
    msg = (await post(served, "/v1/chat/completions", body))["choices"][0]["message"]
    assert msg["reasoning"] is None
    chunks = await sse_chunks(served + "/v1/chat/completions", {**body, "stream": True})
    assert not any(c["choices"][0]["delta"].get("reasoning") for c in chunks if c["choices"])
    hidden = {**body, "structured_outputs": {"regex": "(yes|no)"}, "max_tokens": 60}
    answers = [(await post(served, "/v1/chat/completions", {**hidden, "seed": s}))[
        "choices"][0]["message"]["content"] for s in SEEDS]
    assert set(answers) - {None} and set(answers) <= {None, "yes", "no"}  # still after it
    off = {"messages": ASK, "chat_template_kwargs": {"enable_thinking": False},
           "structured_outputs": {"regex": "ok"}, **sampled(2, {})}
    got = await post(served, "/v1/chat/completions", off)
    assert got["choices"][0]["message"]["content"] == "ok"  # the grammar from the first token
    assert got["choices"][0]["message"]["reasoning"] is None
    assert got["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


async def test_a_forced_tool_call_follows_the_reasoning(served):
    end = await end_id(served)
    tool = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
        "additionalProperties": False}}}
    body = {"messages": ASK, "tools": [tool], "tool_choice": "required",
            **sampled(3, {str(end): 100.0}, max_tokens=200)}
    msg = (await post(served, "/v1/chat/completions", body))["choices"][0]["message"]
    assert msg["reasoning"] == ""  # the tag came first, then the call the grammar forced
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["add"]


def test_a_model_without_the_tags_does_not_start(tmp_path, capsys):
    d = think_model(tmp_path / "m", tags=False)
    assert serve.main([str(d), "--port", "0", "--num-host-blocks", "0",
                       "--reasoning-parser", "deepseek_r1"]) == 2
    assert "--reasoning-parser deepseek_r1: the model's tokenizer has no <think> / </think>" \
        in capsys.readouterr().err


async def split_seed(url: str, bias: dict) -> dict:
    """The chat answer of the first seed whose output holds reasoning, the tag and an answer."""
    for seed in SEEDS:
        got = await post(url, "/v1/chat/completions", {"messages": ASK, **sampled(seed, bias)})
        msg = got["choices"][0]["message"]
        if msg["reasoning"] and msg["content"]:
            return {"seed": seed, **msg, "usage": got["usage"]}
    raise AssertionError("no seed split")


def sse_events(raw: str) -> list[dict]:
    return [json.loads(line.removeprefix("data: ")) for line in raw.splitlines()
            if line.startswith("data: ")]


async def test_responses_put_a_reasoning_item_before_the_message(served):
    bias = {str(await end_id(served)): 4.0}
    want = await split_seed(served, bias)
    body = {"input": ASK[0]["content"], "seed": want["seed"], "temperature": 1.0,
            "max_output_tokens": 40, "logit_bias": bias}
    got = await post(served, "/v1/responses", body)
    kinds = [item["type"] for item in got["output"]]
    assert kinds == ["reasoning", "message"], got["output"]
    assert got["output"][0]["content"] == [{"type": "reasoning_text", "text": want["reasoning"]}]
    assert got["output"][1]["content"][0]["text"] == want["content"]
    tokens = want["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert got["usage"]["output_tokens_details"]["reasoning_tokens"] == tokens
    async with aiohttp.ClientSession() as s, \
            s.post(served + "/v1/responses", json={**body, "stream": True}) as r:
        events = sse_events(await r.text())
    deltas = {k: "".join(e["delta"] for e in events if e["type"] == f"response.{k}.delta")
              for k in ("reasoning_text", "output_text")}
    assert deltas == {"reasoning_text": want["reasoning"], "output_text": want["content"]}
    done = [e["item"]["type"] for e in events if e["type"] == "response.output_item.done"]
    assert done == ["reasoning", "message"]


async def test_messages_open_with_a_signed_thinking_block(served):
    ask = [{"role": "user", "content": "What is 2+2?"}]  # ASK's greedy bytes are no UTF-8 text
    body = {"model": "m", "max_tokens": 24, "temperature": 0.0, "messages": ask}
    chat = await post(served, "/v1/chat/completions", {
        "messages": ask, "max_tokens": 24, "temperature": 0.0})
    thought = chat["choices"][0]["message"]["reasoning"]
    assert thought  # some text to think (lone bytes held back are none: NOTE(prompt-context))
    async with aiohttp.ClientSession() as s:
        r = await s.post(served + "/v1/messages", json={**body, "model": chat["model"]})
        got = await r.json()
        assert got["content"][0]["type"] == "thinking", got
        assert got["content"][0]["thinking"] == thought and got["content"][0]["signature"]
        r = await s.post(served + "/v1/messages", json={**body, "model": chat["model"],
                                                        "stream": True})
        events = sse_events(await r.text())
        off = await s.post(served + "/v1/messages", json={
            **body, "model": chat["model"], "thinking": {"type": "disabled"}})
        assert [b["type"] for b in (await off.json())["content"]] == ["text"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == thought
    assert deltas[-1]["type"] == "signature_delta"  # then the block stops


async def test_a_thinking_budget_ends_the_thinking_after_that_many_tokens(served):
    for budget in (0, 3, 9):
        body = {"messages": ASK, **sampled(4, {}, max_tokens=30), "thinking_token_budget": budget,
                "structured_outputs": {"regex": "(yes|no)"}}
        got = await post(served, "/v1/chat/completions", body)
        msg = got["choices"][0]["message"]
        assert got["usage"]["completion_tokens_details"] == {"reasoning_tokens": budget}
        assert msg["content"] in ("yes", "no")  # the forced tag let the grammar start
    async with aiohttp.ClientSession() as s:
        for bad in (-2, 1.5, True, "3"):
            r = await s.post(served + "/v1/chat/completions", json={
                "messages": ASK, "max_tokens": 4, "thinking_token_budget": bad})
            assert r.status == 400 and (await r.json())["error"]["param"] == \
                "thinking_token_budget"
        r = await s.post(served + "/v1/chat/completions", json={
            "messages": ASK, "max_tokens": 4, "thinking_token_budget": -1})
        assert r.status == 200


async def test_responses_put_the_reasoning_before_a_forced_call(served):
    """A reasoning item, then the function_call the grammar forced after </think>; streamed
    in the same order."""
    tool = {"type": "function", "name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
        "additionalProperties": False}}
    bias = {str(await end_id(served)): 4.0}
    seen, seen_thought = 0, False
    for seed in SEEDS:
        body = {"input": ASK[0]["content"], "tools": [tool], "tool_choice": "required",
                "seed": seed, "temperature": 1.0, "max_output_tokens": 120, "logit_bias": bias}
        got = await post(served, "/v1/responses", body)
        kinds = [item["type"] for item in got["output"]]
        if "function_call" not in kinds:  # still thinking at max_output_tokens
            continue
        seen += 1
        calls = kinds[1:] if kinds[0] == "reasoning" else kinds  # required: one call or more
        assert calls and set(calls) == {"function_call"}, kinds
        assert all(json.loads(item["arguments"]).keys() == {"a"}
                   for item in got["output"] if item["type"] == "function_call")
        seen_thought = seen_thought or kinds[0] == "reasoning"
        async with aiohttp.ClientSession() as s, \
                s.post(served + "/v1/responses", json={**body, "stream": True}) as r:
            events = sse_events(await r.text())
        done = [e["item"]["type"] for e in events if e["type"] == "response.output_item.done"]
        assert done == kinds
    assert seen and seen_thought
