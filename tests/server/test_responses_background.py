"""The Responses fields vLLM 0.33 refuses or runs apart from the request: ``prompt`` (a stored
prompt template) is vLLM's 400, and ``background``."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from kvpool.server.app import GATE_KEY
from kvpool.server.responses_api import RESPONSES_KEY
from tests.server.helpers import generated_tokens, wait_free, wait_until

TENANT = "X-Tenant"


@pytest.mark.parametrize("prompt", [{"id": "pmpt_1"}, {"id": "pmpt_1", "version": "2"}, "p"])
async def test_a_prompt_template_is_vllms_400_in_its_words(srv, prompt):
    body = {"model": srv.engine.model_name, "input": "x", "max_output_tokens": 2}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json={**body, "prompt": prompt}) as r:
            err = (await r.json())["error"]
            assert r.status == 400 and err["param"] == "prompt", err
            assert "prompt template is not supported" in err["message"], err
        async with s.post(srv.v1 + "/responses", json={**body, "prompt": None}) as r:
            assert r.status == 200, await r.text()  # null is not a template


LONG = {"input": "A paged key value cache stores the attention keys", "temperature": 0,
        "max_output_tokens": 500, "ignore_eos": True}


async def poll(s: aiohttp.ClientSession, srv, rid: str) -> dict:
    """GET the response until it is no longer queued (vLLM's status while it runs)."""
    while True:
        async with s.get(f"{srv.v1}/responses/{rid}") as r:
            out = await r.json()
            assert r.status == 200, out
        if out["status"] != "queued":
            return out
        await asyncio.sleep(0.02)


async def test_background_answers_queued_and_get_reads_the_finished_response(srv):
    body = {"model": srv.engine.model_name, "input": "Say hi", "max_output_tokens": 6,
            "temperature": 0}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json=body) as r:
            want = await r.json()
        async with s.post(srv.v1 + "/responses", json={**body, "background": True}) as r:
            queued = await r.json()
            assert r.status == 200, queued
        assert (queued["status"], queued["background"], queued["output"], queued["usage"]) \
            == ("queued", True, [], None), queued
        done = await poll(s, srv, queued["id"])
        assert done["status"] == want["status"] and done["background"] is True, done
        assert done["output"][0]["content"] == want["output"][0]["content"]
        assert [done["usage"][k] for k in ("input_tokens", "output_tokens")] == \
            [want["usage"][k] for k in ("input_tokens", "output_tokens")]
        assert want["background"] is False
        follow = {**body, "input": "again", "previous_response_id": queued["id"]}
        async with s.post(srv.v1 + "/responses", json=follow) as r:
            assert r.status == 200, await r.text()  # it continues the stored conversation
        async with s.post(f"{srv.v1}/responses/{queued['id']}/cancel") as r:
            err = (await r.json())["error"]  # finished: vLLM's 400
            assert r.status == 400 and "Cannot cancel" in err["message"], err


async def test_cancel_stops_a_running_background_response(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        baseline, before = srv.free(), await generated_tokens(srv)
        async with s.post(srv.v1 + "/responses", json={**LONG, "background": True}) as r:
            out = await r.json()
            assert r.status == 200, out
        rid = out["id"]
        assert await wait_until(lambda: srv.free() < baseline)  # the run holds blocks
        async with s.post(f"{srv.v1}/responses/{rid}/cancel") as r:
            out = await r.json()
            assert r.status == 200 and out["status"] == "cancelled", out
        await wait_free(srv, baseline, timeout=5)
        assert srv.free() == baseline  # aborted: its blocks are back
        assert await generated_tokens(srv) - before < LONG["max_output_tokens"]
        async with s.get(f"{srv.v1}/responses/{rid}") as r:
            assert (await r.json())["status"] == "cancelled"
        async with s.post(f"{srv.v1}/responses/{rid}/cancel") as r:
            assert r.status == 400  # cancelled already: no longer running


async def test_a_continuation_of_a_running_response_continues_its_input(make_server):
    """vLLM stores the queued object at once and reads it as it is: a previous_response_id
    naming a response still running continues from its input, with no output of its own."""
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json={**LONG, "background": True}) as r:
            rid = (await r.json())["id"]
        follow = {"input": "again", "max_output_tokens": 2, "previous_response_id": rid}
        async with s.post(srv.v1 + "/responses", json=follow) as r:
            out = await r.json()
            assert r.status == 200, out
        turns = [{"role": "user", "content": LONG["input"]}, {"role": "user", "content": "again"}]
        async with s.post(srv.url + "/tokenize", json={"messages": turns}) as r:
            assert out["usage"]["input_tokens"] == (await r.json())["count"], out
        assert out["previous_response_id"] == rid
        async with s.post(f"{srv.v1}/responses/{rid}/cancel") as r:
            assert (await r.json())["status"] == "cancelled"  # it was still running


