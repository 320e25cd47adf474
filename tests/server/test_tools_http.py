"""Function calling through the official openai client on a real ``kvpool serve DIR
--enable-auto-tool-choice --tool-call-parser hermes`` on 127.0.0.1 (a tiny random-weight Qwen2
directory whose template renders tools): named and required tool choice return calls whose
arguments validate against the tool's schema (the grammar forces them), streamed deltas join
to the non-streamed call, tool messages reach the template, bad tools are 400s naming the
param; without the flag ``auto`` is vLLM's 400 and ``none`` still works."""

from __future__ import annotations

import argparse
import json

import aiohttp
import jsonschema
import openai
import pytest
from openai import AsyncOpenAI

from kvpool.server import serve
from kvpool.server.tools.request import AUTO_NEEDS_FLAGS
from tests.runtime.model.helpers import save_hf_model
from tests.server.chat_templates import CALLED, TOOL_CHATML, as_template_sees, hf_ids, model_dir
from tests.server.helpers import ServerProcess, sse_chunks

pytest.importorskip("transformers")

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 8},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["city", "days"], "additionalProperties": False}
ZONE = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]},
                                         "dst": {"type": "boolean"}},
        "required": ["zone", "dst"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": ZONE}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": ZONE}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# auto: the model's own choice, read by the hermes parser; a regex makes the random model
# write a Hermes call after some text
HERMES_REGEX = ('Checking\\.<tool_call>\\{"name": "get_time", "arguments": \\{"zone": '
                '"(UTC|CET)", "dst": (true|false)\\}\\}</tool_call>')


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("tool_model")
    save_hf_model(d, "qwen2", vocab_size=320)  # room for the template's special tokens
    model_dir(d, TOOL_CHATML, "<|im_start|>", "<|im_end|>")
    server = ServerProcess(d, "--num-device-blocks", "256", "--max-model-len", "2048",
                           "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    try:
        yield server.url, d
    finally:
        server.stop()


def client(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def check_calls(choice, names=tuple(SCHEMAS), finish="tool_calls") -> list:
    """A named choice finishes "stop" (OpenAI's and vLLM's answer), auto and required
    "tool_calls"."""
    calls = choice.message.tool_calls
    assert choice.finish_reason == finish and calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return calls


async def test_named_and_required_calls_validate(served):
    url, _ = served
    async with client(url) as c:
        model = (await c.models.list()).data[0].id
        for seed in (1, 2):
            r = await c.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                                tool_choice=NAMED, n=3, temperature=1.0,
                                                seed=seed, max_tokens=200)
            for ch in r.choices:
                assert len(check_calls(ch, ("get_weather",), "stop")) == 1
                assert ch.message.content == ""  # vLLM's, NOTE(forced-content)
            r = await c.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                                tool_choice="required", n=3, temperature=1.0,
                                                seed=seed, max_tokens=200,
                                                parallel_tool_calls=False)
            for ch in r.choices:
                assert len(check_calls(ch)) == 1 and ch.message.content == ""
        r = await c.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                            tool_choice="required", temperature=0,
                                            max_tokens=400)
        assert check_calls(r.choices[0])


def joined(chunks) -> tuple:
    """(content, [(name, arguments)], finish_reason) the way a client joins stream deltas."""
    content, calls, finish = "", {}, None
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta, finish = chunk.choices[0].delta, chunk.choices[0].finish_reason or finish
        content += delta.content or ""
        for tc in delta.tool_calls or ():
            if tc.id is not None:  # the opening delta: id, type and name
                assert tc.index not in calls and tc.type == "function" and tc.function.name
                calls[tc.index] = [tc.function.name, tc.function.arguments or ""]
            else:
                assert tc.function.name is None
                calls[tc.index][1] += tc.function.arguments
    return content or None, [tuple(calls[k]) for k in sorted(calls)], finish


async def test_streamed_deltas_join_to_the_non_streamed_call(served):
    url, _ = served
    async with client(url) as c:
        model = (await c.models.list()).data[0].id
        for choice, extra in ((NAMED, {}), ("required", {}),
                              ("auto", {"structured_outputs": {"regex": HERMES_REGEX}})):
            kw = dict(model=model, messages=ASK, tools=TOOLS, tool_choice=choice,
                      temperature=0, max_tokens=300, extra_body=extra)
            body = (await c.chat.completions.create(**kw)).choices[0]
            finish = "stop" if choice is NAMED else "tool_calls"
            calls = check_calls(body, finish=finish)
            want = (body.message.content or None, [(t.function.name, t.function.arguments)
                                           for t in calls], finish)
            chunks = [ch async for ch in await c.chat.completions.create(**kw, stream=True)]
            assert joined(chunks) == want, choice
            if choice == "auto":
                assert want[0] == "Checking." and want[1][0][0] == "get_time"
        # auto, and the model writes no call: plain content, finish "stop" or "length", and
        # no tool_calls key (None here): vLLM 0.33's ChatMessage drops an empty list
        r = await c.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                            temperature=0, max_tokens=8)
        assert r.choices[0].message.tool_calls is None and r.choices[0].message.content


