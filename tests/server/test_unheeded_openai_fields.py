"""Request fields vLLM 0.33 serves with a 200 and leaves unheeded, which kvpool refused:
response_format keys vLLM's models lack (instructor's json_object + schema), any
json_schema.name, chat's pre-tools functions / function_call, and n past 16. Each is served
and listed in X-Kvpool-Ignored-Fields (sampling_fields.py NOTE(format-unheeded) and
NOTE(schema-name), body_fields.py NOTE(legacy-functions), config.py NOTE(max-n))."""

from __future__ import annotations

import dataclasses
import json

import aiohttp
import pytest

from kvpool.errors import RequestError
from kvpool.runtime.engine.config import EngineConfig
from kvpool.server.field_policy import IGNORED_FIELDS_HEADER
from tests.server.parsers import parser

OK = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12}
COMPLETION = {"prompt": "hi", "max_tokens": 12}
# response_format -> (the constraint kind it runs as, the names listed as ignored)
FORMATS = [
    ({"type": "json_object", "schema": OK}, "json_object", ["response_format.schema"]),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": OK,
                                             "additionalProperties": False}},
     "json_schema", ["response_format.json_schema.additionalProperties"]),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": OK}, "strict": True},
     "json_schema", ["response_format.strict"]),
    ({"type": "text", "json_schema": None}, None, []),  # a field of vLLM's model, null
    ({"type": "text", "json_schema": {"name": "x", "schema": OK}}, None,
     ["response_format.json_schema"]),
    ({"type": "json_object", "json_schema": {"name": "x", "schema": OK}}, "json_object",
     ["response_format.json_schema"]),
]
DEFAULT_MAX_N = next(f.default for f in dataclasses.fields(EngineConfig) if f.name == "max_n")
NAMES = ["Movie Review", "movie.review", "x" * 65, "", "électron/1"]
FUNCTIONS = [{"name": "get_weather", "description": "d", "parameters": {"type": "object"}}]


def kind(req) -> str | None:
    spec = req.params.response_format
    return None if spec is None else spec.kind


@pytest.mark.parametrize("fmt, runs_as, listed", FORMATS)
def test_response_format_keys_vllm_ignores_are_listed(fmt, runs_as, listed):
    for parse, body in ((parser().parse_chat, CHAT), (parser().parse_completion, COMPLETION)):
        req = parse({**body, "response_format": fmt})
        assert (kind(req), list(req.ignored)) == (runs_as, listed), fmt


def test_any_schema_name_and_legacy_functions_are_served():
    p = parser()
    for name in NAMES:  # NOTE(schema-name): vLLM's name is a plain str
        fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": OK}}
        req = p.parse_chat({**CHAT, "response_format": fmt})
        assert kind(req) == "json_schema" and req.ignored == (), name
    for extra, listed in (({"functions": FUNCTIONS}, ("functions",)),
                          ({"functions": FUNCTIONS, "function_call": "auto"},
                           ("function_call", "functions"))):
        req = p.parse_chat({**CHAT, **extra})
        assert req.ignored == listed and req.tools is None, extra


def test_reject_unknown_fields_refuses_them_by_name():
    strict = parser(reject_unknown_fields=True)
    for body, name in (({**CHAT, "functions": FUNCTIONS}, "functions"),
                       ({**CHAT, "response_format": FORMATS[0][0]}, "response_format.schema"),
                       ({**COMPLETION, "response_format": FORMATS[2][0]},
                        "response_format.strict")):
        parse = strict.parse_chat if "messages" in body else strict.parse_completion
        with pytest.raises(RequestError) as e:
            parse(body)
        assert (e.value.param, e.value.code) == (name, "unknown_parameter")
    # a field of vLLM's model that it never uses is listed, never refused
    req = strict.parse_chat({**CHAT, "response_format": FORMATS[4][0]})
    assert req.ignored == ("response_format.json_schema",)


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict, list[str]]:
    async with s.post(url, json=body) as r:
        ignored = [n for n in r.headers.get(IGNORED_FIELDS_HEADER, "").split(",") if n]
        return r.status, json.loads(await r.text()), ignored


async def test_probe_requests_are_200_with_the_fields_listed(srv):
    """The outside probe's requests, over HTTP: each was a 400."""
    async with aiohttp.ClientSession() as s:
        for fmt, _, listed in FORMATS:
            for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
                status, got, ignored = await post(s, srv.url + path,
                                                  {**body, "response_format": fmt})
                assert (status, ignored) == (200, listed), (path, fmt, got)
        closed = {**OK, "additionalProperties": False}
        fmt = {"type": "json_schema", "json_schema": {"name": "Movie Review", "schema": closed}}
        status, got, _ = await post(s, srv.url + "/v1/chat/completions",
                                    {**CHAT, "max_tokens": 60, "temperature": 0,
                                     "response_format": fmt})
        assert status == 200 and got["choices"][0]["finish_reason"] == "stop", got
        assert set(json.loads(got["choices"][0]["message"]["content"])) == {"ok"}, got
        status, got, ignored = await post(s, srv.url + "/v1/chat/completions",
                                          {**CHAT, "functions": FUNCTIONS,
                                           "function_call": "auto"})
        assert (status, ignored) == (200, ["function_call", "functions"]), got
        assert not got["choices"][0]["message"].get("tool_calls"), got  # no function runs


async def test_n_64_runs_at_the_default_max_n(make_server):
    """NOTE(max-n): the default --max-n is vLLM's 16384; n=64 runs as 64 forks under
    --max-num-seqs 64 (kvpool's default), n past it as child requests (NOTE(apart) in
    kvpool/sched/request_checker.py); best_of past 16 still runs n, listed."""
    async with make_server(max_n=DEFAULT_MAX_N, max_num_seqs=64,
                           num_device_blocks=160) as srv, aiohttp.ClientSession() as s:
        url = srv.url + "/v1/completions"
        body = {"prompt": "1+1=", "max_tokens": 2, "temperature": 1.0, "ignore_eos": True}
        status, got, _ = await post(s, url, {**body, "n": 64})
        assert status == 200, got
        assert sorted(c["index"] for c in got["choices"]) == list(range(64))
        assert got["usage"]["completion_tokens"] == 128
        status, got, ignored = await post(s, url, {**body, "n": 2, "best_of": 99})
        assert (status, len(got["choices"]), ignored) == (200, 2, ["best_of"]), got
        status, got, _ = await post(s, url, {**body, "n": 65})
        assert status == 200 and len(got["choices"]) == 65, got
