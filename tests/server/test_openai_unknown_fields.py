"""Unknown body fields through the openai client: ignored as vLLM ignores them (listed in a
response header, logged once per name), or 400 with --reject-unknown-fields."""

from __future__ import annotations

import logging

import openai
import pytest
from openai import AsyncOpenAI

from kvpool.server.body_fields import ignored_header
from kvpool.server.field_policy import IGNORED_FIELDS_HEADER
from tests.server.serve_process import read_rest, subprocess_server

CHAT = [{"role": "user", "content": "hi"}]
# what gateways and newer clients add: OpenAI's own fields this server has no use for, and
# SGLang's (sglang-router forwards no_stop_trim on every request)
FOREIGN = {"metadata": {"trace": "t1"}, "store": False, "service_tier": "auto",
           "modalities": ["text"]}


def client(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


async def test_foreign_fields_are_ignored_and_listed(srv, caplog):
    caplog.set_level(logging.WARNING, logger="kvpool.server")
    async with client(srv.url) as c:
        plain = await c.chat.completions.create(model=srv.engine.model_name, messages=CHAT,
                                                max_tokens=6, temperature=0)
        raw = await c.chat.completions.with_raw_response.create(
            model=srv.engine.model_name, messages=CHAT, max_tokens=6, temperature=0,
            extra_body={"no_stop_trim": True}, **FOREIGN)
        assert raw.headers[IGNORED_FIELDS_HEADER] == \
            "metadata,modalities,no_stop_trim,service_tier,store"
        assert raw.parse().choices[0].message.content == plain.choices[0].message.content
        stream = await c.completions.with_raw_response.create(
            model=srv.engine.model_name, prompt="hello", max_tokens=4, stream=True,
            extra_body={"no_stop_trim": True, "max_token": 9})
        assert stream.headers[IGNORED_FIELDS_HEADER] == "max_token,no_stop_trim"
        chunks = [ch async for ch in stream.parse()]
        assert sum(1 for ch in chunks if ch.choices and ch.choices[0].text) >= 1
        again = await c.completions.with_raw_response.create(
            model=srv.engine.model_name, prompt="x", max_tokens=1, extra_body={"store": 1})
        assert again.headers[IGNORED_FIELDS_HEADER] == "store"
        known = await c.completions.with_raw_response.create(
            model=srv.engine.model_name, prompt="x", max_tokens=1)
        assert IGNORED_FIELDS_HEADER not in known.headers
    warned = [r.getMessage() for r in caplog.records if "unknown request field" in r.message]
    for name in ("metadata", "store", "no_stop_trim", "max_token"):
        assert sum(f"'{name}'" in m for m in warned) == 1, warned  # once per name


async def test_reject_unknown_fields_keeps_openai_strictness(make_server):
    async with make_server(app_options={"reject_unknown_fields": True}) as srv:
        async with client(srv.url) as c:
            with pytest.raises(openai.BadRequestError) as info:
                await c.chat.completions.create(model=srv.engine.model_name, messages=CHAT,
                                                max_tokens=2, metadata={"a": "b"})
            err = info.value.body
            assert err["param"] == "metadata" and err["code"] == "unknown_parameter"
            ok = await c.chat.completions.create(model=srv.engine.model_name, messages=CHAT,
                                                 max_tokens=2)
            assert ok.choices[0].finish_reason == "length"


def test_header_value_is_always_a_valid_header():
    value = ignored_header(("a\r\nX-Evil: 1", "é", "ok_1") + tuple(f"f{i}" for i in range(40)))
    text = value[IGNORED_FIELDS_HEADER]
    assert text.isascii() and "\r" not in text and "\n" not in text and " " not in text
    assert text.startswith("a%0D%0AX-Evil%3A%201,%C3%A9,ok_1,") and text.endswith("...11-more")


async def test_kvpool_serve_ignores_by_default_and_rejects_with_the_flag():
    for flags, rejects in (((), False), (("--reject-unknown-fields",), True)):
        async with subprocess_server(*flags) as (proc, url, lines):
            async with client(url) as c:
                kw = dict(model=(await c.models.list()).data[0].id, prompt="hi", max_tokens=2,
                          extra_body={"no_stop_trim": True})
                if rejects:
                    with pytest.raises(openai.BadRequestError) as info:
                        await c.completions.create(**kw)
                    assert info.value.body["param"] == "no_stop_trim"
                else:
                    raw = await c.completions.with_raw_response.create(**kw)
                    assert raw.headers[IGNORED_FIELDS_HEADER] == "no_stop_trim"
            proc.terminate()
            out = await read_rest(proc, lines)
            assert ("ignoring the unknown request field 'no_stop_trim'" in out) != rejects
