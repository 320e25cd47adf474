"""The Responses API through the official ``openai`` client: ``client.responses.create`` on a
real ``kvpool serve DIR`` (a tiny model directory with its own ChatML template) answers what
the chat completion of the same messages answers, streamed as OpenAI's event sequence;
``previous_response_id`` continues the stored conversation of the same tenant only; the store
is bounded (least recently used out); bad input is a 400 (or 404) OpenAI error."""

from __future__ import annotations

import subprocess

import openai
import pytest
from openai import AsyncOpenAI

from kvpool.server.field_policy import IGNORED_FIELDS_HEADER
from kvpool.server.responses_api import RESPONSES_KEY
from kvpool.runtime.model.loader import load_tokenizer
from tests.runtime.model.helpers import save_hf_model
from tests.server.chat_templates import CHATML, model_dir
from tests.server.serve_process import ROOT, serve_command, subprocess_server

pytest.importorskip("transformers")

STREAM_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
                 "response.content_part.added"]
END_EVENTS = ["response.output_text.done", "response.content_part.done",
              "response.output_item.done"]
FIRST = [{"role": "system", "content": "Be brief."},
         {"role": "user", "content": "What do blocks store?"}]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf_chatml")
    save_hf_model(d, "qwen2", vocab_size=320)
    model_dir(d, CHATML, "<|im_start|>", "<|im_end|>")
    return d


def client(url: str, tenant: str | None = None) -> AsyncOpenAI:
    headers = {"X-Tenant": tenant} if tenant else None
    return AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60,
                       default_headers=headers)


async def chat_text(c: AsyncOpenAI, model: str, messages, n: int, **kw) -> tuple[str, int]:
    r = await c.chat.completions.create(model=model, messages=messages, max_tokens=n,
                                        temperature=0, **kw)
    return r.choices[0].message.content, r.usage.prompt_tokens


async def streamed(c: AsyncOpenAI, **kw) -> tuple[list, str]:
    events = [e async for e in await c.responses.create(stream=True, **kw)]
    return events, "".join(e.delta for e in events if e.type == "response.output_text.delta")


async def test_responses_equal_chat_and_continue_on_kvpool_serve(chat_dir):
    async with subprocess_server(str(chat_dir), "--tenant-header", "X-Tenant") as (_, url, _l), \
            client(url, "a") as c:
        model = (await c.models.list()).data[0].id
        first, want = await check_first_turn(c, model)
        await check_next_turn(c, model, first, want, printable_bias(chat_dir))
        async with client(url, "b") as other:  # another tenant never sees a's responses
            with pytest.raises(openai.NotFoundError) as info:
                await other.responses.create(model=model, input="x",
                                             previous_response_id=first.id)
            assert info.value.body["param"] == "previous_response_id"
            assert info.value.body["code"] == "previous_response_not_found"
            with pytest.raises(openai.NotFoundError):
                await other.responses.retrieve(first.id)
        assert (await c.responses.retrieve(first.id)).output_text == want  # a still does


