"""The response object's fields as vLLM 0.33 gives them (its ResponsesResponse.from_request,
dumped whole: a field not sent is null or its default), in the body, the stream's
response.created / response.completed events and a stored GET."""

from __future__ import annotations

import json

import aiohttp

PLAIN = {"input": "hi", "max_output_tokens": 3, "temperature": 0}


async def answers(srv, body: dict) -> list[dict]:
    """The response objects of ``body``: the body, its GET, and a stream's created and
    completed events' (then that one's GET)."""
    out = []
    async with aiohttp.ClientSession() as s:
        for stream in (False, True):
            async with s.post(srv.v1 + "/responses", json={**body, "stream": stream}) as r:
                assert r.status == 200, await r.text()
                if stream:
                    events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                              if line.startswith("data: ")]
                    got = [e["response"] for e in events if e["type"] in
                           ("response.created", "response.completed", "response.incomplete")]
                else:
                    got = [await r.json()]
            async with s.get(f"{srv.v1}/responses/{got[-1]['id']}") as r:
                out += got + [await r.json()]
    assert len(out) == 5
    return out


async def test_text_is_null_when_not_sent_and_echoed_whole_when_sent(srv):
    """vLLM echoes the request's ``text`` (None when not sent) as ResponseTextConfig dumps it:
    ``verbosity`` and a json_schema format's ``description`` / ``strict`` null if not sent."""
    assert [r["text"] for r in await answers(srv, PLAIN)] == [None] * 5
    sent = {"format": {"type": "text"}, "verbosity": "low"}
    assert [r["text"] for r in await answers(srv, {**PLAIN, "text": sent})] == [sent] * 5
    schema = {"type": "json_schema", "name": "t", "schema": {"type": "object"}}
    got = await answers(srv, {**PLAIN, "text": {"format": schema}})
    want = {"format": {**schema, "description": None, "strict": None}, "verbosity": None}
    assert [r["text"] for r in got] == [want] * 5
    async with aiohttp.ClientSession() as s:
        bad = {**PLAIN, "text": {"verbosity": "loud"}}
        async with s.post(srv.v1 + "/responses", json=bad) as r:
            err = (await r.json())["error"]
            assert r.status == 400 and err["param"] == "text.verbosity", err


async def test_tool_choice_is_none_without_tools_and_metadata_null_when_not_sent(srv):
    """vLLM's check_tool_usage makes an ``auto`` / ``none`` choice without tools ``none`` (the
    request it echoes); ``metadata`` is the request's, null when not sent."""
    def seen(got: list[dict]) -> set[tuple[str, str]]:
        return {(r["tool_choice"], json.dumps(r["metadata"])) for r in got}

    assert seen(await answers(srv, PLAIN)) == {("none", "null")}
    sent = {**PLAIN, "tool_choice": "auto", "tools": [], "metadata": {"k": "v"}}
    assert seen(await answers(srv, sent)) == {("none", '{"k": "v"}')}
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    got = await answers(srv, {**PLAIN, "tools": [tool]})
    assert {r["tool_choice"] for r in got} == {"auto"}  # tools: the default stays auto


# every field of vLLM's ResponsesResponse a plain request gets (its dump; metrics left out)
VLLM_FIELDS = {"id", "created_at", "incomplete_details", "instructions", "metadata", "model",
               "object", "output", "parallel_tool_calls", "temperature", "tool_choice", "tools",
               "top_p", "background", "max_output_tokens", "max_tool_calls",
               "previous_response_id", "prompt", "prompt_cache_options", "prompt_cache_key",
               "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier",
               "status", "text", "top_logprobs", "truncation", "usage", "user",
               "presence_penalty", "frequency_penalty", "kv_transfer_params",
               "ec_transfer_params", "input_messages", "output_messages"}
NULLS = VLLM_FIELDS - {"id", "created_at", "model", "object", "output", "parallel_tool_calls",
                       "incomplete_details",
                       "temperature", "tool_choice", "tools", "top_p", "background",
                       "max_output_tokens", "service_tier", "status", "truncation", "usage",
                       "presence_penalty", "frequency_penalty"}