async def test_background_without_store_is_vllms_400(srv):
    body = {"input": "x", "max_output_tokens": 2, "background": True, "store": False}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json=body) as r:
            err = (await r.json())["error"]
            assert r.status == 400 and err["param"] == "background", err
            assert "background can only be used when `store` is true" in err["message"], err


def events_of(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


async def test_a_streamed_run_streams_and_get_replays_its_events(srv):
    body = {"input": "Say hi", "max_output_tokens": 6, "temperature": 0, "stream": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json=body) as r:
            want = events_of(await r.text())
        async with s.post(srv.v1 + "/responses", json={**body, "background": True}) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            got = events_of(await r.text())
        assert [e["type"] for e in got] == [e["type"] for e in want]
        assert [e["sequence_number"] for e in got] == list(range(len(got)))
        done = got[-1]["response"]
        assert got[0]["response"]["background"] is True and done["status"] == "incomplete"
        assert done["output"][0]["content"] == want[-1]["response"]["output"][0]["content"]
        url = f"{srv.v1}/responses/{done['id']}"
        async with s.get(url) as r:
            assert (await r.json())["output"] == done["output"]
        async with s.get(url, params={"stream": "true", "starting_after": "2"}) as r:
            assert events_of(await r.text()) == got[3:]
        async with s.post(srv.v1 + "/responses", json={**body, "stream": False,
                                                       "background": True}) as r:
            plain = (await poll(s, srv, (await r.json())["id"]))["id"]
        async with s.get(f"{srv.v1}/responses/{plain}", params={"stream": "true"}) as r:
            err = (await r.json())["error"]  # vLLM's: no events were kept for it
            assert r.status == 400 and err["message"].startswith("Unknown response_id"), err
        async with s.get(f"{srv.v1}/responses/resp_nope", params={"stream": "true"}) as r:
            assert r.status == 404


async def test_a_streamed_run_goes_on_when_its_client_leaves(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        body = {**LONG, "max_output_tokens": 300, "background": True, "stream": True}
        resp = await s.post(srv.v1 + "/responses", json=body)
        line = await resp.content.readline()
        while not line.startswith(b"data: "):  # response.created's data
            line = await resp.content.readline()
        rid = json.loads(line[6:])["response"]["id"]
        resp.close()  # the client leaves mid-stream
        async with s.get(f"{srv.v1}/responses/{rid}", params={"stream": "true",
                                                              "starting_after": "0"}) as r:
            rest = events_of(await r.text())  # live, then to the end
        assert rest[0]["sequence_number"] == 1 and rest[-1]["type"] == "response.incomplete"
        assert rest[-1]["response"]["usage"]["output_tokens"] == 300


async def test_a_full_queue_refuses_a_background_response_at_once(make_server):
    """NOTE(refused-at-once): a full --max-queue is the plain POST's 503 for a background one,
    streamed or not, and nothing is stored or run. A run that fails as it runs (aborted) is
    stored "failed", ``error`` its HTTP answer's code and message (middleware.py
    known_error); a request the pool can never hold is a 400 at once."""
    async with make_server(max_num_seqs=1, max_queue=1, max_model_len=2048,
                           max_tokens_limit=2048, num_device_blocks=160) as srv, \
            aiohttp.ClientSession() as s:
        body = {**LONG, "max_output_tokens": 2000, "background": True}
        async with s.post(srv.v1 + "/responses", json=body) as r:
            rid = (await r.json())["id"]  # in flight until aborted below
        answers = []
        for extra in ({}, {"background": True}, {"background": True, "stream": True}):
            ask = {"input": "x", "max_output_tokens": 2, "request_id": "refused", **extra}
            async with s.post(srv.v1 + "/responses", json=ask) as r:
                got = await r.text()  # the error's JSON; before, a 200 (SSE when streamed)
                code = json.loads(got)["error"]["code"] if r.status != 200 else got[:40]
                answers.append((r.status, code, r.headers.get("Retry-After")))
        assert answers == [(503, "queue_full", answers[0][2])] * 3 and answers[0][2], answers
        async with s.get(f"{srv.v1}/responses/refused") as r:
            assert r.status == 404  # never stored
        assert len(srv.app[RESPONSES_KEY].background) == srv.engine.requests_in_flight() == 1
        await srv.app[GATE_KEY].abort_all()
        done = await poll(s, srv, rid)
        assert (done["status"], done["output"], done["error"]["code"]) \
            == ("failed", [], "request_aborted"), done
        assert done["error"]["message"].endswith("; retry later"), done
    async with make_server(max_model_len=1024, num_device_blocks=4) as srv, \
            aiohttp.ClientSession() as s:
        body = {**LONG, "max_output_tokens": 200, "background": True}
        async with s.post(srv.v1 + "/responses", json=body) as r:
            err = (await r.json())["error"]
            assert r.status == 400 and err["param"] == "max_tokens", err


async def test_runs_are_bounded_and_each_tenants_own(make_server):
    async with make_server(app_options={"tenant_header": TENANT}) as srv, \
            aiohttp.ClientSession(headers={TENANT: "a"}) as s:
        route = srv.app[RESPONSES_KEY]
        route.background.limit = 1
        body = {**LONG, "background": True, "max_output_tokens": 200}
        async with s.post(srv.v1 + "/responses", json=body) as r:
            rid = (await r.json())["id"]
        async with s.post(srv.v1 + "/responses", json=body) as r:
            err = (await r.json())["error"]
            assert r.status == 429 and err["code"] == "too_many_background_responses", err
        other = {TENANT: "b"}  # another tenant does not see the running response
        async with s.get(f"{srv.v1}/responses/{rid}", headers=other) as r:
            assert r.status == 404
        async with s.post(f"{srv.v1}/responses/{rid}/cancel", headers=other) as r:
            assert r.status == 404
        assert (await poll(s, srv, rid))["status"] == "incomplete"
        assert len(route.background) == 0


async def test_shutdown_cancels_what_still_runs(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        baseline = srv.free()
        async with s.post(srv.v1 + "/responses", json={**LONG, "background": True}) as r:
            assert r.status == 200
        assert await wait_until(lambda: srv.free() < baseline)
        await srv.server.close()  # on_shutdown cancels the run before the engine stops
        assert len(srv.app[RESPONSES_KEY].background) == 0 and srv.free() == baseline


async def test_background_needs_the_store_as_vllm_does(srv):
    srv.app[RESPONSES_KEY].store.set_bounds(0, 1 << 20)  # --max-stored-responses 0
    body = {"input": "x", "max_output_tokens": 2, "background": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json=body) as r:
            err = (await r.json())["error"]
            assert r.status == 400 and err["param"] == "background", err
            assert "does not support the background mode" in err["message"], err


async def test_the_openai_client_reads_a_background_response(srv):
    async with AsyncOpenAI(base_url=srv.v1, api_key="unused", max_retries=0, timeout=60) as c:
        r = await c.responses.create(model=srv.engine.model_name, input="hi",
                                     max_output_tokens=3, background=True)
        assert (r.status, r.background) == ("queued", True)
        while r.status == "queued":
            await asyncio.sleep(0.02)
            r = await c.responses.retrieve(r.id)
        assert r.status == "incomplete" and r.usage.output_tokens == 3
        events = [e async for e in await c.responses.create(
            model=srv.engine.model_name, input="hi", max_output_tokens=3, background=True,
            stream=True)]
        again = [e async for e in await c.responses.retrieve(
            events[-1].response.id, stream=True, starting_after=1)]
    assert events[-1].type == "response.incomplete" and again == events[2:]


@pytest.mark.parametrize("query, streams", [
    ("stream=t", True), ("stream=Y", True), ("stream=ON", True), ("stream=1", True),
    ("stream=false&stream=yes", True), ("stream=f", False), ("stream=n", False),
    ("stream=true&stream=No", False), ("", False),
])
async def test_get_reads_stream_as_vllms_query_does(srv, query, streams):
    """NOTE(query-bool): GET's ``stream`` takes the strings vLLM's FastAPI reads as booleans
    (pydantic's), the last one when repeated: the events of a streamed run, or its object."""
    body = {"input": "Say hi", "max_output_tokens": 2, "stream": True, "background": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json=body) as r:
            events = events_of(await r.text())
        async with s.get(f"{srv.v1}/responses/{events[-1]['response']['id']}?{query}") as r:
            assert r.status == 200, await r.text()
            got = events_of(await r.text()) if streams else await r.json()
    assert got == (events if streams else events[-1]["response"])


@pytest.mark.parametrize("query", ["stream=maybe", "stream=", "stream=true&stream=2"])
async def test_a_bad_stream_query_is_a_400_naming_it(srv, query):
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json={"input": "hi", "max_output_tokens": 1,
                                                       "stream": True}) as r:
            rid = events_of(await r.text())[-1]["response"]["id"]
        async with s.get(f"{srv.v1}/responses/{rid}?{query}") as r:
            err = (await r.json())["error"]
            assert r.status == 400, err
    assert (err["param"], err["type"]) == ("query.stream", "invalid_request_error"), err
    assert set(err) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("value, after", [
    (["0", "2"], 2), (["1_000"], 1000), ([" 5 "], 5), (["5.0"], 5), (["-1"], -1),
    (["abc", "+4"], 4), (["1_0.00"], 10),
])
async def test_get_reads_starting_after_as_vllms_query_does(srv, value, after):
    """NOTE(lax-int): GET's ``starting_after`` is read as vLLM's FastAPI reads an int query
    parameter (pydantic's lax int), the last one when repeated."""
    body = {"input": "Say hi", "max_output_tokens": 6, "stream": True, "background": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json=body) as r:
            events = events_of(await r.text())
        query = [("stream", "true"), *(("starting_after", v) for v in value)]
        async with s.get(f"{srv.v1}/responses/{events[-1]['response']['id']}",
                         params=query) as r:
            assert r.status == 200, await r.text()
            got = events_of(await r.text())
    assert len(events) > 6 and got == events[after + 1:]


@pytest.mark.parametrize("query", [
    "stream=true&starting_after=abc", "stream=true&starting_after=5.5",
    "stream=true&starting_after=", "stream=true&starting_after=1__0",
    "stream=true&starting_after=3&starting_after=x", "starting_after=abc",
    "stream=maybe&starting_after=abc",
])
async def test_a_bad_starting_after_is_a_400_naming_it_as_vllm_does(srv, query):
    """vLLM validates ``starting_after`` before its route runs, streamed or not, and names it
    ``query.starting_after`` (its first error when ``stream`` is bad too)."""
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json={"input": "hi", "max_output_tokens": 1,
                                                       "stream": True}) as r:
            rid = events_of(await r.text())[-1]["response"]["id"]
        async with s.get(f"{srv.v1}/responses/{rid}?{query}") as r:
            err = (await r.json())["error"]
            assert r.status == 400, err
    assert (err["param"], err["type"]) == ("query.starting_after", "invalid_request_error"), err
    assert "Input should be a valid integer" in err["message"], err


async def test_one_id_names_one_response_while_its_run_goes_on(make_server):
    """responses_api.py NOTE(one-id): a request of either kind naming a running run's id is
    the 400 a second background one gets; GET and a continuation read the run's queued object
    even once the store has evicted it (the probe's sync request replaced it)."""
    async with make_server(max_model_len=1024, num_device_blocks=80) as srv, \
            aiohttp.ClientSession() as s:
        srv.app[RESPONSES_KEY].store.max_entries = 1
        rid = "dup-1"
        async with s.post(srv.v1 + "/responses", json={**LONG, "background": True,
                                                       "request_id": rid}) as r:
            assert r.status == 200, await r.text()
        for background in (True, False):
            body = {"input": "x", "max_output_tokens": 2, "background": background,
                    "request_id": rid}
            async with s.post(srv.v1 + "/responses", json=body) as r:
                err = (await r.json())["error"]
                assert r.status == 400 and err["param"] == "request_id", err
                assert "is still running" in err["message"], err
        async with s.post(srv.v1 + "/responses", json={"input": "other",
                                                       "max_output_tokens": 2}) as r:
            assert r.status == 200  # the count bound (1) evicts the queued object
        async with s.get(f"{srv.v1}/responses/{rid}") as r:
            assert (await r.json())["status"] == "queued"
        follow = {"input": "again", "max_output_tokens": 2, "previous_response_id": rid}
        async with s.post(srv.v1 + "/responses", json=follow) as r:
            out = await r.json()
            assert r.status == 200, out  # it continues what GET shows, the run's input
        turns = [{"role": "user", "content": LONG["input"]}, {"role": "user", "content": "again"}]
        async with s.post(srv.url + "/tokenize", json={"messages": turns}) as r:
            assert out["usage"]["input_tokens"] == (await r.json())["count"], out
        async with s.post(f"{srv.v1}/responses/{rid}/cancel") as r:
            assert (await r.json())["status"] == "cancelled"  # it was still running


async def test_delete_is_openais_and_cancels_a_running_run_first(make_server):
    """responses_api.py NOTE(delete-running): DELETE answers OpenAI's deleted object; then the
    id is the 404 of one never issued, as it is to another tenant before; a running
    background response is cancelled (its blocks back) and removed."""
    async with make_server(app_options={"tenant_header": TENANT}, max_model_len=1024,
                           num_device_blocks=80) as srv, \
            aiohttp.ClientSession(headers={TENANT: "a"}) as s:
        baseline = srv.free()
        async with s.post(srv.v1 + "/responses", json={"input": "hi", "max_output_tokens": 2}) as r:
            rid = (await r.json())["id"]
        async with s.post(srv.v1 + "/responses", json={**LONG, "background": True}) as r:
            running = (await r.json())["id"]
        assert await wait_until(lambda: srv.free() < baseline)  # the run holds blocks
        for gone in (rid, running):
            async with s.delete(f"{srv.v1}/responses/{gone}", headers={TENANT: "b"}) as r:
                assert (r.status, (await r.json())["error"]["code"]) == \
                    (404, "response_not_found")
            async with s.delete(f"{srv.v1}/responses/{gone}") as r:
                assert r.status == 200 and await r.json() == {
                    "id": gone, "object": "response.deleted", "deleted": True}
            for method in ("GET", "DELETE"):
                async with s.request(method, f"{srv.v1}/responses/{gone}") as r:
                    assert (r.status, (await r.json())["error"]["code"]) == \
                        (404, "response_not_found")
        assert len(srv.app[RESPONSES_KEY].background) == 0
        await wait_free(srv, baseline, timeout=5)
        async with AsyncOpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=60,
                               default_headers={TENANT: "a"}) as c:
            kept = await c.responses.create(input="hi", max_output_tokens=2)
            assert await c.responses.delete(kept.id) is None  # the SDK reads a 200
            with pytest.raises(openai.NotFoundError):
                await c.responses.create(input="more", max_output_tokens=2,
                                         previous_response_id=kept.id)