async def check_first_turn(c: AsyncOpenAI, model: str):
    """Text input and message input, JSON and streamed: the chat completion's greedy text."""
    want, prompt_tokens = await chat_text(c, model, FIRST, 6)
    r = await c.responses.create(model=model, instructions="Be brief.", temperature=0,
                                 input="What do blocks store?", max_output_tokens=6)
    assert r.output_text == want and r.usage.input_tokens == prompt_tokens
    assert (r.status, r.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert r.output[0].role == "assistant" and r.usage.output_tokens == 6
    parts = [{"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "What do blocks store?"}]}]
    events, text = await streamed(c, model=model, instructions="Be brief.", input=parts,
                                  temperature=0, max_output_tokens=6)
    kinds = [e.type for e in events]
    deltas = len(kinds) - len(STREAM_EVENTS) - len(END_EVENTS) - 1
    assert kinds == STREAM_EVENTS + ["response.output_text.delta"] * deltas + END_EVENTS \
        + ["response.incomplete"]  # cut by max_output_tokens: NOTE(completed)
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert text == want == events[-1].response.output_text == events[-4].text
    assert events[0].response.status == "in_progress"
    async with c.responses.stream(model=model, input=parts, instructions="Be brief.",
                                  temperature=0, max_output_tokens=6) as helper:
        last = [e async for e in helper][-1]  # the client's own event parsing
        with pytest.raises(RuntimeError):  # its final response needs response.completed,
            await helper.get_final_response()  # with vLLM and OpenAI alike (NOTE(completed))
    assert (last.type, last.response.output_text, last.response.status) == \
        ("response.incomplete", want, "incomplete")
    return r, want


def printable_bias(d) -> dict[str, int]:
    """logit_bias keeping greedy text to printable ASCII tokens: the tiny model's own choice
    here is a run of lone non-UTF-8 bytes, which are no text (held back, as vLLM's)"""
    tok = load_tokenizer(d)
    return {str(i): -100 for i in range(tok.vocab_size)
            if not (t := tok.decode([i])).isprintable() or not t.isascii() or not t}


async def check_next_turn(c: AsyncOpenAI, model: str, first, want: str,
                          bias: dict[str, int]) -> None:
    """previous_response_id: the previous input and output are in the prompt (not its
    instructions); a stop string ends the response completed."""
    turn2 = [FIRST[1], {"role": "assistant", "content": want},
             {"role": "user", "content": "And then?"}]
    want2, prompt2 = await chat_text(c, model, turn2, 4, extra_body={"logit_bias": bias})
    r2 = await c.responses.create(model=model, input="And then?", temperature=0,
                                  previous_response_id=first.id, max_output_tokens=4,
                                  extra_body={"logit_bias": bias})
    assert r2.output_text == want2 and r2.usage.input_tokens == prompt2
    assert r2.previous_response_id == first.id
    assert (await c.responses.retrieve(r2.id)).output_text == want2
    assert len(want2) >= 3, want2  # a stop string inside it (partial bytes are not text)
    stop = {"stop": [want2[1:3]], "logit_bias": bias}
    want3, _ = await chat_text(c, model, turn2, 4, extra_body=stop)
    events, text = await streamed(c, model=model, input="And then?", temperature=0,
                                  previous_response_id=first.id, max_output_tokens=4,
                                  extra_body=stop)
    assert text == want3 and events[-1].response.status == "completed"
    assert events[-1].response.incomplete_details is None


@pytest.mark.parametrize("body, param", [
    ({}, "input"),
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": 3}, "input"),
    ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "function_call_output", "output": "1"}]}, "input[0].call_id"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "max_output_tokens": 100000}, "max_output_tokens"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format"),
    ({"input": "hi", "instructions": 5}, "instructions"),
    ({"input": "hi", "temperature": -1}, "temperature"),
    ({"input": "hi", "model": "nope"}, "model"),
    ({"input": "hi", "previous_response_id": "resp_unknown"}, "previous_response_id"),
    ({"input": "hi", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"input": "hi", "metadata": {"k" * 65: "v"}}, "metadata"),
    ({"input": "hi", "metadata": {"k": "v" * 513}}, "metadata"),
    ({"input": "hi", "metadata": {"k": 1}}, "metadata"),
])
async def test_bad_input_is_an_openai_error(srv, body, param):
    async with client(srv.url) as c:
        with pytest.raises(openai.APIStatusError) as info:
            await c.post("/responses", body=body, cast_to=object)
        err = info.value.body
        assert info.value.status_code in (400, 404) and err["param"] == param, err
        assert err["type"] == "invalid_request_error" and err["message"]
        await c.responses.create(input="still fine", max_output_tokens=2)  # others unaffected


async def test_fields_it_does_not_use_are_ignored_and_listed(srv):
    async with client(srv.url) as c:
        raw = await c.responses.with_raw_response.create(
            input="hi", max_output_tokens=2, extra_body={"no_such": 1, "modalities": ["text"]})
        assert raw.headers[IGNORED_FIELDS_HEADER] == "modalities,no_such"
        assert raw.parse().usage.output_tokens == 2


async def test_the_store_is_bounded_least_recently_used_out(srv):
    srv.app[RESPONSES_KEY].store.max_entries = 2
    async with client(srv.url) as c:
        async def one(text: str, **kw):
            return await c.responses.create(input=text, max_output_tokens=2, **kw)

        first, second = await one("one"), await one("two")
        await c.responses.retrieve(first.id)  # used: second is now the oldest
        third = await one("three")
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(second.id)
        with pytest.raises(openai.NotFoundError):
            await one("four", previous_response_id=second.id)
        assert (await c.responses.retrieve(first.id)).id == first.id
        assert (await one("next", previous_response_id=third.id)).previous_response_id == \
            third.id
        unstored = await one("private", store=False)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(unstored.id)
        assert len(srv.app[RESPONSES_KEY].store) == 2


