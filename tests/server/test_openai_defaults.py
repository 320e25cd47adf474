"""Defaults and names as vLLM has them: generation_config.json sampling defaults, several
served model names, --dtype spellings, X-Request-Id, chat max_tokens up to the context."""

from __future__ import annotations

import argparse
import json
import logging

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from kvpool.errors import ConfigError
from kvpool.runtime.engine.config import EngineConfig
from kvpool.server import serve
from kvpool.server.app import ROUTES_KEY, build_app
from kvpool.server.generation_config import load_generation_defaults
from kvpool.server.protocol import RequestParser
from tests.configs import engine_config
from tests.server.serve_process import subprocess_server

CHAT = [{"role": "user", "content": "hello"}]


def client(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture
def gen_dir(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.0, "top_p": 0.5, "max_new_tokens": 5, "do_sample": True,
         "eos_token_id": 1}))
    return str(tmp_path)


async def test_generation_config_sets_the_defaults(make_server, gen_dir):
    async with make_server(app_options={"generation_config": gen_dir}) as srv:
        m = srv.engine.model_name
        async with client(srv.url) as c:
            a = await c.completions.create(model=m, prompt="Once upon")  # no max_tokens
            b = await c.completions.create(model=m, prompt="Once upon", max_tokens=5)
            greedy = await c.completions.create(model=m, prompt="Once upon", max_tokens=5,
                                                temperature=0)
            assert a.usage.completion_tokens == 5  # max_new_tokens, not OpenAI's 16
            assert a.choices[0].text == b.choices[0].text == greedy.choices[0].text
            hot = {(await c.completions.create(model=m, prompt="Once upon", max_tokens=5,
                                               temperature=1.0, top_p=1.0, seed=s)
                    ).choices[0].text for s in (1, 2, 3)}
            assert len(hot) > 1  # what the request sends wins
            chat = await c.chat.completions.create(model=m, messages=CHAT)
            assert chat.usage.completion_tokens == 5
    async with make_server(app_options={"generation_config": "vllm"}) as srv:
        async with client(srv.url) as c:
            r = await c.completions.create(model=srv.engine.model_name, prompt="Once upon",
                                           extra_body={"ignore_eos": True})
            assert r.usage.completion_tokens == 16


async def test_a_named_generation_config_caps_max_tokens(make_server, gen_dir):
    """NOTE(gen-ceiling): --generation-config DIR's max_new_tokens is a ceiling (vLLM's
    override_max_tokens); the model directory's own file (auto) is only the default."""
    body = {"prompt": "Once upon", "max_tokens": 9, "ignore_eos": True}
    chat = {"messages": CHAT, "max_completion_tokens": 9, "ignore_eos": True}
    async with make_server(app_options={"generation_config": gen_dir}) as srv, \
            aiohttp.ClientSession() as s:
        for path, req in (("/completions", body), ("/chat/completions", chat)):
            async with s.post(srv.v1 + path, json=req) as r:
                got = await r.json()
                assert r.status == 200, got
                assert got["usage"]["completion_tokens"] == 5
                assert got["choices"][0]["finish_reason"] == "length"
        # the same file as the model directory's own (auto): the default, not a ceiling
        parser = RequestParser(srv.engine.tokenizer, ["m"], 64, max_n=1, max_tokens_limit=64,
                               max_stop=4, defaults=load_generation_defaults("auto", gen_dir))
        assert parser.parse_completion({"prompt": "hi", "max_tokens": 9}).params.max_tokens == 9
        assert parser.parse_completion({"prompt": "hi"}).params.max_tokens == 5


def test_generation_config_settings(gen_dir, tmp_path_factory, caplog):
    assert load_generation_defaults("auto", gen_dir) == {"temperature": 0.0, "top_p": 0.5,
                                                         "max_tokens": 5}
    assert load_generation_defaults("vllm", gen_dir) == {}
    assert load_generation_defaults("auto", None) == {}  # the built-in model: no directory
    empty = str(tmp_path_factory.mktemp("empty"))
    assert load_generation_defaults("auto", empty) == {}
    with caplog.at_level(logging.WARNING, "kvpool.server"):
        # a DIR without the file: no defaults, as vLLM starts, said once with the fix
        assert load_generation_defaults(empty, None) == {}
    assert [r.getMessage().count("--generation-config vllm") for r in caplog.records] == [1]
    with pytest.raises(ConfigError, match="no such directory"):
        load_generation_defaults(empty + "-typo", None)
    (tmp_path_factory.mktemp("bad") / "generation_config.json").write_text("[1")
    with pytest.raises(ConfigError, match="not readable JSON"):
        load_generation_defaults("auto", str(tmp_path_factory.getbasetemp() / "bad0"))