async def test_a_plain_response_has_vllms_fields_and_defaults(srv):
    for r in await answers(srv, PLAIN):
        assert set(r) == VLLM_FIELDS, set(r) ^ VLLM_FIELDS
        assert {k: r[k] for k in NULLS} == dict.fromkeys(NULLS), r
        assert (r["service_tier"], r["presence_penalty"], r["frequency_penalty"],
                r["max_output_tokens"], r["tools"]) == ("auto", 0.0, 0.0, 3, [])
    asked = {**PLAIN, "include": ["message.output_text.logprobs"], "presence_penalty": 0.5,
             "frequency_penalty": -0.5, "reasoning": {"effort": "low"}}
    for r in await answers(srv, asked):
        assert (r["top_logprobs"], r["presence_penalty"], r["frequency_penalty"]) == \
            (0, 0.5, -0.5)
        assert r["reasoning"] == {"effort": "low", "generate_summary": None, "summary": None}
    got = await answers(srv, {**asked, "top_logprobs": 2})
    assert [r["top_logprobs"] for r in got] == [2] * 5


async def test_max_output_tokens_is_what_the_request_may_generate(srv):
    """vLLM echoes its sampling max_tokens: the asked number lowered to the room the prompt
    leaves (NOTE(clamp)), and that room when none is asked."""
    async with aiohttp.ClientSession() as s:
        for asked in ({"max_output_tokens": 500}, {}):
            body = {"input": "hi", "stop_token_ids": [], "temperature": 0, **asked}
            async with s.post(srv.v1 + "/responses", json=body) as r:
                out = await r.json()
                assert r.status == 200, out
            room = srv.engine.config.max_model_len - out["usage"]["input_tokens"]
            assert out["max_output_tokens"] == room, out


async def test_usage_has_vllms_details_and_cache_writes(make_server):
    """vLLM's ResponseUsage from its SimpleContext: per-turn lists empty, tool output 0, and
    ``cache_write_tokens`` the prompt's full blocks less what was found cached (0 without
    prefix caching)."""
    for caching in (True, False):
        async with make_server(enable_prefix_caching=caching) as srv, \
                aiohttp.ClientSession() as s:
            block = srv.engine.config.block_size
            usages = []
            for _ in range(2):  # the same prompt twice: the second finds the first's blocks
                async with s.post(srv.v1 + "/responses", json=PLAIN) as r:
                    usages.append((await r.json())["usage"])
            for u in usages:
                ins, outs = u["input_tokens_details"], u["output_tokens_details"]
                assert (ins["input_tokens_per_turn"], ins["cached_tokens_per_turn"]) == ([], [])
                assert outs == {"reasoning_tokens": 0, "tool_output_tokens": 0,
                                "output_tokens_per_turn": [], "tool_output_tokens_per_turn": []}
                full = u["input_tokens"] // block * block if caching else 0
                assert full > 0 or not caching
                assert ins["cache_write_tokens"] == max(0, full - ins["cached_tokens"]), u
            assert (usages[1]["input_tokens_details"]["cached_tokens"] > 0) == caching


ECHOES = {"service_tier": "flex", "safety_identifier": "u-1", "prompt_cache_key": "k",
          "prompt_cache_retention": "24h", "max_tool_calls": 2,
          "prompt_cache_options": {"mode": "explicit", "ttl": "30m",
                                   "comparison_response_id": None}}


async def test_the_fields_vllm_echoes_are_echoed_and_checked(srv):
    """vLLM's ResponsesRequest takes service_tier, safety_identifier, the prompt cache fields
    and max_tool_calls, and its response repeats them (prompt_cache_options without prewarm,
    "in-memory" read as "in_memory"); a value its model refuses is a 400 naming the field."""
    sent = {**ECHOES, "prompt_cache_options": {"mode": "explicit", "prewarm": True}}
    for r in await answers(srv, {**PLAIN, **sent}):
        assert {k: r[k] for k in ECHOES} == ECHOES, r
    got = await answers(srv, {**PLAIN, "prompt_cache_retention": "in-memory"})
    assert {r["prompt_cache_retention"] for r in got} == {"in_memory"}
    bad = [("service_tier", "fast"), ("service_tier", None), ("prompt_cache_retention", "1h"),
           ("max_tool_calls", "2.5"), ("safety_identifier", 3),
           ("prompt_cache_options", {"ttl": "1h"})]
    async with aiohttp.ClientSession() as s:
        for name, value in bad:
            async with s.post(srv.v1 + "/responses", json={**PLAIN, name: value}) as r:
                err = (await r.json())["error"]
                assert r.status == 400 and err["param"].startswith(name), (name, err)