async def test_a_busy_tenant_evicts_its_own_responses_not_another_tenants(make_server):
    """response_store.py NOTE(fair-evict): tenant b storing many responses (store is on by
    default) leaves tenant a's conversation in the store; b loses its own oldest."""
    async with make_server(app_options={"tenant_header": "X-Tenant"}) as srv, \
            client(srv.url, "a") as a, client(srv.url, "b") as b:
        store = srv.app[RESPONSES_KEY].store
        store.max_entries = 4
        kept = [await a.responses.create(input=f"a{i}", max_output_tokens=2) for i in range(2)]
        flood = [await b.responses.create(input=f"b{i}", max_output_tokens=2)
                 for i in range(6)]
        for r in kept:  # a's responses are all still there, and continue
            assert (await a.responses.retrieve(r.id)).output_text == r.output_text
        with pytest.raises(openai.NotFoundError):  # b's oldest made room
            await b.responses.retrieve(flood[0].id)
        assert (await b.responses.retrieve(flood[-1].id)).id == flood[-1].id
        assert (len(store), store.held("a"), store.held("b")) == (4, 2, 2)
        nxt = await a.responses.create(input="more", max_output_tokens=2,
                                       previous_response_id=kept[0].id)
        assert nxt.previous_response_id == kept[0].id
        # a now holds the most: its own least recently used (kept[1]) made room
        assert (store.held("a"), store.held("b")) == (2, 2)
        with pytest.raises(openai.NotFoundError):
            await a.responses.retrieve(kept[1].id)


def blob(n: int) -> dict[str, str]:
    """``metadata`` of about ``n`` characters within OpenAI's limits (16 values of 512)."""
    return {f"blob{i}": "x" * 500 for i in range(-(-n // 500))}


async def test_large_responses_go_by_bytes_and_a_small_tenants_entry_stays(make_server):
    """response_store.py NOTE(response-bytes), NOTE(fair-evict): under a byte budget (the count
    bound far away) tenant b's second large response evicts b's first, not a's small one; a
    continuation of b's first gets 404, a's continues. ``metadata`` (kept in the body) makes a
    response large without a long prompt on the tiny model."""
    async with make_server(app_options={"tenant_header": "X-Tenant"}) as srv, \
            client(srv.url, "a") as a, client(srv.url, "b") as b:
        store = srv.app[RESPONSES_KEY].store
        store.set_bounds(1024, 8 * 1024)

        async def large(c: AsyncOpenAI, n: int, **kw):
            return await c.responses.create(input="big", max_output_tokens=2,
                                            metadata=blob(n), **kw)

        small = await a.responses.create(input="small", max_output_tokens=2)
        first = await large(b, 3500)
        assert (store.held("a"), store.held("b")) == (1, 1)
        second = await large(b, 3500)  # over 8 KB of b's: its least recently used goes
        assert (store.held_ids("a"), store.held_ids("b")) == ([small.id], [second.id])
        with pytest.raises(openai.NotFoundError):
            await b.responses.create(input="more", max_output_tokens=2,
                                     previous_response_id=first.id)
        too_big = await large(b, 8000)  # answered, but over the whole budget: not stored
        assert too_big.status in ("completed", "incomplete")
        with pytest.raises(openai.NotFoundError):
            await b.responses.retrieve(too_big.id)
        assert (await b.responses.retrieve(second.id)).id == second.id
        nxt = await a.responses.create(input="and?", max_output_tokens=2,
                                       previous_response_id=small.id)
        assert nxt.previous_response_id == small.id
        # a's two (its conversation's objects counted) pass the budget: b holds the most
        assert (store.held_ids("a"), store.held_ids("b")) == ([small.id, nxt.id], [])
        assert store.nbytes <= 8 * 1024


async def test_kvpool_serve_max_stored_responses():
    async with subprocess_server("--max-stored-responses", "1",
                                 "--max-stored-response-bytes", "6000") as (_, url, _l), \
            client(url) as c:
        first = await c.responses.create(input="one", max_output_tokens=2)
        second = await c.responses.create(input="two", max_output_tokens=2)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(first.id)
        huge = await c.responses.create(input="three", max_output_tokens=2,
                                        metadata=blob(8000))
        with pytest.raises(openai.NotFoundError):  # over the whole budget: not stored
            await c.responses.retrieve(huge.id)
        assert (await c.responses.retrieve(second.id)).output_text == second.output_text
    bad = subprocess.run([*serve_command(), "--max-stored-responses", "-1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--max-stored-responses -1: use a count >= 0" in bad.stderr