def test_dtype_spellings_and_served_names_parse():
    p = serve.add_serve_args(argparse.ArgumentParser())
    for given, want in (("half", "float16"), ("float", "float32"), ("float16", "float16"),
                        ("bfloat16", "bfloat16"), ("float32", "float32"), ("auto", "auto")):
        assert serve.config_from_args(p.parse_args(["--dtype", given])).dtype == want
    args = p.parse_args(["--served-model-name", "a", "b"])
    assert serve.config_from_args(args).served_model_name == "a"
    assert serve.ServeOptions.from_args(args).served_model_name == ("a", "b")


async def test_kvpool_serve_accepts_every_served_model_name():
    """NOTE(first-name): any served name is served, and answered as the first (vLLM's
    model_name()), streamed or not, on every generating route; and the default --max-stop is
    vLLM's VLLM_MAX_STOP_STRINGS, 4."""
    async with subprocess_server("--served-model-name", "first", "second",
                                 "--dtype", "float") as (proc, url, lines):
        async with client(url) as c:
            assert [m.id for m in (await c.models.list()).data] == ["first", "second"]
            for name in ("first", "second"):
                r = await c.completions.create(model=name, prompt="hi", max_tokens=2)
                assert r.model == "first"
            with pytest.raises(openai.NotFoundError):
                await c.completions.create(model="kvpool-tiny", prompt="hi", max_tokens=2)
            with pytest.raises(openai.BadRequestError) as err:  # 4 stop strings, not 16
                await c.completions.create(model="first", prompt="hi", max_tokens=2,
                                           stop=list("abcde"))
            assert err.value.body["param"] == "stop"
        async with aiohttp.ClientSession() as s:
            for path, body in (("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2}),
                               ("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
                               ("/v1/messages", {"messages": CHAT, "max_tokens": 2})):
                for stream in (False, True):
                    async with s.post(url + path, json={**body, "model": "second",
                                                        "stream": stream}) as r:
                        text = await r.text()
                    assert r.status == 200 and '"second"' not in text, (path, text[:300])
                    assert '"model": "first"' in text or '"model":"first"' in text, path
        proc.terminate()
        await proc.wait()


async def test_x_request_id_is_echoed_or_made_up(srv):
    body = {"prompt": "hi", "max_tokens": 2}
    async with aiohttp.ClientSession() as s:
        for stream in (False, True):
            async with s.post(srv.url + "/v1/completions", json={**body, "stream": stream},
                              headers={"X-Request-Id": "trace-42"}) as r:
                assert r.status == 200 and r.headers["X-Request-Id"] == "trace-42"
                await r.read()
        ids = set()
        for headers in ({}, {"X-Request-Id": "x" * 300}, {"X-Request-Id": "a b"}):
            async with s.post(srv.url + "/v1/completions", json=body, headers=headers) as r:
                ids.add(r.headers["X-Request-Id"])
                assert len(r.headers["X-Request-Id"]) == 32
        assert len(ids) == 3
        async with s.post(srv.url + "/v1/completions", json={"prompt": 5},
                          headers={"X-Request-Id": "bad-1"}) as r:
            assert r.status == 400 and r.headers["X-Request-Id"] == "bad-1"
    async with client(srv.url) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model=srv.engine.model_name, messages=CHAT, max_tokens=2,
            extra_headers={"X-Request-Id": "from-openai"})
        assert raw.headers["x-request-id"] == "from-openai"


def test_chat_max_tokens_default_is_the_room_the_context_leaves():
    from kvpool.runtime.engine.async_engine import AsyncEngine

    assert EngineConfig().max_tokens_limit is None
    # a context past the old 4096 cap (the pool need not hold it: nothing runs here)
    engine = AsyncEngine(engine_config("device_only", max_model_len=8192))
    parser = build_app(engine)[ROUTES_KEY].parser
    req = parser.parse_chat({"messages": CHAT})
    assert req.params.max_tokens == 8192 - len(req.prompt_ids) > 4096
    assert parser.parse_chat({"messages": CHAT, "max_tokens": 6000}).params.max_tokens == 6000