async def test_hermes_call_deltas_carry_vllms_null_content(served):
    """vLLM 0.33's hermes parser sends each tool-call delta as DeltaMessage(content=...,
    tool_calls=...) with content set, null where no text came with the calls; a content delta
    has no tool_calls key (its empty list is dropped). The call deltas had no content key."""
    url, _ = served
    chunks = await sse_chunks(url + "/v1/chat/completions", {
        "messages": ASK, "tools": TOOLS, "temperature": 0, "max_tokens": 300, "stream": True,
        "structured_outputs": {"regex": HERMES_REGEX}})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [d for d in deltas if "tool_calls" in d]
    assert len(calls) == 2 and all(d["content"] is None for d in calls), deltas
    assert all(set(d) <= {"role", "content"} for d in deltas if d not in calls), deltas


async def test_a_required_array_cut_short_is_no_call_and_empty_content_as_vllm_answers(served):
    """NOTE(cut-required): required, max_tokens cuts the forced array: the body has no call
    and content "" (NOTE(forced-content); it was null), finish "length" (vLLM's answer; it had
    the JSON text as content, or the calls whose name was read), no tool_calls key (vLLM drops
    an empty list; it was []); the stream sends the call as far as it went, else nothing, and
    no content delta."""
    url, _ = served
    async with client(url) as c:
        model = (await c.models.list()).data[0].id
        for cut in (2, 40):  # before / after the first call's name
            kw = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required",
                      temperature=0, max_tokens=cut)
            body = (await c.chat.completions.create(**kw)).choices[0]
            assert (body.message.content, body.message.tool_calls, body.finish_reason) == \
                ("", None, "length"), body
            chunks = [ch async for ch in await c.chat.completions.create(**kw, stream=True)]
            content, calls, finish = joined(chunks)
            assert content is None and finish == "length" and len(calls) == (cut > 2), calls
            if calls:
                assert calls[0][0] in SCHEMAS
                with pytest.raises(ValueError):
                    json.loads(calls[0][1])  # the arguments as far as they went


async def test_tool_messages_reach_the_template(served):
    url, d = served
    async with client(url) as c:
        model = (await c.models.list()).data[0].id
        r = await c.chat.completions.create(model=model, messages=CALLED, tools=TOOLS,
                                            tool_choice="none", temperature=0, max_tokens=4)
        want = hf_ids(d, as_template_sees(CALLED), tools=TOOLS, add_generation_prompt=True)
        assert r.usage.prompt_tokens == len(want)
        assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != \
            "tool_calls"


# what pydantic (the openai SDK's pydantic_function_tool, LangChain) writes for a nested model
NESTED = {"$defs": {"Zone": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                             "required": ["zone"], "additionalProperties": False}},
          "type": "object", "properties": {"where": {"$ref": "#/$defs/Zone"},
                                           "dst": {"type": "boolean"}},
          "required": ["where", "dst"], "additionalProperties": False}


async def test_required_reads_each_tools_defs(served):
    """required puts every tool's parameters inside one array schema: their ``$defs`` go to its
    root (as vLLM does), where ``#/$defs/...`` still resolves; it was a 400 ("Pointer
    '/$defs/Zone' does not exist")."""
    url, _ = served
    tools = [TOOLS[0], {"type": "function", "function": {"name": "get_time",
                                                         "parameters": NESTED}}]
    async with client(url) as c:
        model = (await c.models.list()).data[0].id
        names = set()
        for seed in (1, 2, 3, 4):
            r = await c.chat.completions.create(model=model, messages=ASK, tools=tools,
                                                tool_choice="required", temperature=1.0,
                                                seed=seed, max_tokens=300,
                                                parallel_tool_calls=False)
            calls = r.choices[0].message.tool_calls
            assert r.choices[0].finish_reason == "tool_calls" and calls
            for call in calls:
                schema = NESTED if call.function.name == "get_time" else WEATHER
                jsonschema.validate(json.loads(call.function.arguments), schema)
                names.add(call.function.name)
        assert "get_time" in names  # the tool whose $ref resolves through the hoisted $defs
        # one name defined two ways by two tools: a 400 naming the second
        other = {**NESTED, "$defs": {"Zone": {"type": "string"}}}
        with pytest.raises(openai.BadRequestError) as err:
            await c.chat.completions.create(
                model=model, messages=ASK, tool_choice="required", max_tokens=2,
                tools=tools + [{"type": "function", "function": {"name": "f",
                                                                 "parameters": other}}])
        assert err.value.body["param"] == "tools[2].function.parameters", err.value.body