def part_logprobs(events: list[dict]) -> dict[str, object]:
    """What each event of a stream's message says of its output_text part's logprobs."""
    out: dict[str, object] = {}
    for e in events:
        if e["type"] in ("response.content_part.added", "response.content_part.done"):
            out[e["type"]] = e["part"]["logprobs"]
        elif e["type"] == "response.output_text.done":
            out[e["type"]] = e["logprobs"]
        elif e["type"] in ("response.completed", "response.incomplete"):  # NOTE(completed)
            out["terminal"] = e["response"]["output"][0]["content"][0]["logprobs"]
    return out


async def test_output_text_logprobs_are_null_when_none_as_vllms(srv):
    """vLLM's output_text part has logprobs null when none were asked (the body, the stream's
    done part and completed response, GET); content_part.added's part and the
    output_text.done event have [] (the done part has them when asked)."""
    async with aiohttp.ClientSession() as s:
        for include in ([], ["message.output_text.logprobs"]):
            body = {**PLAIN, "include": include}
            async with s.post(srv.v1 + "/responses", json=body) as r:
                got = (await r.json())["output"][0]["content"][0]["logprobs"]
            async with s.post(srv.v1 + "/responses", json={**body, "stream": True}) as r:
                events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                          if line.startswith("data: ")]
            async with s.get(f"{srv.v1}/responses/{events[-1]['response']['id']}") as r:
                stored = (await r.json())["output"][0]["content"][0]["logprobs"]
            seen = part_logprobs(events)
            assert (seen.pop("response.content_part.added"),
                    seen.pop("response.output_text.done")) == ([], [])
            if include:
                assert len(got) == 3 and all(len(v) == 3 for v in (*seen.values(), stored))
            else:
                assert [got, stored, *seen.values()] == [None] * 4, seen


async def test_a_message_without_text_has_no_part_as_vllms(srv):
    """vLLM's message of an empty output (a stop string first) has content [] (its
    _make_response_output_items), in the body and GET."""
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json=PLAIN) as r:
            text = (await r.json())["output"][0]["content"][0]["text"]
        async with s.post(srv.v1 + "/responses", json={**PLAIN, "stop": [text[0]]}) as r:
            out = await r.json()
        async with s.get(f"{srv.v1}/responses/{out['id']}") as r:
            stored = await r.json()
    for body in (out, stored):
        assert body["status"] == "completed", body
        assert [(i["type"], i["content"]) for i in body["output"]] == [("message", [])], body


async def test_tools_and_reasoning_are_echoed_as_vllms_models_dump_them(srv):
    """vLLM's request reads each tool as the openai package's FunctionTool and ``reasoning``
    as its Reasoning; the response dumps them whole: the optional fields null when not sent
    (FunctionTool's description / parameters / strict; Reasoning's effort /
    generate_summary / summary)."""
    bare = {"type": "function", "name": "n"}
    full = {"type": "function", "name": "a", "description": "A.", "strict": True,
            "parameters": {"type": "object"}}
    body = {**PLAIN, "tools": [bare, full], "reasoning": {"summary": "auto"}}
    got = await answers(srv, body)
    nulls = {"description": None, "parameters": None, "strict": None}
    assert [r["tools"] for r in got] == [[{**bare, **nulls}, full]] * 5, got[0]["tools"]
    want = {"effort": None, "generate_summary": None, "summary": "auto"}
    assert [r["reasoning"] for r in got] == [want] * 5