@pytest.mark.parametrize("kw, param", [
    ({"tools": {"type": "function"}}, "tools"),
    ({"tools": [{"type": "function", "function": {"description": "x"}}]},
     "tools[0].function.name"),
    ({"tools": [TOOLS[0], {"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {
            "x": {"type": "string", "pattern": "("}}}}}], "tool_choice": "required"},
     "tools[1].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]},
     "tools[0].function.parameters"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": "maybe"},
     "parallel_tool_calls"),
    ({"tools": []}, "tools"),  # vLLM's and OpenAI's 400s, accepted here before
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
])  # a constraint field beside a forcing choice is dropped: test_forced_tool_constraints.py
async def test_bad_tools_are_400s_naming_the_param(served, kw, param):
    url, _ = served
    async with client(url) as c:
        with pytest.raises(openai.BadRequestError) as err:
            await c.chat.completions.create(model=(await c.models.list()).data[0].id,
                                            messages=ASK, max_tokens=2,
                                            **{k: v for k, v in kw.items()
                                               if k in ("tools", "tool_choice")},
                                            extra_body={k: v for k, v in kw.items()
                                                        if k not in ("tools", "tool_choice")})
        error = err.value.body
        assert error["param"] == param and error["type"] == "invalid_request_error", error


BFCL = {"type": "dict", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def test_a_schema_is_checked_only_where_it_is_compiled(served):
    """NOTE(schema-modes): a Berkeley function-calling (BFCL) style ``"type": "dict"`` schema
    is served under auto and none on chat, Responses and Messages, as vLLM keeps parameters a
    plain dict; required and a named choice compile it: a 400 naming it, as before. A named
    choice compiles only its own tool's."""
    url, _ = served
    bfcl = {"type": "function", "function": {"name": "lookup", "parameters": BFCL}}
    chat = {"messages": ASK, "max_tokens": 2, "tools": [bfcl]}
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/v1/models") as r:
            model = (await r.json())["data"][0]["id"]
        for path, body in (
                ("/v1/chat/completions", {**chat, "tool_choice": "auto"}),
                ("/v1/chat/completions", {**chat, "tool_choice": "none"}),
                ("/v1/chat/completions", {**chat, "tools": [bfcl, TOOLS[0]],
                                          "tool_choice": NAMED}),
                ("/v1/responses", {"input": "hi", "max_output_tokens": 2, "tools": [
                    {"type": "function", "name": "lookup", "parameters": BFCL}]}),
                ("/v1/messages", {"model": model, "messages": ASK, "max_tokens": 2, "tools": [
                    {"name": "lookup", "input_schema": BFCL}]})):
            async with s.post(url + path, json=body) as r:
                assert r.status == 200, (path, await r.text())
        for choice in ("required", {"type": "function", "function": {"name": "lookup"}}):
            async with s.post(url + "/v1/chat/completions",
                              json={**chat, "tool_choice": choice}) as r:
                out = await r.json()
            assert r.status == 400 and out["error"]["param"] == "tools[0].function.parameters"


async def test_without_the_flag_auto_is_vllms_400_and_none_works(make_server):
    async with make_server(max_model_len=1024, num_device_blocks=160) as srv, \
            client(srv.url) as c:
        model = srv.engine.model_name
        for kw in ({"tool_choice": "auto"}, {}):  # tools alone: vLLM's default is auto
            with pytest.raises(openai.BadRequestError) as err:
                await c.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                                max_tokens=2, **kw)
            assert err.value.body["message"] == AUTO_NEEDS_FLAGS
            assert err.value.body["param"] == "tool_choice"
        r = await c.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                            tool_choice="none", max_tokens=4,
                                            extra_body={"ignore_eos": True})
        assert isinstance(r.choices[0].message.content, str) and r.usage.completion_tokens == 4
        # named needs no parser: the grammar forces the call (the built-in model and template)
        r = await c.chat.completions.create(model=model, messages=ASK, tools=TOOLS,
                                            tool_choice=NAMED, max_tokens=200, seed=3)
        assert len(check_calls(r.choices[0], ("get_weather",), "stop")) == 1


@pytest.mark.parametrize("flags, named", [
    (["--enable-auto-tool-choice"], "--tool-call-parser"),
    (["--enable-auto-tool-choice", "--tool-call-parser", "nope"], "--tool-call-parser nope"),
])
def test_bad_tool_flags_exit_2_naming_them(flags, named, capsys):
    assert serve.main(flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvpool serve: ") and named in err and "hermes" in err, err


def test_tool_flags_reach_the_options():
    args = serve.add_serve_args(argparse.ArgumentParser()).parse_args(
        ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"])
    o = serve.ServeOptions.from_args(args)
    assert (o.enable_auto_tool_choice, o.auto_tool_parser) == (True, "pythonic")
    parser_only = serve.ServeOptions.from_args(serve.add_serve_args(
        argparse.ArgumentParser()).parse_args(["--tool-call-parser", "hermes"]))
    assert parser_only.auto_tool_parser is None  # vLLM's rule: auto needs both flags
